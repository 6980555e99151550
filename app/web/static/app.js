// Chatgate page: thread list, history, composer, live streaming. Model output reaches the DOM
// only as text nodes or as markdown sanitized by DOMPurify (see markdown.js).

import { callApi, errorFrom, getApiKey, openStream, setApiKey } from "./api.js";
import { copyText, flash } from "./markdown.js";
import {
  el, messageNode, messageOf, messageText, setVersionsBusy, updateMessage,
} from "./messages.js";
import { eventsUntilDropped, followTurnStream, streamPath } from "./resume.js";
import { modelPicker } from "./models.js";
import { explain } from "./words.js";

const $ = (id) => document.getElementById(id);
const ui = {
  threadList: $("thread-list"), newThread: $("new-thread"), apiKey: $("api-key"),
  settings: $("settings"), toggleThreads: $("toggle-threads"), search: $("thread-search"),
  origin: $("thread-origin"),
  title: $("thread-title"), notice: $("notice"), messages: $("messages"),
  rename: $("rename-thread"), remove: $("delete-thread"), renameForm: $("rename-form"),
  renameInput: $("rename-input"), renameCancel: $("rename-cancel"),
  composer: $("composer"), input: $("message-input"), send: $("send"), stop: $("stop"),
  toBottom: $("scroll-bottom"), editing: $("editing"), cancelEdit: $("cancel-edit"),
};
/** A pick is the open thread's choice at once (sent with its next turn); false: none open. */
const models = modelPicker($("model-picker"), (name) => {
  const current = state.threads.find((t) => t.id === state.currentId);
  if (current) {
    current.model = name;
    state.picks.set(current.id, name);
  }
  return Boolean(current);
});
const state = { threads: [], currentId: null, turn: null, watch: null, refreshTimer: null,
                /** A "New thread" on its way (a promise of its id), or null. */
                creating: null,
                /** "New thread" was pressed: an empty thread is shown, which is stored only
                 *  with its first message (a refused first send leaves nothing). */
                draft: false,
                /** The open thread's title, kept while a search leaves it out of the list. */
                currentTitle: null,
                /** The search the list shows, its pending timer, and a count of the list's
                 *  reads (only the latest read is drawn). */
                listQuery: "", searchTimer: null, threadsAsked: 0,
                /** The question being edited: {threadId, messageId}, or null. */
                editing: null,
                /** A version asked to be shown (its answer not drawn yet). */
                showing: false,
                /** Bumped by every send: a history answer asked for before it is stale. */
                turnsStarted: 0,
                /** The model picked in this tab for each thread: a list read after the pick
                 *  (a refresh as a turn ends) must not put the older choice back. */
                picks: new Map() };

/** Live answers are redrawn as markdown at most this often: smooth, and cheap on long text. */
const RENDER_EVERY_MS = 80;
/** After a stream ends, how long to wait for the stored row to leave `streaming`. */
const SETTLE_TRIES = 12;
const SETTLE_PAUSE_MS = 250;
const NEAR_BOTTOM_PX = 80;

// ---------- small helpers ----------

/** One line under the header. `kind` says how it looks: "error" (something failed, in red)
 *  or "info" (news, such as a deleted thread or a reconnection, in the accent colour). */
function notify(message, kind = "error") {
  ui.notice.textContent = message || "";
  ui.notice.dataset.kind = kind;
}

function fail(error) {
  notify(explain(error));
  if (error && error.status === 401) {
    // Lead the user straight to the field that fixes it.
    ui.settings.open = true;
    setThreadsOpen(true);
  }
}

function setBusy(busy) {
  document.body.dataset.turn = busy ? "running" : "idle"; // for tests and styling
  ui.send.disabled = busy;
  ui.stop.hidden = !busy;
  setVersionsBusy(ui.messages, busy);
}

function nearBottom() {
  const box = ui.messages;
  return box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM_PX;
}

function scrollToEnd() {
  ui.messages.scrollTop = ui.messages.scrollHeight;
  updateScrollButton();
}

function updateScrollButton() {
  ui.toBottom.hidden = nearBottom();
}

function setThreadsOpen(open) {
  document.body.classList.toggle("threads-open", open);
  ui.toggleThreads.setAttribute("aria-expanded", String(open));
}

function threadPath(id, rest = "") {
  return `/api/threads/${encodeURIComponent(id)}${rest}`;
}

// ---------- threads ----------

