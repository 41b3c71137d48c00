// The composer rule: which activations could send the draft. A control is
// anything clickable in the editor's composer region (its form, or its
// nearest ancestor that also holds the clicked element); the adapter's
// selectors (sites.js) only make it precise. A control that is clearly not a
// send (attach, voice, a menu) passes.

import { candidateEditors, unprotectedText } from "./drafts.js";
import { adapter, learned } from "./state.js";

// What counts as a control in a composer region (besides anything drawn with
// a pointer cursor).
const CLICKABLE =
  "button, [role=button], input[type=submit], input[type=button], input[type=image], a[href], [onclick], [tabindex]:not([tabindex='-1'])";
const NOT_SEND_ROLE =
  "input[type=file], select, input[type=checkbox], input[type=radio], input[type=text], [role=menuitem], [role=tab], [role=checkbox], [role=switch], [role=option], [role=combobox], [aria-haspopup]:not([aria-haspopup=false]), [aria-expanded]";
const SEND_WORDS = /\b(send|submit|ask|go)\b/i;
const NOT_SEND_WORDS =
  /attach|upload|file|image|photo|camera|voice|micro|dictat|record|audio|model|menu|more|option|setting|emoji|tool|search|think|reason|style|\b(add|plus|mic|mode|web|close|cancel|stop|copy|share)\b/i;

/**
 * An activation that could send an unprotected draft: the editor, its text,
 * the control, and how the control was recognised.
 * @typedef {{editor: Element, text: string, control: Element, how: "adapter" | "learned" | "not-send" | "composer"}} Activation
 */

/** A control a person would not call "send" (attach, voice, a picker). @param {Element} control */
export function clearlyNotSend(control) {
  if (control.matches(NOT_SEND_ROLE) || control.querySelector("input[type=file]")) return true;
  const text = (control.textContent || "").trim();
  const label = ["aria-label", "title", "data-testid", "name", "id"].map((a) => control.getAttribute(a) || "").join(" ") + " " + (text.length <= 40 ? text : "");
  if (SEND_WORDS.test(label)) return false;
  return NOT_SEND_WORDS.test(label);
}

/** @param {Element} el */
function looksClickable(el) {
  if (el.matches(CLICKABLE)) return true;
  try {
    return getComputedStyle(el).cursor === "pointer";
  } catch {
    return false;
  }
}

/** @param {Node} node the next node up, across a shadow root's host */
function parentOf(node) {
  const root = node.getRootNode?.();
  return node.parentElement || (root instanceof ShadowRoot ? root.host : null);
}

/**
 * The controls next to the editor (for the popup): those of the nearest ancestor (6 levels up) that has any.
 * @param {Element} editor
 * @returns {Element[]}
 */
export function composerControls(editor) {
  const form = editor.closest("form");
  /** @type {Element | null} */
  let node = form || editor.parentElement;
  for (let depth = 0; node && node !== document.body && node !== document.documentElement && depth < 6; depth++) {
    /** @type {Element[]} */
    const found = [];
    for (const c of node.querySelectorAll("*")) {
      if (found.length >= 50) break;
      if (c === editor || editor.contains(c) || c.contains(editor)) continue;
      if (looksClickable(c) && !found.some((f) => f.contains(c))) found.push(c);
    }
    if (found.length || form) return found;
    node = parentOf(node);
  }
  return [];
}

/**
 * The composer region an activation at `path` shares with `editor`: the
 * editor's form, or the nearest ancestor of the editor (up to 6 levels) that
 * also holds the clicked element -- no selector involved.
 * @param {Element} editor
 * @param {EventTarget[]} path
 */
function composerOf(editor, path) {
  const form = editor.closest("form");
  if (form && path.includes(form)) return form;
  let node = parentOf(editor);
  for (let depth = 0; node && depth < 6; depth++) {
    if (node === document.body || node === document.documentElement) return null;
    if (path.includes(node)) return node;
    node = parentOf(node);
  }
  return null;
}

/**
 * The innermost control on the event's path inside `region`, outside the editor.
 * @param {EventTarget[]} path
 * @param {Element} region
 * @param {Element} editor
 */
function controlOnPath(path, region, editor) {
  for (const node of path) {
    if (!(node instanceof Element)) continue;
    if (node === region) return null;
    if (node === editor || editor.contains(node)) return null;
    if (node.contains(editor)) continue;
    if (looksClickable(node)) return node;
  }
  return null;
}

/** @param {EventTarget[]} path @param {{send: string[]}} ad */
function adapterSendOnPath(path, ad) {
  for (const node of path) {
    if (!(node instanceof Element)) continue;
    for (const selector of ad.send) {
      try {
        if (node.matches(selector)) return node;
      } catch {
        /* a selector this browser cannot parse */
      }
    }
  }
  return null;
}

/**
 * The activation, when the event's path could send an unprotected draft.
 * @param {EventTarget[]} path
 * @returns {Activation | null}
 */
export function sendActivation(path) {
  const ad = adapter();
  if (!ad) return null;
  const byAdapter = adapterSendOnPath(path, ad);
  for (const editor of candidateEditors()) {
    if (path.includes(editor)) continue; // a click inside the editor is editing
    const text = unprotectedText(editor);
    if (!text) continue;
    if (byAdapter) return { editor, text, control: byAdapter, how: "adapter" };
    const region = composerOf(editor, path);
    if (!region) continue;
    const control = controlOnPath(path, region, editor);
    if (!control) continue; // the composer's background: focusing, not sending
    const how = learned.has(control) ? "learned" : clearlyNotSend(control) ? "not-send" : "composer";
    return { editor, text, control, how };
  }
  return null;
}

/** The adapter's send button, when it is on the page and enabled. @returns {HTMLElement | null} */
export function findSendButton() {
  const ad = adapter();
  for (const selector of ad?.send || []) {
    let nodes;
    try {
      nodes = document.querySelectorAll(selector);
    } catch {
      continue;
    }
    for (const node of nodes) {
      if (!(/** @type {any} */ (node).disabled) && node.getAttribute("aria-disabled") !== "true") return /** @type {HTMLElement} */ (node);
    }
  }
  return null;
}
