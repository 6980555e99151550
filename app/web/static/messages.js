// One message bubble: its content (markdown for answers, plain text for what the user wrote),
// and a footer with its versions (‹ 2/3 ›), status, time, usage and the actions (copy, retry).
// A bubble is always drawn from a message object, live or stored, so both look the same.

import { renderMarkdown } from "./markdown.js";
import { statusWords, thoughtWords, timeWords, usageWords } from "./words.js";

export const EMPTY_ANSWER = "The model returned no text.";
/** An answer whose thinking never closed: the model spent it all thinking. */
export const UNFINISHED_THINKING = "The model was still thinking when its answer ended, so "
  + "there is no answer. Its thinking so far is above; try again, or ask for a shorter answer.";

/** The text each bubble stands for (what Copy copies and Retry re-sends). */
const textOf = new WeakMap();
/** The message each bubble was last drawn from (Continue goes on from its text). */
const drawnFrom = new WeakMap();

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function messageText(node) {
  return textOf.get(node) ?? "";
}

export function messageOf(node) {
  return drawnFrom.get(node);
}

/** A new bubble for a message. */
export function messageNode(message) {
  const node = el("article", `message ${message.role}`);
  node.dataset.testid = `message-${message.role}`;
  const content = el("div", "content");
  content.dataset.testid = "message-content";
  node.append(content, el("div", "footer"));
  updateMessage(node, message);
  return node;
}

/** Redraw a bubble from a message (live: partial content and status "streaming"). */
export function updateMessage(node, message) {
  if (message.id) node.dataset.messageId = message.id;
  node.dataset.status = message.status || "complete";
  node.classList.toggle("streaming", message.status === "streaming");
  node.classList.toggle("synthetic", Boolean(message.metadata && message.metadata.synthetic));
  textOf.set(node, message.content || "");
  drawnFrom.set(node, message);
  renderReasoning(node, message);
  renderContent(node.querySelector(".content"), message);
  renderFooter(node.querySelector(".footer"), message);
}

/** An answer's reasoning (the model's thinking, apart from its answer): a folded section
 *  above the answer, "Thinking…" while only thinking has come, then "Thought for N s". It is
 *  rendered as markdown like the answer; the section stays open or folded as the reader left
 *  it while the answer streams on. */
function renderReasoning(node, message) {
  let box = node.querySelector(":scope > details.reasoning");
  const text = message.role === "assistant" ? message.reasoning || "" : "";
  if (!text) {
    if (box) box.remove();
    return;
  }
  if (!box) {
    box = el("details", "reasoning");
    box.dataset.testid = "reasoning";
    const summary = el("summary", "reasoning-summary");
    summary.dataset.testid = "reasoning-summary";
    const body = el("div", "reasoning-content");
    body.dataset.testid = "reasoning-content";
    box.append(summary, body);
    node.insertBefore(box, node.querySelector(".content"));
  }
  const thinking = message.status === "streaming" && !message.content;
  box.classList.toggle("thinking", thinking);
  box.querySelector("summary").textContent = thinking ? "Thinking…"
    : thoughtWords(message.reasoning_ms);
  box.querySelector(".reasoning-content").replaceChildren(renderMarkdown(text));
}

function renderContent(content, message) {
  const text = message.content || "";
  if (message.role !== "assistant") {
    content.replaceChildren(document.createTextNode(text));
    return;
  }
  if (!text && message.status === "complete") {
    content.replaceChildren(el("p", "empty-answer",
      thinkingUnfinished(message) ? UNFINISHED_THINKING : EMPTY_ANSWER));
    return;
  }
  content.replaceChildren(renderMarkdown(text));
}

function renderFooter(footer, message) {
  const parts = [];
  const versions = versionNavigator(message);
  if (versions) parts.push(versions);
  const status = statusWords(message);
  if (status.text) {
    const badge = el("span", `status ${status.kind || message.status}`, status.text);
    badge.dataset.testid = "message-status";
    if (status.detail) badge.title = status.detail;
    parts.push(badge);
  }
  if (message.created_at) parts.push(timeNode(message.created_at));
  const usage = message.usage || (message.role === "assistant" ? message.metadata : null);
  const usageText = usage ? usageWords(usage) : "";
  if (usageText) {
    const span = el("span", "usage", usageText);
    span.title = `prompt ${usage.prompt_tokens ?? "?"}, completion ${usage.completion_tokens ?? "?"}`;
    parts.push(span);
  }
  const model = modelWords(message);
  if (model) {
    const span = el("span", "model", model.text);
    span.dataset.testid = "message-model";
    span.title = model.detail;
    parts.push(span);
  }
  if (cutAtLimit(message)) {
    const note = el("span", "cut-note", "cut at the token limit");
    note.dataset.testid = "message-cut";
    note.title = "The model stopped because the answer reached its token limit "
      + "(finish_reason: length).";
    parts.push(note);
  }
  if (message.status !== "streaming") parts.push(...actionButtons(message));
  footer.replaceChildren(...parts);
}