/** The thread list, or with words in the search box the threads whose title or text
 *  holds them (the gateway's full-text search): the user's chats, or under the origin
 *  filter the conversations the Responses API stored, or all. An answer that arrives for an
 *  older search is dropped. */
async function refreshThreads() {
  const query = ui.search.value.trim();
  state.threadsAsked += 1;
  const asked = state.threadsAsked;
  try {
    const params = new URLSearchParams();
    if (query) params.set("q", query);
    if (ui.origin.value !== "chat") params.set("origin", ui.origin.value);
    const search = params.toString();
    const path = search ? `/api/threads?${search}` : "/api/threads";
    const body = await callApi("GET", path);
    if (asked !== state.threadsAsked) return;
    state.threads = body.threads || [];
    for (const thread of state.threads) {
      if (state.picks.has(thread.id)) thread.model = state.picks.get(thread.id);
    }
    state.listQuery = query;
    renderThreadList();
  } catch (error) {
    fail(error);
  }
}

function renderThreadList() {
  ui.threadList.replaceChildren(...state.threads.map(threadItem));
  if (state.draft) ui.threadList.prepend(draftItem());
  else if (state.threads.length === 0) {
    const text = state.listQuery ? `No thread matches “${state.listQuery}”.` : "No threads yet.";
    const empty = el("p", "list-empty", text);
    empty.dataset.testid = "list-empty";
    ui.threadList.append(empty);
  }
  renderHeader();
}

/** Search as one types, once the typing pauses. */
const SEARCH_PAUSE_MS = 250;

function onSearchInput() {
  clearTimeout(state.searchTimer);
  state.searchTimer = setTimeout(refreshThreads, SEARCH_PAUSE_MS);
}

function threadItem(thread) {
  const item = el("button", "thread-item");
  item.type = "button";
  item.dataset.threadId = thread.id;
  item.dataset.testid = "thread-item";
  if (thread.id === state.currentId) item.classList.add("active");
  item.append(el("span", "title", thread.title || "Untitled thread"));
  item.append(el("span", "preview", thread.preview || `${thread.message_count || 0} messages`));
  item.addEventListener("click", () => {
    setThreadsOpen(false);
    openThread(thread.id);
  });
  return item;
}

/** The new thread not stored yet: first in the list, as the open one. */
function draftItem() {
  const item = el("button", "thread-item draft active");
  item.type = "button";
  item.dataset.testid = "thread-draft";
  item.append(el("span", "title", "New thread"),
              el("span", "preview", "saved with its first message"));
  item.addEventListener("click", () => setThreadsOpen(false));
  return item;
}

function renderHeader() {
  const current = state.threads.find((t) => t.id === state.currentId);
  // A search may leave the open thread out of the list: its title is remembered.
  if (current) state.currentTitle = current.title;
  else if (!state.currentId) state.currentTitle = null;
  ui.title.textContent = state.currentId ? state.currentTitle || "Untitled thread"
    : state.draft ? "New thread" : "No thread open";
  ui.title.title = ui.title.textContent; // the whole title, when the header cuts it short
  models.show(current);
  ui.rename.hidden = !state.currentId;
  ui.remove.hidden = !state.currentId;
}

/** "New thread": an empty thread to write in, stored by its first send (createThread). */
function startDraft() {
  if (state.editing) cancelEdit();
  if (state.watch) state.watch.abort();
  state.currentId = null;
  state.currentTitle = null;
  state.draft = true;
  history.replaceState(null, "", location.pathname);
  closeRename();
  notify("");
  renderThreadList();
  showEmptyState();
  ui.input.focus();
}

/** The thread a refused first send created: deleted again, and the page back on the empty
 *  new thread with the text still in the composer, as if it had never been stored. */
async function discardThread(id) {
  try {
    await callApi("DELETE", threadPath(id));
  } catch {
    return; // the gateway cannot be reached: the empty thread stays, and shows as one
  }
  state.threads = state.threads.filter((t) => t.id !== id);
  if (state.currentId === id) {
    if (state.watch) state.watch.abort();
    state.currentId = null;
    state.draft = true;
    history.replaceState(null, "", location.pathname);
  }
  renderThreadList();
  showEmptyState();
}

/** A new thread, opened; a send made while "New thread" is still on its way goes to that
 *  thread rather than making a second one. */
function createThread() {
  state.creating ??= (async () => {
    const thread = await callApi("POST", "/api/threads", {});
    state.threads.unshift({ ...thread, message_count: 0, preview: "",
                            model: models.takeForNewThread() });
    await openThread(thread.id);
    return thread.id;
  })().finally(() => { state.creating = null; });
  return state.creating;
}

