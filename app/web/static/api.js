// The gateway's HTTP API as seen from the page: JSON calls and the optional Bearer key.

const KEY_STORAGE = "chatgate.apiKey";

export function getApiKey() {
  return localStorage.getItem(KEY_STORAGE) || "";
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

export function authHeaders() {
  const key = getApiKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

export class ApiError extends Error {
  constructor(status, code, message, retryAfter = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter; // seconds, from a Retry-After header
  }
}

/** Retry-After in whole seconds (it may be a delay or an HTTP date), or null. */
function retryAfterSeconds(response) {
  const value = response.headers.get("Retry-After");
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, Math.ceil((when - Date.now()) / 1000));
}

/** Turn a non-2xx response into an ApiError using the {"error": {code, message}} body. */
export async function errorFrom(response) {
  let code = `http_${response.status}`;
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, code, message, retryAfterSeconds(response));
}

/** A JSON API call; resolves to the parsed body (null for 204). */
export async function callApi(method, path, body) {
  const headers = { Accept: "application/json", ...authHeaders() };
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await errorFrom(response);
  return response.status === 204 ? null : response.json();
}

/** Open an event stream (POST with a JSON body, or GET without one; `lastEventId` asks a
 *  resumed stream for what follows that event). */
export async function openStream(path, { body, signal, lastEventId } = {}) {
  const headers = { Accept: "text/event-stream", ...authHeaders() };
  if (lastEventId !== undefined && lastEventId !== null) headers["Last-Event-ID"] = String(lastEventId);
  const init = { method: body === undefined ? "GET" : "POST", headers, signal };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  return fetch(path, init);
}
