// Chatgate page: thread list, history, composer, live streaming. Model output is only ever
// written with textContent / Text nodes (never innerHTML), so markup in it shows as text.

import { ApiError, callApi, errorFrom, getApiKey, openStream, setApiKey } from "./api.js";
import { readEvents } from "./sse.js";

const $ = (id) => document.getElementById(id);
const ui = {
  threadList: $("thread-list"), newThread: $("new-thread"), apiKey: $("api-key"),
  title: $("thread-title"), notice: $("notice"), messages: $("messages"),
  composer: $("composer"), input: $("message-input"), send: $("send"), stop: $("stop"),
};
const state = { threads: [], currentId: null, turn: null, watch: null, refreshTimer: null };

// ---------- small helpers ----------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function notify(message) {
  ui.notice.textContent = message || "";
}

function explain(error) {
  if (error instanceof ApiError && error.status === 401) {
    return "Not authorised: set a valid API key (bottom left).";
  }
  return error instanceof Error ? error.message : String(error);
}

function setBusy(busy) {
  document.body.dataset.turn = busy ? "running" : "idle"; // for tests and styling
  ui.send.disabled = busy;
  ui.stop.hidden = !busy;
}

function scrollToEnd() {
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

// ---------- threads ----------

async function refreshThreads() {
  try {
    const body = await callApi("GET", "/api/threads");
    state.threads = body.threads || [];
    renderThreadList();
  } catch (error) {
    notify(explain(error));
  }
}

function renderThreadList() {
  ui.threadList.replaceChildren();
  for (const thread of state.threads) {
    const item = el("button", "thread-item");
    item.type = "button";
    item.dataset.threadId = thread.id;
    item.dataset.testid = "thread-item";
    if (thread.id === state.currentId) item.classList.add("active");
    item.append(el("span", "title", thread.title || "Untitled thread"));
    item.append(el("span", "preview", thread.preview || `${thread.message_count || 0} messages`));
    item.addEventListener("click", () => openThread(thread.id));
    ui.threadList.append(item);
  }
  const current = state.threads.find((t) => t.id === state.currentId);
  if (current) ui.title.textContent = current.title || "Untitled thread";
}

async function createThread() {
  const thread = await callApi("POST", "/api/threads", {});
  state.threads.unshift({ ...thread, message_count: 0, preview: "" });
  await openThread(thread.id);
  return thread.id;
}

async function openThread(id) {
  state.currentId = id;
  history.replaceState(null, "", `#thread=${id}`);
  renderThreadList();
  ui.messages.replaceChildren();
  notify("");
  await loadHistory(id);
  watchThread(id);
  ui.input.focus();
}

async function loadHistory(id) {
  try {
    const body = await callApi("GET", `/api/threads/${encodeURIComponent(id)}/messages`);
    if (state.currentId !== id) return;
    ui.messages.replaceChildren(...(body.messages || []).map(renderMessage));
    scrollToEnd();
  } catch (error) {
    notify(explain(error));
  }
}

// ---------- messages ----------

function renderMessage(message) {
  const node = el("article", `message ${message.role}`);
  node.dataset.testid = `message-${message.role}`;
  if (message.id) node.dataset.messageId = message.id;
  if (message.metadata && message.metadata.synthetic) node.classList.add("synthetic");
  const content = el("div", "content");
  content.dataset.testid = "message-content";
  content.append(document.createTextNode(message.content || ""));
  node.append(content, el("div", "footer"));
  setStatus(node, message.status, statusDetail(message));
  return node;
}

function statusDetail(message) {
  const error = message.metadata && message.metadata.error;
  if (!error) return "";
  return typeof error === "string" ? error : error.message || error.code || "";
}

function setStatus(node, status, detail) {
  node.classList.toggle("streaming", status === "streaming");
  const footer = node.querySelector(".footer");
  let badge = footer.querySelector(".status");
  if (!status || status === "complete") {
    if (badge) badge.remove();
    return;
  }
  if (!badge) {
    badge = el("span", "status");
    badge.dataset.testid = "message-status";
    footer.prepend(badge);
  }
  badge.className = `status ${status}`;
  badge.textContent = detail ? `${status}: ${detail}` : status;
}

function showUsage(node, usage) {
  const footer = node.querySelector(".footer");
  let span = footer.querySelector(".usage");
  if (!span) {
    span = el("span", "usage");
    footer.append(span);
  }
  const parts = [`${usage.total_tokens ?? "?"} tokens`];
  if (typeof usage.cost_usd === "number" && usage.cost_usd > 0) parts.push(`$${usage.cost_usd.toFixed(4)}`);
  // "provider" is the normal case; an estimate or a partial count says so.
  if (usage.usage_source && usage.usage_source !== "provider") parts.push(usage.usage_source);
  span.textContent = parts.join(" · ");
  span.title = `prompt ${usage.prompt_tokens}, completion ${usage.completion_tokens}`;
}

function appendMessage(message) {
  const node = renderMessage(message);
  ui.messages.append(node);
  scrollToEnd();
  return node;
}

// ---------- one turn ----------

async function sendMessage(text) {
  const threadId = state.currentId || (await createThread());
  const userNode = appendMessage({ role: "user", content: text, status: "complete" });
  const reply = appendMessage({ role: "assistant", content: "", status: "streaming" });
  const textNode = reply.querySelector(".content").firstChild;
  const controller = new AbortController();
  state.turn = { threadId, controller };
  setBusy(true);
  let ended = false;
  try {
    const response = await openStream(`/api/threads/${encodeURIComponent(threadId)}/messages`,
      { body: { content: text }, signal: controller.signal });
    if (!response.ok) {
      // Nothing was stored: take the bubbles back and give the text back to edit.
      userNode.remove();
      reply.remove();
      if (!ui.input.value) ui.input.value = text;
      notify(explain(await errorFrom(response)));
      return;
    }
    for await (const event of readEvents(response)) {
      ended = applyTurnEvent(event, userNode, reply, textNode) || ended;
      scrollToEnd();
    }
    if (!ended) setStatus(reply, "interrupted", "connection lost");
  } catch (error) {
    const stopped = error && error.name === "AbortError";
    setStatus(reply, "interrupted", stopped ? "stopped" : "connection lost");
  } finally {
    state.turn = null;
    setBusy(false);
    refreshThreads(); // the new title is stored with the answer
  }
}

/** Apply one event of a turn's stream; returns true when the turn is over. */
function applyTurnEvent(event, userNode, reply, textNode) {
  let data = {};
  try {
    data = event.data ? JSON.parse(event.data) : {};
  } catch {
    return false;
  }
  switch (event.event) {
    case "message_start":
      if (data.user_message_id) userNode.dataset.messageId = data.user_message_id;
      if (data.assistant_message_id) reply.dataset.messageId = data.assistant_message_id;
      return false;
    case "delta":
      if (typeof data.text === "string") textNode.appendData(data.text);
      return false;
    case "usage":
      showUsage(reply, data);
      return false;
    case "message_end":
      if (data.message_id) reply.dataset.messageId = data.message_id;
      setStatus(reply, data.status || "complete");
      return true;
    case "error":
      setStatus(reply, "failed", data.message || data.code || "error");
      return true;
    default:
      return false; // metadata and anything newer: nothing to show
  }
}

// ---------- thread events (autonomous follow-ups) ----------

function watchThread(id) {
  if (state.watch) state.watch.abort();
  const controller = new AbortController();
  state.watch = controller;
  followThreadEvents(id, controller.signal);
}

async function followThreadEvents(id, signal) {
  let delayMs = 2000;
  while (!signal.aborted && state.currentId === id) {
    try {
      const response = await openStream(`/api/threads/${encodeURIComponent(id)}/events`, { signal });
      if ([401, 403, 404, 405].includes(response.status)) return; // not offered (yet): fine
      if (response.ok) {
        delayMs = 2000;
        for await (const event of readEvents(response)) onThreadEvent(id, event);
      }
    } catch {
      if (signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    delayMs = Math.min(delayMs * 2, 30000);
  }
}

function onThreadEvent(id, event) {
  if (state.currentId !== id || !event.data) return;
  let data;
  try {
    data = JSON.parse(event.data);
  } catch {
    return;
  }
  const message = data && (data.message || data);
  const known = message && message.id && ui.messages.querySelector(`[data-message-id="${CSS.escape(message.id)}"]`);
  if (known) return; // already on the page (this tab's own turn)
  if (message && message.id && message.role && typeof message.content === "string" && !known
      && message.status && message.status !== "streaming") {
    appendMessage(message);
    refreshThreads();
    return;
  }
  scheduleHistoryRefresh(id);
}

function scheduleHistoryRefresh(id) {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => {
    if (state.currentId === id && !(state.turn && state.turn.threadId === id)) loadHistory(id);
    refreshThreads();
  }, 300);
}

// ---------- wiring ----------

function submit(event) {
  event.preventDefault();
  const text = ui.input.value;
  if (!text.trim() || state.turn) return;
  ui.input.value = "";
  notify("");
  sendMessage(text).catch((error) => notify(explain(error)));
}

function init() {
  ui.apiKey.value = getApiKey();
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    ui.apiKey.dispatchEvent(new Event("change"));
  });
  ui.apiKey.addEventListener("change", () => {
    setApiKey(ui.apiKey.value.trim());
    refreshThreads();
  });
  ui.newThread.addEventListener("click", () => createThread().catch((error) => notify(explain(error))));
  ui.composer.addEventListener("submit", submit);
  ui.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) submit(event);
  });
  ui.stop.addEventListener("click", () => state.turn && state.turn.controller.abort());
  setBusy(false);
  const wanted = new URLSearchParams(location.hash.slice(1)).get("thread");
  refreshThreads().then(() => {
    if (wanted && state.threads.some((t) => t.id === wanted)) openThread(wanted);
  });
}

init();