async function openThread(id) {
  // Shown already, with an answer streaming in: reading it again would wipe that answer.
  if (id === state.currentId && state.turn && state.turn.threadId === id) return;
  if (state.editing && state.editing.threadId !== id) cancelEdit();
  if (id !== state.currentId) state.currentTitle = null;
  state.currentId = id;
  state.draft = false;
  history.replaceState(null, "", `#thread=${id}`);
  closeRename();
  renderThreadList();
  ui.messages.replaceChildren();
  notify("");
  await loadHistory(id);
  watchThread(id);
  ui.input.focus();
}

function closeThread() {
  if (state.editing) cancelEdit();
  state.currentId = null;
  state.draft = false;
  if (state.watch) state.watch.abort();
  history.replaceState(null, "", location.pathname);
  closeRename();
  renderThreadList();
  showEmptyState();
}

function showEmptyState() {
  const text = state.currentId || state.draft ? "No messages yet. Write one below to start."
    : "No thread open. Write a message below to start one, or pick a thread from the list.";
  const note = el("p", "empty-state", text);
  note.dataset.testid = "empty-state";
  ui.messages.replaceChildren(note);
  updateScrollButton();
}

/** Show the thread's stored messages. A refresh (new messages pushed while reading) keeps
 *  the reader where they are unless they were at the end already. An answer that arrives
 *  after a send started may have been read before that turn's rows existed: drawing it would
 *  wipe the live bubbles, so it is read again once the turn has settled. */
async function loadHistory(id, { refresh = false } = {}) {
  const turnsBefore = state.turnsStarted;
  try {
    const body = await callApi("GET", threadPath(id, "/messages"));
    if (state.currentId !== id) return;
    if (state.turnsStarted !== turnsBefore) {
      readAgainAfterTurn(id);
      return;
    }
    const messages = body.messages || [];
    drawMessages(messages, { refresh });
    if (!refresh) rejoinTurn(id, messages).catch(fail);
  } catch (error) {
    fail(error);
  }
}

/** Draw the thread's branch. A refresh keeps the reader where they are unless they were at
 *  the end already, and keeps the reasoning they unfolded. */
function drawMessages(messages, { refresh = false } = {}) {
  const stick = !refresh || nearBottom();
  const top = ui.messages.scrollTop;
  const unfolded = refresh ? unfoldedReasoning() : new Set();
  if (messages.length === 0) showEmptyState();
  else ui.messages.replaceChildren(...messages.map(messageNode));
  for (const box of ui.messages.querySelectorAll(".message details.reasoning")) {
    if (unfolded.has(box.closest(".message").dataset.messageId)) box.open = true;
  }
  if (stick) scrollToEnd();
  else {
    ui.messages.scrollTop = top;
    updateScrollButton();
  }
  // A question being edited that this branch no longer shows: the composer keeps the text.
  if (state.editing && !bubbleOf(state.editing.messageId)) cancelEdit({ clear: false });
}

function bubbleOf(messageId) {
  return messageId
    ? ui.messages.querySelector(`[data-message-id="${CSS.escape(messageId)}"]`) : null;
}

/** The answers whose reasoning the reader has unfolded: a refresh keeps them unfolded. */
function unfoldedReasoning() {
  const open = ui.messages.querySelectorAll(".message details.reasoning[open]");
  return new Set([...open].map((box) => box.closest(".message").dataset.messageId));
}

async function deleteCurrentThread() {
  const id = state.currentId;
  const thread = state.threads.find((t) => t.id === id);
  const name = (thread && thread.title) || "this thread";
  if (!id || !window.confirm(`Delete “${name}” and all its messages?`)) return;
  if (state.turn && state.turn.threadId === id) state.turn.controller.abort();
  try {
    await callApi("DELETE", threadPath(id));
  } catch (error) {
    if (error.status !== 404) return fail(error); // 404: already gone, which is the goal
  }
  state.threads = state.threads.filter((t) => t.id !== id);
  closeThread();
  notify("Thread deleted.", "info");
}

function openRename() {
  ui.renameInput.value = ui.title.textContent === "Untitled thread" ? "" : ui.title.textContent;
  ui.renameForm.hidden = false;
  ui.title.hidden = true;
  ui.rename.hidden = true;
  ui.remove.hidden = true; // one thing at a time, and room for the field on a phone
  ui.renameInput.focus();
  ui.renameInput.select();
}

