// Reading and writing the prompt in the editors chat sites use.
//
// Writing goes through the editor's own input handling -- a paste event, or
// the browser's insertText command -- so the site's state (React, ProseMirror,
// Quill, Lexical) follows, and the site's own code sends what Veil wrote.

export function editorKind(el) {
  if (!el) return null;
  if (el instanceof HTMLTextAreaElement) return "textarea";
  if (el instanceof HTMLInputElement) return "input";
  if (el.classList.contains("ProseMirror") || el.pmViewDesc) return "prosemirror";
  if (el.classList.contains("ql-editor")) return "quill";
  if (el.getAttribute("data-lexical-editor") === "true") return "lexical";
  if (el.isContentEditable) return "contenteditable";
  return null;
}

/** The editable root that contains `node` (a textarea, or the top contenteditable). */
export function editableRoot(node) {
  let el = node instanceof Element ? node : node?.parentElement;
  if (!el) return null;
  if (el instanceof HTMLTextAreaElement) return el;
  if (el instanceof HTMLInputElement && el.type === "text") return el;
  if (!el.isContentEditable) return null;
  while (el.parentElement && el.parentElement.isContentEditable) el = el.parentElement;
  return el;
}

function visible(el) {
  const rect = el.getBoundingClientRect();
  return rect.width > 0 && rect.height > 0;
}

/** The first visible element matching one of `selectors`, in order. */
export function findFirst(root, selectors) {
  for (const selector of selectors) {
    let nodes;
    try {
      nodes = root.querySelectorAll(selector);
    } catch {
      continue;
    }
    for (const el of nodes) if (visible(el)) return el;
  }
  return null;
}

/** The site's editor: the adapter's selectors, then what has focus. */
export function findEditor(adapter, hint) {
  const fromHint = hint ? editableRoot(hint) : null;
  if (fromHint && adapter.editor.some((sel) => safeMatches(fromHint, sel))) return fromHint;
  const found = findFirst(document, adapter.editor);
  if (found) return editableRoot(found) || found;
  const active = editableRoot(document.activeElement);
  return active;
}

function safeMatches(el, selector) {
  try {
    return el.matches(selector) || Boolean(el.closest(selector));
  } catch {
    return false;
  }
}

/** Text of a contenteditable, one line per block (what a person sees). */
function blockText(root) {
  const lines = [];
  let current = "";
  const blockTags = new Set(["P", "DIV", "LI", "H1", "H2", "H3", "H4", "H5", "H6", "PRE", "BLOCKQUOTE"]);
  const walk = (node) => {
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) {
        current += child.nodeValue;
      } else if (child.nodeName === "BR") {
        if (!child.classList?.contains("ProseMirror-trailingBreak")) {
          lines.push(current);
          current = "";
        }
      } else if (child.nodeType === Node.ELEMENT_NODE) {
        if (child.getAttribute("contenteditable") === "false" || child.getAttribute("aria-hidden") === "true") continue;
        const block = blockTags.has(child.nodeName);
        if (block && current !== "") {
          lines.push(current);
          current = "";
        }
        walk(child);
        if (block) {
          lines.push(current);
          current = "";
        }
      }
    }
  };
  walk(root);
  if (current !== "") lines.push(current);
  return lines.join("\n").replace(/\u00a0/g, " ");
}

export function readText(el) {
  const kind = editorKind(el);
  if (kind === "textarea" || kind === "input") return el.value;
  return blockText(el);
}

/**
 * Compare what an editor holds with what was written. Textareas must match
 * exactly (up to line endings); rich editors may reshape whitespace the way a
 * paste would (ProseMirror merges blank lines), so there every run of
 * whitespace counts as one space -- every other character must be identical.
 */
export function sameText(a, b, { loose = false } = {}) {
  const norm = loose
    ? (s) => s.replace(/[\s\u00a0]+/g, " ").trim()
    : (s) => s.replace(/\r\n?/g, "\n").replace(/\u00a0/g, " ").replace(/\n+$/, "");
  return norm(a) === norm(b);
}

/** One macrotask: lets editors that commit in a microtask (Lexical) finish. */
function settle() {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/**
 * Select the whole editor and wait until the editor has seen the new selection:
 * ProseMirror, Quill and Lexical read it on the document's selectionchange
 * event, which the browser fires in a task of its own.
 */
async function selectAllIn(el) {
  el.focus();
  const selection = window.getSelection();
  const range = document.createRange();
  range.selectNodeContents(el);
  const seen = new Promise((resolve) => {
    const timer = setTimeout(resolve, 100);
    document.addEventListener(
      "selectionchange",
      () => {
        clearTimeout(timer);
        resolve(undefined);
      },
      { once: true },
    );
  });
  selection.removeAllRanges();
  selection.addRange(range);
  await seen;
  await settle();
}

function setTextareaValue(el, text) {
  const proto = el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
  const setter = Object.getOwnPropertyDescriptor(proto, "value").set;
  el.focus();
  setter.call(el, text);
  el.dispatchEvent(new InputEvent("input", { bubbles: true, inputType: "insertReplacementText", data: text }));
  el.dispatchEvent(new Event("change", { bubbles: true }));
}

function pasteText(el, text) {
  const data = new DataTransfer();
  data.setData("text/plain", text);
  const event = new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true });
  el.dispatchEvent(event);
  return event.defaultPrevented;
}

/**
 * Replace the whole content of the editor with `text`; resolves to true when
 * the editor then holds exactly `text` (in a one-line field: with its line
 * breaks as spaces).
 */
export async function writeText(el, text) {
  const kind = editorKind(el);
  if (kind === "textarea" || kind === "input") {
    // A one-line field drops line breaks (the header's among them): they become spaces.
    const value = kind === "input" ? text.replace(/\r\n?|\n/g, " ") : text;
    setTextareaValue(el, value);
    await settle();
    return sameText(readText(el), value);
  }
  // Rich editors: select everything, then paste; the editor's own paste
  // handling turns the text into its document. insertText is the fallback.
  const loose = { loose: true };
  await selectAllIn(el);
  pasteText(el, text);
  await settle();
  if (sameText(readText(el), text, loose)) return true;
  await selectAllIn(el);
  document.execCommand("insertText", false, text);
  await settle();
  return sameText(readText(el), text, loose);
}
