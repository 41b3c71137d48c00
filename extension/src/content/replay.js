// Replaying an activation Veil held back, once the protected text is in the
// editor, so that the site's own code sends it: the click (its pointer and
// mouse events), the key, the form submission.

import { readText, sameText, writeText } from "../editors.js";
import { clearlyNotSend, composerControls, findSendButton } from "./composer.js";
import { notify } from "./notice.js";
import { enterIsNewline, state, written } from "./state.js";

/**
 * What started a send, to replay it.
 * @typedef {{kind: "pointer", gesture: import("./state.js").Gesture}
 *   | {kind: "key", control: Element, init: KeyInit}
 *   | {kind: "submit", form: HTMLFormElement, submitter?: HTMLElement | null}
 *   | {kind: "enter", target: EventTarget, init: KeyInit, plain: boolean, caret: [number, number] | null}} Trigger
 * @typedef {{key: string, code?: string, keyCode?: number, ctrlKey?: boolean, metaKey?: boolean}} KeyInit
 */

/** @param {import("./state.js").Gesture} g */
function dispatchClick(g) {
  /** @type {Node | null} */
  let target = g.target instanceof Node && g.target.isConnected ? g.target : g.control?.isConnected ? g.control : null;
  // The site may have re-rendered its button when the text changed.
  if (!target && Number.isFinite(g.x)) target = document.elementFromPoint(g.x, g.y);
  if (!target) return false;
  const at = { bubbles: true, cancelable: true, composed: true, clientX: g.x, clientY: g.y, button: 0, view: window };
  if (g.startedWith !== "click") {
    const pointer = { ...at, pointerId: 1, pointerType: "mouse", isPrimary: true };
    target.dispatchEvent(new PointerEvent("pointerdown", { ...pointer, buttons: 1 }));
    target.dispatchEvent(new MouseEvent("mousedown", { ...at, buttons: 1 }));
    target.dispatchEvent(new PointerEvent("pointerup", pointer));
    target.dispatchEvent(new MouseEvent("mouseup", at));
  }
  target.dispatchEvent(new MouseEvent("click", at));
  return true;
}

/** @param {string} type @param {KeyInit} init */
export function keyEvent(type, init) {
  const event = new KeyboardEvent(type, { ...init, bubbles: true, cancelable: true, composed: true });
  const code = init.keyCode ?? (init.key === "Enter" ? 13 : 32);
  for (const prop of ["keyCode", "which"]) Object.defineProperty(event, prop, { get: () => code });
  return event;
}

/**
 * Replay `trigger` (the text in `editor` is now the protected one).
 * @param {Trigger} trigger @param {Element} editor @param {string} original
 */
export async function resend(trigger, editor, original) {
  if (trigger.kind === "pointer") await trigger.gesture.over;
  state.bypass += 1;
  try {
    if (trigger.kind === "pointer") {
      dispatchClick(trigger.gesture);
    } else if (trigger.kind === "key") {
      const handled = !trigger.control.dispatchEvent(keyEvent("keydown", trigger.init));
      trigger.control.dispatchEvent(keyEvent("keyup", trigger.init));
      if (!handled) /** @type {HTMLElement} */ (trigger.control).click();
    } else if (trigger.kind === "submit") {
      const submitter = trigger.submitter && trigger.form.contains(trigger.submitter) ? trigger.submitter : undefined;
      trigger.form.requestSubmit(submitter);
    } else {
      const target = trigger.target instanceof Node && trigger.target.isConnected ? trigger.target : editor;
      /** @type {HTMLElement} */ (target).focus?.();
      const handled = !target.dispatchEvent(keyEvent("keydown", trigger.init));
      target.dispatchEvent(keyEvent("keyup", trigger.init));
      if (!handled) await enterNotHandled(trigger, editor, original);
    }
  } finally {
    state.bypass -= 1;
  }
}

/**
 * Nobody acted on the replayed Enter.
 * @param {Extract<Trigger, {kind: "enter"}>} trigger @param {Element} editor @param {string} original
 */
async function enterNotHandled(trigger, editor, original) {
  const button = findSendButton();
  if (button) {
    button.click(); // a built-in site whose send button the adapter knows
    return;
  }
  if (editor instanceof HTMLInputElement && editor.form) {
    editor.form.requestSubmit(); // Enter in a one-line field submits its form
    return;
  }
  // Here Enter is not a send: give the person their text back as typed.
  written.delete(editor);
  if (trigger.plain) enterIsNewline.add(editor);
  let text = original;
  if (trigger.plain && trigger.caret) text = original.slice(0, trigger.caret[0]) + "\n" + original.slice(trigger.caret[1]);
  await writeText(editor, text);
  if (trigger.plain && trigger.caret && editor instanceof HTMLTextAreaElement) editor.setSelectionRange(trigger.caret[0] + 1, trigger.caret[0] + 1);
  notify(trigger.plain ? "Enter makes a new line on this page; Veil sent nothing. Your text is as you typed it." : "Nothing on this page sends on this key; Veil sent nothing. Your text is as you typed it.", "protected");
}

/**
 * Trigger the site's own send for the text in `editor`: its send button, Enter, its form, a composer control.
 * @param {Element} editor
 * @returns {"button" | "enter" | "form" | "composer" | null}
 */
export function sendThroughSite(editor) {
  state.bypass += 1;
  try {
    const button = findSendButton();
    if (button) {
      button.click();
      return "button";
    }
    /** @type {HTMLElement} */ (editor).focus?.();
    const init = { key: "Enter", code: "Enter" };
    const handled = !editor.dispatchEvent(keyEvent("keydown", init));
    editor.dispatchEvent(keyEvent("keyup", init));
    if (handled) return "enter";
    const form = editor.closest("form");
    if (form) {
      form.requestSubmit();
      return "form";
    }
    const control = composerControls(editor).find((c) => !clearlyNotSend(c));
    if (control) {
      /** @type {HTMLElement} */ (control).click();
      return "composer";
    }
    return null;
  } finally {
    state.bypass -= 1;
  }
}

/**
 * Resolves true once `text` has left `editor` (the site took it), false after 2 s.
 * @param {Element} editor @param {string} text
 */
export async function textLeaves(editor, text) {
  for (let waited = 0; waited <= 2000; waited += 50) {
    const now = editor.isConnected ? readText(editor) : "";
    if (!sameText(now, text, { loose: true })) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}