function closeRename() {
  ui.renameForm.hidden = true;
  ui.title.hidden = false;
  ui.rename.hidden = !state.currentId;
  ui.remove.hidden = !state.currentId;
}

async function saveRename(event) {
  event.preventDefault();
  const id = state.currentId;
  try {
    const updated = await callApi("PATCH", threadPath(id), { title: ui.renameInput.value });
    const thread = state.threads.find((t) => t.id === id);
    if (thread) thread.title = updated.title;
    state.currentTitle = updated.title;
    closeRename();
    notify("");
    renderThreadList();
  } catch (error) {
    fail(error); // the form stays open with what was typed
  }
}

// ---------- messages ----------

function appendMessage(message) {
  const stick = nearBottom();
  const empty = ui.messages.querySelector(".empty-state");
  if (empty) empty.remove();
  const node = messageNode(message);
  ui.messages.append(node);
  if (stick || message.role === "user") scrollToEnd();
  else updateScrollButton();
  return node;
}

function onMessageAction(event) {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  const node = button.closest(".message");
  if (button.dataset.action === "copy") {
    copyText(messageText(node))
      .then((ok) => flash(button, ok ? "copied" : "copy-failed", { labelled: true }));
  } else if (["retry", "regenerate"].includes(button.dataset.action)) {
    retry(node);
  } else if (button.dataset.action === "show-version" && !state.turn) {
    showVersion(node, button.dataset.versionId).catch(fail);
  } else if (button.dataset.action === "edit" && !state.turn) {
    startEdit(node);
  } else if (button.dataset.action === "continue" && !state.turn) {
    continueAnswer(node).catch(fail);
  }
}

/** Retry (a failed answer) and Regenerate (any other) ask the gateway for a new answer to
 *  the same question: a new version beside the earlier answer, which is kept (the version
 *  navigator shows either). An answer the gateway never named (its stream broke before it
 *  began) has nothing to regenerate: its question is sent again. */
function retry(answerNode) {
  let node = answerNode.previousElementSibling;
  while (node && !node.classList.contains("user")) node = node.previousElementSibling;
  if (!node || state.turn || state.showing) return;
  if (answerNode.dataset.messageId) regenerate(answerNode, node).catch(fail);
  else sendMessage(messageText(node), { fromComposer: false }).catch(fail);
}

/** The bubble and every bubble after it, taken off the page (and kept, to be put back when
 *  the gateway refuses what replaces them). */
function takeFrom(node) {
  const taken = [];
  for (let next = node; next; next = next.nextElementSibling) taken.push(next);
  for (const gone of taken) gone.remove();
  if (state.editing && taken.some((gone) => gone.dataset.messageId === state.editing.messageId)) {
    cancelEdit({ clear: false });
  }
  return taken;
}

/** The bubbles takeFrom took, back in place of whatever was drawn after the kept ones. */
function putBack(taken, after) {
  if (after) while (after.nextElementSibling) after.nextElementSibling.remove();
  else ui.messages.replaceChildren();
  ui.messages.append(...taken);
  if (!ui.messages.children.length) showEmptyState();
}

/** Regenerate: the answer and what follows it leave the page, and the new answer to the same
 *  question streams into a new bubble in its place; the thread is then read again, so the
 *  answer's versions show. */
async function regenerate(answerNode, questionNode) {
  const answerId = answerNode.dataset.messageId;
  const threadId = state.currentId;
  if (!threadId || answerNode.parentNode !== ui.messages) return;
  state.turnsStarted += 1;
  const taken = takeFrom(answerNode);
  const reply = appendMessage({ role: "assistant", content: "", status: "streaming" });
  const turn = { ...newTurnState(threadId), userNode: questionNode, reply };
  state.turn = turn;
  setBusy(true);
  scrollToEnd();
  try {
    const response = await openStream(
      threadPath(threadId, `/messages/${encodeURIComponent(answerId)}/regenerate`),
      { body: { model: models.picked() }, signal: turn.controller.signal });
    if (!response.ok) {
      // Nothing was stored: the answers are back as they were.
      putBack(taken, questionNode);
      fail(await errorFrom(response));
      return;
    }
    await followTurn(turn, response);
  } catch (error) {
    if (!(error && error.name === "AbortError")) notify(explain(error));
    if (turn.started) await settleTurn(turn);
    else putBack(taken, questionNode);
  } finally {
    await endVersionTurn(turn);
  }
}

