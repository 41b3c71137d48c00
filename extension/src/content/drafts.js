// The person's draft: which editor holds it, and whether it is text Veil has
// not protected yet.

import { editableRoot, findFirst, readText, sameText } from "../editors.js";
import { adapter, state, written } from "./state.js";

// Any editor, for a page whose adapter finds none (only to show where it is).
const ANY_EDITOR = ["textarea", "[contenteditable=true]", "[contenteditable=plaintext-only]", "[contenteditable='']"];

/** `text` is what Veil wrote into `editor` (its protected text). */
export function isOurs(editor, text) {
  const mine = written.get(editor);
  return mine !== undefined && sameText(text, mine, { loose: true });
}

/** The editor's text when it holds a draft Veil has not protected, else null. */
export function unprotectedText(editor) {
  if (!editor?.isConnected) return null;
  const text = readText(editor);
  return text.trim() && !isOurs(editor, text) ? text : null;
}

/**
 * The editor, and how it was found: the adapter's selectors, else the editor last typed into, else the focused one.
 * @returns {{editor: Element | null, foundBy: "adapter" | "typing" | "focus" | "page" | null}}
 */
export function editorInfo() {
  const ad = adapter();
  const byAdapter = ad ? findFirst(document, ad.editor) : null;
  if (byAdapter) return { editor: editableRoot(byAdapter) || byAdapter, foundBy: "adapter" };
  if (state.lastEditor?.isConnected) return { editor: state.lastEditor, foundBy: "typing" };
  const focused = editableRoot(document.activeElement);
  if (focused) return { editor: focused, foundBy: "focus" };
  const onPage = findFirst(document, ANY_EDITOR);
  if (onPage) return { editor: editableRoot(onPage) || onPage, foundBy: "page" };
  return { editor: null, foundBy: null };
}

/** The editors a send could be about: the page's editor, the one last used, the focused one. */
export function candidateEditors() {
  /** @type {Element[]} */
  const list = [];
  const add = (/** @type {Element | null} */ e) => e && e.isConnected && !list.includes(e) && list.push(e);
  add(editorInfo().editor);
  add(state.lastEditor);
  add(editableRoot(document.activeElement));
  return list;
}
