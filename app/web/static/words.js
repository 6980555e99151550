// What the page says, in plain words: errors, a message's status, its usage, its time.
// The gateway's own wording (error codes, upstream messages) stays in tooltips for whoever
// needs the detail.

import { ApiError, getApiKey } from "./api.js";

/** A failed request or stream, as a sentence a user can act on. */
export function explain(error) {
  if (error instanceof ApiError) return explainStatus(error);
  if (error instanceof TypeError) {
    // fetch() rejects with a TypeError when the gateway cannot be reached at all.
    return "Cannot reach the gateway: check the connection and try again.";
  }
  return error instanceof Error ? error.message : String(error);
}

function explainStatus(error) {
  if (error.status === 401) {
    // The gateway says the same for a wrong and a revoked key (nothing to help a guesser);
    // the page knows whether it sent one.
    return getApiKey() ? "This API key was not accepted: it is wrong or has been revoked. "
      + "Check it under API key." : "This gateway needs an API key: set it under API key.";
  }
  if (error.code === "budget_exceeded") {
    // The gateway's own sentence says when the budget renews; the wait makes it concrete.
    const wait = error.retryAfter ? ` (in ${duration(error.retryAfter)})` : "";
    return `${sentence(error.message)}${wait}.`;
  }
  if (error.status === 429 || error.status === 503) {
    const wait = error.retryAfter ? ` in ${error.retryAfter} s` : " in a moment";
    return error.status === 429 ? `Too many requests; try again${wait}.`
      : `The gateway is busy; try again${wait}.`;
  }
  if (error.code === "content_too_long" || error.code === "body_too_large") return tooLong(error);
  if (error.status === 404 && /^message\b/.test(error.message || "")) {
    return "This message no longer exists: reload the thread.";
  }
  if (error.status === 404) return "This thread no longer exists.";
  if (error.code === "thread_busy") return "This thread is still answering; wait for it to finish.";
  if (error.code === "not_last_message") {
    return "A newer message was sent meanwhile: only the last one can be edited.";
  }
  if (error.code === "not_regenerable") {
    return "This answer cannot be regenerated: only a finished answer to a question can.";
  }
  if (error.code === "not_editable" || error.code === "invalid_edit_of") {
    return "This message cannot be edited: only a question you wrote can.";
  }
  if (error.code === "invalid_title") return "A title needs 1 to 200 characters.";
  if (error.status >= 500) return "The gateway had a problem; try again.";
  return error.message; // 4xx: the gateway's message names the field and the limit
}

const count = new Intl.NumberFormat("en");

/** A message over the character limit, in characters (never the body's bytes). The limit is
 *  the gateway's, read from its sentence; the length is what the page sent. */
function tooLong(error) {
  const limit = /the limit is (\d+)/.exec(error.message || "");
  if (!limit) return sentence(error.message) + ".";
  const length = error.sentChars ? `This message is ${count.format(error.sentChars)} characters`
    : "This message is too long";
  return `${length}; the limit is ${count.format(Number(limit[1]))} characters. `
    + "Shorten it, or send it in parts.";
}

/** The gateway's message as a sentence: a capital first letter, no final stop (added by the
 *  caller after whatever it appends). */
function sentence(message) {
  const text = String(message || "").trim().replace(/\.$/, "");
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** A wait in words: "45 s", "12 min", "3 h 5 min". */
export function duration(seconds) {
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.ceil(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  return minutes % 60 ? `${hours} h ${minutes % 60} min` : `${hours} h`;
}

const FAILURES = {
  upstream_unavailable: "the model server could not be reached",
  upstream_timeout: "the model server took too long to answer",
  upstream_error: "the model server returned an error",
  internal_error: "the gateway had a problem",
  storage_error: "the answer could not be saved yet; reload in a minute",
  thread_deleted: "the thread was deleted while the answer streamed",
};

const INTERRUPTIONS = {
  key_revoked: "the API key was revoked",
  shutting_down: "the gateway was shutting down; ask again",
  client_gone: "the connection was lost",
  cancelled: "the gateway cancelled the answer",
  process_died: "the gateway restarted",
  database_unreachable: "the gateway lost its database; ask again",
  stale_streaming: "the gateway restarted",
  followup_worker_died: "the gateway restarted",
};

/** {text, detail} for a message's status badge; text is empty for a complete message. */
export function statusWords(message) {
  const meta = message.metadata || {};
  if (message.status === "failed") {
    const error = meta.error || {};
    const code = typeof error === "string" ? "" : error.code;
    const detail = typeof error === "string" ? error : error.message || code || "";
    return { text: `failed: ${FAILURES[code] || "the answer could not be finished"}`, detail };
  }
  if (message.status === "interrupted") {
    // The user's own Stop is no interruption: it did what was asked.
    if (meta.interrupted_reason === "stop_request") {
      return { text: "stopped", detail: "", kind: "stopped" };
    }
    const reason = INTERRUPTIONS[meta.interrupted_reason];
    return { text: reason ? `interrupted: ${reason}` : "interrupted", detail: "" };
  }
  return { text: "", detail: "" };
}

/** "201 tokens · $0.0012 · estimated" from a usage event or the stored metadata. */
export function usageWords(usage) {
  const total = usage.total_tokens ?? usage.tokens;
  if (total === undefined || total === null) return "";
  const parts = [`${total} tokens`];
  if (typeof usage.cost_usd === "number" && usage.cost_usd > 0) parts.push(`$${usage.cost_usd.toFixed(4)}`);
  // "provider" is the normal case; an estimate or a partial count says so.
  if (usage.usage_source && usage.usage_source !== "provider") parts.push(usage.usage_source);
  return parts.join(" · ");
}

/** How long the model thought, from the answer's `reasoning_ms`. */
export function thoughtWords(ms) {
  if (typeof ms !== "number" || ms < 0) return "Thought";
  if (ms < 1000) return "Thought for less than a second";
  const seconds = Math.round(ms / 1000);
  return seconds < 60 ? `Thought for ${seconds} s` : `Thought for ${duration(seconds)}`;
}

/** A message's time: the clock for today, the date and clock otherwise. */
export function timeWords(iso) {
  const when = new Date(iso);
  if (Number.isNaN(when.getTime())) return "";
  const clock = when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (when.toDateString() === new Date().toDateString()) return clock;
  return `${when.toLocaleDateString([], { day: "numeric", month: "short", year: "numeric" })} ${clock}`;
}