/** A turn that made a new version is over: the thread is read again, so the versions show. */
async function endVersionTurn(turn) {
  state.turn = null;
  setBusy(false);
  refreshThreads();
  if (turn.started && state.currentId === turn.threadId) {
    await loadHistory(turn.threadId, { refresh: true });
  } else if (turn.heardNotice && state.currentId === turn.threadId) {
    scheduleHistoryRefresh(turn.threadId);
  }
}

/** Continue: the gateway finishes the cut answer in place. No question is added; the new
 *  text streams onto the end of the same bubble, which then shows the stored answer. */
async function continueAnswer(answerNode) {
  const messageId = answerNode.dataset.messageId;
  const threadId = state.currentId;
  if (!messageId || !threadId) return;
  const stored = messageOf(answerNode) || {};
  state.turnsStarted += 1;
  const turn = { ...newTurnState(threadId), reply: answerNode, userNode: null,
                 text: stored.content || "", reasoning: stored.reasoning || "",
                 thinkMs: stored.reasoning_ms ?? null };
  state.turn = turn;
  setBusy(true);
  try {
    const response = await openStream(
      threadPath(threadId, `/messages/${encodeURIComponent(messageId)}/continue`),
      { body: {}, signal: turn.controller.signal });
    if (!response.ok) return fail(await errorFrom(response)); // nothing changed
    renderLive(turn);
    await followTurn(turn, response);
  } catch (error) {
    if (!(error && error.name === "AbortError")) notify(explain(error));
    if (turn.started) await settleTurn(turn);
  } finally {
    state.turn = null;
    setBusy(false);
    if (turn.heardNotice && state.currentId === threadId) scheduleHistoryRefresh(threadId);
  }
}

// ---------- edit and resend ----------

/** A question of the branch goes back into the composer; Send makes the new text a new
 *  version of it, with an answer of its own (the old question and its answers are kept). */
function startEdit(node) {
  state.editing = { threadId: state.currentId, messageId: node.dataset.messageId };
  ui.input.value = messageText(node);
  ui.editing.hidden = false;
  ui.input.focus();
  ui.input.setSelectionRange(ui.input.value.length, ui.input.value.length);
}

function cancelEdit({ clear = true } = {}) {
  if (state.editing && clear) ui.input.value = "";
  state.editing = null;
  ui.editing.hidden = true;
}

/** Send the edited text as a new version of the question: the question and what follows it
 *  leave the page, the new one streams in as a send does. A refusal puts them back and keeps
 *  the text in the composer, still editing. */
async function sendEdited(text) {
  const { threadId, messageId } = state.editing;
  if (threadId !== state.currentId || !messageId) return cancelEdit({ clear: false });
  // Looked up now: a refresh may have redrawn the bubbles since Edit was clicked.
  const node = bubbleOf(messageId);
  if (!node) return cancelEdit({ clear: false });
  await sendMessage(text, { fromComposer: true, editOf: node });
}

// ---------- versions ----------

/** Show another version of a message: the gateway moves the thread's branch through it and
 *  answers with the branch, drawn as a thread is. The clicked message stays where it was on
 *  the screen. */
async function showVersion(node, versionId) {
  const threadId = state.currentId;
  if (!versionId || !threadId || state.showing) return;
  state.showing = true;
  const before = node.getBoundingClientRect().top;
  try {
    const body = await callApi("POST",
      threadPath(threadId, `/messages/${encodeURIComponent(versionId)}/show`));
    if (state.currentId !== threadId || state.turn) return;
    drawMessages(body.messages || [], { refresh: true });
    const shown = bubbleOf(versionId);
    if (shown) {
      ui.messages.scrollTop += shown.getBoundingClientRect().top - before;
      updateScrollButton();
    }
    notify("");
    refreshThreads(); // the thread's preview follows its branch
  } finally {
    state.showing = false;
  }
}

// ---------- one turn ----------

/** A new question and its answer. With `editOf` (the bubble of the question being edited),
 *  the question is a new version of that one: it and what follows it leave the page, and
 *  come back if the gateway refuses. */