/** Which model answered: the name picked, and "answered by" another when the picked one
 *  failed and a fallback of its list gave the answer; the upstream id in the tooltip. */
function modelWords(message) {
  const meta = message.role === "assistant" && message.metadata;
  if (!meta) return null;
  const by = meta.answered_by && meta.answered_by.model;
  const picked = meta.model_name || by;
  if (!picked) return null;
  const upstream = meta.model ? ` (${meta.model})` : "";
  if (by && by !== picked) {
    return { text: `${picked} · answered by ${by}`,
             detail: `You picked ${picked}; it did not answer, so ${by}${upstream} did.` };
  }
  return { text: picked, detail: `Answered by ${picked}${upstream}` };
}

/** An answer that is all thinking: the thinking never closed (the filter's warning
 *  `reasoning_unclosed`), so nothing of it is the answer. */
function thinkingUnfinished(message) {
  const stream = message.metadata && message.metadata.stream;
  return Boolean(message.reasoning) && Boolean(stream)
    && (stream.warnings || []).includes("reasoning_unclosed");
}

/** A complete answer the model ended only because it reached its token limit: it looks
 *  finished but is not. */
export function cutAtLimit(message) {
  const stream = message.metadata && message.metadata.stream;
  return message.role === "assistant" && message.status === "complete"
    && Boolean(stream) && stream.finish_reason === "length";
}

function timeNode(iso) {
  const time = el("time", "time", timeWords(iso));
  time.dateTime = iso;
  time.title = new Date(iso).toLocaleString();
  return time;
}

function actionButtons(message) {
  const buttons = [];
  if (message.content) buttons.push(actionButton("copy", "Copy", "Copy this message"));
  if (message.role === "user" && message.id) {
    // Hidden by the CSS while an answer streams.
    buttons.push(actionButton("edit", "Edit",
      "Change this message and send it again (the old one is kept as a version)"));
  }
  if (message.role === "assistant" && ["failed", "interrupted"].includes(message.status)) {
    buttons.push(actionButton("retry", "Retry", "Send the question of this exchange again"));
  } else if (message.role === "assistant" && message.status === "complete") {
    buttons.push(actionButton("regenerate", "Regenerate",
      "Ask the question of this exchange again for a new answer"));
  }
  if (cutAtLimit(message) || (message.role === "assistant" && message.status === "interrupted"
                              && message.id)) {
    // Offered on the thread's last answer only (the CSS hides the others).
    buttons.push(actionButton("continue", "Continue",
      "Ask the model to finish this answer from where it stopped"));
  }
  return buttons;
}

/** `‹ 2/3 ›` for a message that has other versions (a regenerated answer, an edited
 *  question): the arrows show the version before or after it. Disabled at either end, and
 *  while an answer streams (setVersionsBusy). */
function versionNavigator(message) {
  const ids = Array.isArray(message.version_ids) ? message.version_ids : [];
  if (!message.id || !(message.versions > 1) || ids.length < 2) return null;
  const at = ids.indexOf(message.id);
  const number = at >= 0 ? at + 1 : message.version;
  const count = ids.length;
  const nav = el("span", "versions");
  nav.setAttribute("role", "group");
  nav.setAttribute("aria-label", "Versions");
  nav.dataset.testid = "versions";
  const label = el("span", "version-label", `${number}/${count}`);
  label.dataset.testid = "version-label";
  label.title = `Version ${number} of ${count}`;
  nav.append(versionStep("prev", "‹", "Previous version", ids[number - 2]), label,
             versionStep("next", "›", "Next version", ids[number]));
  return nav;
}

function versionStep(which, symbol, name, versionId) {
  const button = el("button", `action version-step version-${which}`, symbol);
  button.type = "button";
  button.dataset.action = "show-version";
  button.dataset.testid = `version-${which}`;
  button.setAttribute("aria-label", name);
  button.title = name;
  if (versionId) button.dataset.versionId = versionId;
  button.disabled = !versionId || document.body.dataset.turn === "running";
  return button;
}

/** While an answer streams, no other version can be shown (the gateway would refuse). */
export function setVersionsBusy(container, busy) {
  for (const button of container.querySelectorAll(".versions button")) {
    button.disabled = busy || !button.dataset.versionId;
  }
}

function actionButton(action, label, title) {
  const button = el("button", `action ${action}`, label);
  button.type = "button";
  button.title = title;
  button.dataset.action = action;
  button.dataset.testid = `message-${action}`;
  return button;
}
