// A turn's event stream that survives a dropped connection: when the stream breaks before
// its last event (message_end, error or catch_up), the page asks the gateway for the rest,
// after the last delta or reasoning piece it has (Last-Event-ID), and waits longer between tries the longer the
// gateway stays out of reach, as EventSource does. Deltas already shown are never shown
// twice: a delta whose id is not above the last one is skipped.
//
// A connection is taken as dropped when it errors, when the browser goes offline (a stalled
// connection often never errors by itself), or when nothing, not even the gateway's
// keep-alive ping, arrived for SILENCE_MS.

import { openStream } from "./api.js";
import { SseParser } from "./sse.js";

/** First wait before a reconnection; doubled after each failed try, up to the maximum. */
const FIRST_RETRY_MS = 300;
const MAX_RETRY_MS = 3000;
/** Give up after this long without a working connection (the gateway keeps a turn whose
 *  client left for its resume grace, 30 s by default). */
const GIVE_UP_MS = 60000;
const LAST_EVENTS = new Set(["message_end", "error", "catch_up"]);
/** Three of the gateway's keep-alive pings (CHATGATE_KEEPALIVE_S, 15 s by default). */
const SILENCE_MS = 45000;

/** The path of the resume endpoint of a turn. */
export function streamPath(threadId, messageId) {
  return `/api/threads/${encodeURIComponent(threadId)}/messages/${encodeURIComponent(messageId)}/stream`;
}

/**
 * Read `response` and, after a drop, the turn's resumed streams, calling `onEvent` once per
 * event in order, until the turn's last event, an abort (`signal`), or a refusal.
 * `ids()` gives {threadId, messageId} once message_start said them; `onRetry(waiting)`
 * tells the page whether it is reconnecting.
 */
export async function followTurnStream(response, { signal, ids, onEvent, onRetry }) {
  let lastId = 0;
  let retryMs = FIRST_RETRY_MS;
  let lostAt = null;
  for (;;) {
    let ended = false;
    try {
      for await (const event of eventsUntilDropped(response)) {
        if (event.event === "delta" || event.event === "reasoning") {
          // One id count for both channels: a resumed stream starts after the last of either.
          const id = Number(event.id);
          if (id && id <= lastId) continue; // already shown before the drop
          if (id) lastId = id;
        }
        retryMs = FIRST_RETRY_MS;
        lostAt = null;
        onRetry(false);
        onEvent(event);
        if (LAST_EVENTS.has(event.event)) ended = true;
      }
    } catch (error) {
      if (signal.aborted) throw error; // the page stopped reading on purpose
    }
    const { threadId, messageId } = ids();
    if (ended || signal.aborted || !messageId) return;
    lostAt ??= Date.now();
    response = await reconnect(streamPath(threadId, messageId), lastId, signal, () => {
      if (Date.now() - lostAt > GIVE_UP_MS) return null;
      onRetry(true);
      const wait = retryMs;
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
      return wait;
    });
    if (!response) return;
  }
}

/** The events of a fetch() Response whose body is an event stream, until it ends, errors,
 *  goes silent or the browser goes offline (then the body is cancelled and the events simply
 *  stop; a stalled connection would otherwise hold one of the browser's few connections to
 *  the gateway for good). */
export async function* eventsUntilDropped(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  const drop = () => reader.cancel().catch(() => {});
  let silence = setTimeout(drop, SILENCE_MS);
  window.addEventListener("offline", drop);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      clearTimeout(silence);
      silence = setTimeout(drop, SILENCE_MS);
      yield* parser.feed(value);
    }
  } finally {
    clearTimeout(silence);
    window.removeEventListener("offline", drop);
    reader.releaseLock();
  }
}

/** Try until the gateway answers: a stream to read on, or null (a refusal, or given up). */
async function reconnect(path, lastId, signal, nextWait) {
  for (;;) {
    const wait = nextWait();
    if (wait === null) return null;
    await pause(wait, signal);
    if (signal.aborted) return null;
    try {
      const response = await openStream(path, { signal, lastEventId: lastId || null });
      if (response.ok) return response;
      // 404, 409, 410: nothing more to read here; the stored row says the rest. Others
      // (a busy or restarting gateway) are worth another try.
      if (response.status >= 400 && response.status < 500 && response.status !== 429) {
        return null;
      }
    } catch (error) {
      if (signal.aborted) return null; // offline or unreachable: try again later
    }
  }
}

function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}