async function sendMessage(text, { fromComposer, editOf = null }) {
  // The first message of a new thread stores the thread; refused, it takes the thread back.
  const first = !state.currentId && !state.creating;
  const threadId = state.creating ? await state.creating
    : state.currentId || (await createThread());
  const editing = editOf ? state.editing : null;
  const keptBefore = editOf ? editOf.previousElementSibling : null;
  const taken = editOf ? takeFrom(editOf) : null;
  if (editOf) cancelEdit({ clear: false });
  state.turnsStarted += 1;
  const turn = newTurn(threadId, text);
  state.turn = turn;
  setBusy(true);
  /** Nothing was stored: take the bubbles back; the composer still holds the text. */
  const takeBack = () => {
    turn.userNode.remove();
    turn.reply.remove();
    if (taken) {
      putBack(taken, keptBefore);
      if (editing && ui.input.value === text) resumeEdit(editing);
    }
    if (!ui.messages.children.length) showEmptyState();
  };
  const body = { content: text, model: models.picked() };
  if (editOf) body.edit_of = editOf.dataset.messageId;
  try {
    const response = await openStream(threadPath(threadId, "/messages"),
      { body, signal: turn.controller.signal });
    if (!response.ok) {
      takeBack();
      const error = await errorFrom(response);
      if (first) await discardThread(threadId);
      error.sentChars = [...text].length; // characters as the gateway counts them
      fail(error);
      return;
    }
    if (fromComposer && ui.input.value === text) ui.input.value = "";
    await followTurn(turn, response);
  } catch (error) {
    if (!(error && error.name === "AbortError")) notify(explain(error));
    if (turn.started) await settleTurn(turn);
    else {
      takeBack();
      if (first) await discardThread(threadId);
    }
  } finally {
    if (editOf) await endVersionTurn(turn);
    else {
      state.turn = null;
      setBusy(false);
      refreshThreads(); // the new title is stored with the answer
      if (turn.heardNotice && state.currentId === threadId) scheduleHistoryRefresh(threadId);
    }
  }
}

/** Editing again after a refused edit: the banner back, the same question. */
function resumeEdit(editing) {
  if (editing.threadId !== state.currentId || !bubbleOf(editing.messageId)) return;
  state.editing = editing;
  ui.editing.hidden = false;
}

/** A reload, or another tab, while an answer streams: the thread's last message is still
 *  `streaming`. While the gateway keeps that answer's events, the page follows it like its
 *  own turn, from the first delta; when it does not (an answer another gateway process
 *  writes without a shared log), the thread's event stream brings the stored answer. */
async function rejoinTurn(threadId, messages) {
  const last = messages[messages.length - 1];
  if (!last || last.role !== "assistant" || last.status !== "streaming" || state.turn) return;
  const reply = ui.messages.querySelector(`[data-message-id="${CSS.escape(last.id)}"]`);
  if (!reply) return;
  const before = reply.previousElementSibling;
  const turn = { ...newTurnState(threadId), reply, started: true,
                 userNode: before && before.classList.contains("user") ? before : null };
  state.turnsStarted += 1;
  state.turn = turn;
  setBusy(true);
  try {
    const response = await openStream(streamPath(threadId, last.id),
      { signal: turn.controller.signal });
    if (response.ok) await followTurn(turn, response);
  } catch (error) {
    // Stopped by the reader: show what was stored. Unreachable: the answer may well still
    // be streaming, so its bubble stays as read until the thread's events bring it.
    if (error && error.name === "AbortError") await settleTurn(turn);
    else notify(explain(error));
  } finally {
    state.turn = null;
    setBusy(false);
    if (turn.heardNotice && state.currentId === threadId) scheduleHistoryRefresh(threadId);
  }
}

function newTurnState(threadId) {
  return { threadId, text: "", controller: new AbortController(), usage: null, error: null,
           endStatus: null, started: false, renderTimer: null, heardNotice: false,
           /** The reasoning so far, and the thinking time as this page saw it (the stored
            *  reasoning_ms replaces it once the answer is stored). */
           reasoning: "", thinkStart: null, thinkMs: null };
}

function newTurn(threadId, text) {
  const userNode = appendMessage({ role: "user", content: text, status: "complete" });
  const reply = appendMessage({ role: "assistant", content: "", status: "streaming" });
  return { ...newTurnState(threadId), userNode, reply };
}

async function followTurn(turn, response) {
  turn.started = true;
  await followTurnStream(response, {
    signal: turn.controller.signal,
    ids: () => ({ threadId: turn.threadId, messageId: turn.reply.dataset.messageId }),
    onEvent: (event) => applyTurnEvent(turn, event),
    onRetry: (waiting) => notify(waiting ? "Connection lost; reconnecting…" : "", "info"),
  });
  notify("");
  await settleTurn(turn);
}

/** Stop asks the gateway to end the answer (on whichever process runs it); the stream then
 *  ends with the stored status. Without the answer's id yet, or when the gateway cannot be
 *  reached, the page just stops reading. */
