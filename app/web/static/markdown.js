// Model output as markdown, safely: markdown-it with raw HTML off turns the text into markup,
// DOMPurify cleans that markup, and only the cleaned DOM fragment reaches the page. Nothing
// in an answer can run: no inline handlers survive DOMPurify, and the page's CSP forbids
// inline script and eval anyway.

import markdownit from "./vendor/markdown-it.esm.min.js";
import DOMPurify from "./vendor/purify.es.js";

// html: false is the important line: `<script>` or `<b>` written by a model stays visible
// text. linkify turns bare URLs into links (markdown-it still refuses javascript: and
// friends); typographer stays off so quotes and dashes are exactly what was stored; breaks
// keeps a model's single line breaks, which in a chat answer are meant as lines.
const md = markdownit({ html: false, linkify: true, typographer: false, breaks: true });

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    // A model's link opens elsewhere and learns nothing about this page.
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

const PURIFY_OPTIONS = {
  RETURN_DOM_FRAGMENT: true,
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe"],
  FORBID_ATTR: ["style"],
};

/** The text as a sanitized DocumentFragment (never a string handed to innerHTML). */
export function renderMarkdown(text) {
  const fragment = DOMPurify.sanitize(md.render(text || ""), PURIFY_OPTIONS);
  for (const pre of fragment.querySelectorAll("pre")) wrapCodeBlock(pre);
  for (const img of fragment.querySelectorAll("img")) imageAsLink(img);
  return fragment;
}

/** An image in an answer becomes a link to it: the page loads nothing a model names (the CSP
 *  would block it anyway and leave a broken icon), and the user still sees what it was. */
function imageAsLink(img) {
  const src = img.getAttribute("src") || "";
  const web = /^https?:\/\//i.test(src); // a data: URL is not worth a link
  const link = document.createElement(web ? "a" : "span");
  link.className = "image-link";
  if (web) {
    link.href = src;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
  }
  link.textContent = img.getAttribute("alt") || (web ? src : "image");
  img.replaceWith(link);
}

/** Put a code block in a frame with a copy button. The button's label is CSS-generated
 *  content, so copying or reading the answer's text never picks up the word "Copy". */
function wrapCodeBlock(pre) {
  const frame = document.createElement("div");
  frame.className = "code-block";
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy-code";
  button.dataset.testid = "copy-code";
  button.setAttribute("aria-label", "Copy code");
  button.addEventListener("click", () => {
    copyText(pre.textContent).then((ok) => flash(button, ok ? "copied" : "copy-failed"));
  });
  pre.replaceWith(frame);
  frame.append(button, pre);
}

/** Copy to the clipboard; falls back to a hidden textarea where the Clipboard API is
 *  missing (a page served over plain http on another host is not a secure context). */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // permission refused: try the old way
    }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "offscreen";
  document.body.append(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}

/** How long a button says "Copied" (or "Copy failed") before it is a Copy button again. */
const FLASH_MS = 1500;
const FLASH_LABELS = { copied: "Copied", "copy-failed": "Copy failed" };

/** Show for a moment that a copy worked (or not): the state is an attribute the CSS styles
 *  (and labels, for a code block's button, whose label is generated content); a button
 *  with a text label (`labelled`) says it in words too. */
export function flash(button, state, { labelled = false } = {}) {
  clearTimeout(button.flashTimer);
  if (labelled) {
    button.dataset.label ??= button.textContent;
    button.textContent = FLASH_LABELS[state] || button.dataset.label;
  }
  button.dataset.state = state;
  button.flashTimer = setTimeout(() => {
    delete button.dataset.state;
    if (labelled) button.textContent = button.dataset.label;
  }, FLASH_MS);
}