async function stopTurn() {
  const turn = state.turn;
  if (!turn) return;
  const messageId = turn.reply.dataset.messageId;
  if (!messageId) return turn.controller.abort();
  try {
    await callApi("POST", threadPath(turn.threadId, `/messages/${encodeURIComponent(messageId)}/stop`));
  } catch {
    turn.controller.abort();
  }
}

/** Apply one event of a turn's stream. */
function applyTurnEvent(turn, event) {
  let data = {};
  try {
    data = event.data ? JSON.parse(event.data) : {};
  } catch {
    return;
  }
  if (event.event === "message_start") {
    if (data.user_message_id && turn.userNode) turn.userNode.dataset.messageId = data.user_message_id;
    if (data.assistant_message_id) turn.reply.dataset.messageId = data.assistant_message_id;
  } else if (event.event === "reasoning" && typeof data.text === "string") {
    turn.reasoning += data.text;
    turn.thinkStart ??= Date.now();
    scheduleRender(turn);
  } else if (event.event === "delta" && typeof data.text === "string") {
    if (turn.thinkStart !== null && turn.thinkMs === null) turn.thinkMs = Date.now() - turn.thinkStart;
    turn.text += data.text;
    scheduleRender(turn);
  } else if (event.event === "usage") {
    turn.usage = data;
    scheduleRender(turn);
  } else if (event.event === "error") {
    turn.error = data; // these two are only used if the stored row cannot be read
  } else if (event.event === "message_end") {
    turn.endStatus = data.status || "complete";
  } else if (event.event === "catch_up" && data.message) {
    // The events were no longer kept: the stored message is the answer.
    turn.text = data.message.content || "";
    turn.reasoning = data.message.reasoning || "";
    turn.thinkMs = data.message.reasoning_ms ?? null;
    turn.endStatus = data.message.status;
    scheduleRender(turn);
  }
  // metadata: the stored row, fetched at the end, says it all.
}

function scheduleRender(turn) {
  if (turn.renderTimer) return;
  turn.renderTimer = setTimeout(() => {
    turn.renderTimer = null;
    renderLive(turn);
  }, RENDER_EVERY_MS);
}

function renderLive(turn) {
  const stick = nearBottom();
  updateMessage(turn.reply, { role: "assistant", content: turn.text, status: "streaming",
                              usage: turn.usage, reasoning: turn.reasoning,
                              reasoning_ms: turn.thinkMs });
  if (stick) scrollToEnd();
}

/** The stream is over (ended, failed, stopped or cut): show what the gateway stored, so the
 *  bubble is exactly what a reload will show. */
async function settleTurn(turn) {
  clearTimeout(turn.renderTimer);
  turn.renderTimer = null;
  const stored = await storedTurn(turn);
  // Read before the redraw: the stored answer may be longer than the last one drawn live
  // (a render was still pending), and a reader at the end stays at the end.
  const stick = nearBottom();
  if (stored.user && turn.userNode) updateMessage(turn.userNode, stored.user);
  if (stored.answer) {
    updateMessage(turn.reply, stored.answer);
  } else {
    // The stored row cannot be read (yet): keep what arrived, and how the stream ended.
    const status = turn.endStatus || (turn.error ? "failed" : "interrupted");
    updateMessage(turn.reply, { role: "assistant", content: turn.text, usage: turn.usage,
                                status, metadata: turn.error ? { error: turn.error } : {},
                                reasoning: turn.reasoning, reasoning_ms: turn.thinkMs });
  }
  if (stick) scrollToEnd();
}

/** The turn's two stored rows; waits while the answer is still `streaming` (after a Stop the
 *  gateway stores the partial answer a moment after the connection closes). */
async function storedTurn(turn) {
  const userId = turn.userNode && turn.userNode.dataset.messageId;
  const answerId = turn.reply.dataset.messageId;
  if (!answerId) return {};
  for (let attempt = 0; attempt < SETTLE_TRIES; attempt += 1) {
    try {
      const body = await callApi("GET", threadPath(turn.threadId, "/messages"));
      const rows = body.messages || [];
      const answer = rows.find((m) => m.id === answerId);
      if (answer && answer.status !== "streaming") {
        return { user: rows.find((m) => m.id === userId), answer };
      }
    } catch (error) {
      if (error.status === 404) return {}; // the thread was deleted meanwhile
    }
    await new Promise((resolve) => setTimeout(resolve, SETTLE_PAUSE_MS));
  }
  return {};
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
      const response = await openStream(threadPath(id, "/events"), { signal });
      if ([401, 403, 404, 405].includes(response.status)) return; // not offered (yet): fine
      if (response.ok) {
        delayMs = 2000;
        for await (const event of eventsUntilDropped(response)) onThreadEvent(id, event);
      }
    } catch {
      if (signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    delayMs = Math.min(delayMs * 2, 30000);
  }
}

function onThreadEvent(id, event) {
  // `ready` only says the subscription is live: nothing changed in the thread.
  if (state.currentId !== id || !event.data || event.event === "ready") return;
  if (state.turn && state.turn.threadId === id) {
    // A quick turn's own rows can be announced before its stream's message_start has named
    // its bubbles: appending them would show the answer twice. The turn settles from the
    // stored rows; whatever else arrived meanwhile is read once it has.
    readAgainAfterTurn(id);
    return;
  }
  let data;
  try {
    data = JSON.parse(event.data);
  } catch {
    return;
  }
  const message = data && (data.message || data);
  const known = message && message.id && ui.messages.querySelector(`[data-message-id="${CSS.escape(message.id)}"]`);
  if (known) {
    // Already on the page: this tab's own turn, or an answer that was streaming when the
    // thread was read and is now stored.
    if (known.classList.contains("streaming") && message.status && message.status !== "streaming"
        && typeof message.content === "string") updateMessage(known, message);
    return;
  }
  if (message && message.id && message.role && typeof message.content === "string"
      && message.status && message.status !== "streaming") {
    appendMessage(message);
    refreshThreads();
    return;
  }
  scheduleHistoryRefresh(id);
}

/** The thread's history is to be read again once this tab's turn on it has settled. */
function readAgainAfterTurn(id) {
  if (state.turn && state.turn.threadId === id) state.turn.heardNotice = true;
  else scheduleHistoryRefresh(id);
}

function scheduleHistoryRefresh(id) {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => {
    if (state.currentId === id) {
      if (state.turn && state.turn.threadId === id) state.turn.heardNotice = true;
      else loadHistory(id, { refresh: true });
    }
    refreshThreads();
  }, 300);
}

// ---------- wiring ----------

function submit(event) {
  event.preventDefault();
  const text = ui.input.value;
  if (!text.trim() || state.turn || state.showing) return;
  notify("");
  // The composer keeps the text until the gateway has accepted it: a refused send loses nothing.
  if (state.editing) sendEdited(text).catch(fail);
  else sendMessage(text, { fromComposer: true }).catch(fail);
}

function wireKey() {
  ui.apiKey.value = getApiKey();
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    ui.apiKey.dispatchEvent(new Event("change"));
  });
  ui.apiKey.addEventListener("change", () => {
    setApiKey(ui.apiKey.value.trim());
    notify("");
    refreshThreads();
    models.load().then(renderHeader);
  });
}

function wireThreads() {
  ui.newThread.addEventListener("click", () => {
    setThreadsOpen(false);
    startDraft();
  });
  ui.search.addEventListener("input", onSearchInput);
  ui.origin.addEventListener("change", refreshThreads);
  ui.toggleThreads.addEventListener("click",
    () => setThreadsOpen(!document.body.classList.contains("threads-open")));
  ui.rename.addEventListener("click", openRename);
  ui.renameForm.addEventListener("submit", saveRename);
  ui.renameCancel.addEventListener("click", closeRename);
  ui.renameInput.addEventListener("keydown", (event) => {
    if (event.key === "Escape") closeRename();
  });
  ui.remove.addEventListener("click", () => deleteCurrentThread());
}

function wireComposer() {
  ui.composer.addEventListener("submit", submit);
  ui.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) submit(event);
    else if (event.key === "Escape" && state.editing) cancelEdit();
  });
  ui.stop.addEventListener("click", () => stopTurn());
  ui.cancelEdit.addEventListener("click", () => cancelEdit());
  ui.messages.addEventListener("click", onMessageAction);
  ui.messages.addEventListener("scroll", updateScrollButton, { passive: true });
  ui.toBottom.addEventListener("click", scrollToEnd);
}

function init() {
  wireKey();
  wireThreads();
  wireComposer();
  setBusy(false);
  setThreadsOpen(false);
  showEmptyState();
  renderHeader();
  models.load().then(renderHeader);
  const wanted = new URLSearchParams(location.hash.slice(1)).get("thread");
  refreshThreads().then(() => {
    if (wanted && state.threads.some((t) => t.id === wanted)) openThread(wanted);
  });
}

init();
