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

/** The character code of a key that types one (Enter, Space), for keypress. @param {KeyInit} init */
function charCodeOf(init) {
  return init.keyCode ?? (init.key === "Enter" ? 13 : 32);
}

/** @param {string} type @param {KeyInit} init */
export function keyEvent(type, init) {
  const code = charCodeOf(init);
  // keyCode, charCode and which as a browser sets them (KeyboardEventInit takes them in Chrome):
  // pages still read them (React's onKeyPress drops a keypress whose charCode it cannot read).
  const legacy = { keyCode: code, which: code, charCode: type === "keypress" ? code : 0 };
  const event = new KeyboardEvent(type, { ...init, ...legacy, bubbles: true, cancelable: true, composed: true });
  for (const [prop, value] of Object.entries(legacy)) Object.defineProperty(event, prop, { get: () => value });
  return event;
}

/**
 * Deliver a key the way a browser does: keydown; unless the page cancelled it,
 * keypress (Enter and Space type a character; Chrome sends no keypress with
 * Cmd held) and, where `inputType` is given (an editor), beforeinput; keyup in
 * every case. Returns the event the page cancelled, or null when it let the
 * key through (then the browser would have done the key's default: a line
 * break in an editor, a click on a control).
 * @param {EventTarget} target @param {KeyInit} init @param {string | null} inputType
 * @returns {"keydown" | "keypress" | "beforeinput" | null}
 */
export function replayKey(target, init, inputType) {
  /** @type {"keydown" | "keypress" | "beforeinput" | null} */
  let cancelled = null;
  if (!target.dispatchEvent(keyEvent("keydown", init))) cancelled = "keydown";
  if (!cancelled && !init.metaKey && !target.dispatchEvent(keyEvent("keypress", init))) cancelled = "keypress";
  if (!cancelled && inputType) {
    const before = new InputEvent("beforeinput", { inputType, bubbles: true, cancelable: true, composed: true });
    if (!target.dispatchEvent(before)) cancelled = "beforeinput";
  }
  target.dispatchEvent(keyEvent("keyup", init));
  return cancelled;
}

/** What a plain Enter inserts in `editor`: a line break in a text field, a paragraph in a rich editor. @param {Element} editor */
function lineBreakType(editor) {
  return editor instanceof HTMLTextAreaElement || editor instanceof HTMLInputElement ? "insertLineBreak" : "insertParagraph";
}

/** `now` is `wrote` with one or more line breaks added (the editor made a new line). @param {string} now @param {string} wrote */
export function addedLineBreak(now, wrote) {
  const breaks = (/** @type {string} */ t) => (t.match(/\n/g) || []).length;
  return now !== wrote && now.replace(/\s+/g, "") === wrote.replace(/\s+/g, "") && breaks(now) > breaks(wrote);
}

/**
 * What the editor did after the replayed Enter, watched for up to `ms`:
 * "sent" (the text left it), "newline" (it added a line break to the text),
 * or "same" (it still holds the text Veil wrote).
 * @param {Element} editor @param {string} wrote @param {number} ms
 * @returns {Promise<"sent" | "newline" | "same">}
 */
async function editorDid(editor, wrote, ms) {
  for (let waited = 0; ; waited += 25) {
    const now = editor.isConnected ? readText(editor) : "";
    if (addedLineBreak(now, wrote)) return "newline";
    if (!sameText(now, wrote, { loose: true })) return "sent";
    if (waited >= ms) return "same";
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/**
 * Replay `trigger` (the text in `editor` is now the protected one). Resolves
 * false when it turned out not to be a send (Enter makes a new line here: the
 * person's text is back, and the notice says so), else true.
 * @param {Trigger} trigger @param {Element} editor @param {string} original
 * @returns {Promise<boolean>}
 */
export async function resend(trigger, editor, original) {
  if (trigger.kind === "pointer") await trigger.gesture.over;
  if (trigger.kind === "enter") return resendEnter(trigger, editor, original);
  state.bypass += 1;
  try {
    if (trigger.kind === "pointer") {
      dispatchClick(trigger.gesture);
    } else if (trigger.kind === "key") {
      if (!replayKey(trigger.control, trigger.init, null)) /** @type {HTMLElement} */ (trigger.control).click();
    } else if (trigger.kind === "submit") {
      const submitter = trigger.submitter && trigger.form.contains(trigger.submitter) ? trigger.submitter : undefined;
      trigger.form.requestSubmit(submitter);
    }
  } finally {
    state.bypass -= 1;
  }
  return true;
}

/**
 * Replay Enter, then decide from what the editor did: the text left (sent),
 * the editor made a new line itself, or nobody took the key -- then the
 * adapter's send button, a one-line field's form, or (nothing sent it) the
 * browser's own line break.
 * @param {Extract<Trigger, {kind: "enter"}>} trigger @param {Element} editor @param {string} original
 * @returns {Promise<boolean>}
 */
async function resendEnter(trigger, editor, original) {
  const target = trigger.target instanceof Node && trigger.target.isConnected ? trigger.target : editor;
  const wrote = readText(editor);
  /** @type {ReturnType<typeof replayKey>} */
  let cancelled;
  state.bypass += 1;
  try {
    /** @type {HTMLElement} */ (target).focus?.();
    cancelled = replayKey(target, trigger.init, trigger.plain ? lineBreakType(editor) : null);
    if (!cancelled && readText(editor) === wrote) {
      const button = findSendButton();
      if (button) {
        button.click(); // a built-in site whose send button the adapter knows
        return true;
      }
      if (editor instanceof HTMLInputElement && editor.form) {
        editor.form.requestSubmit(); // Enter in a one-line field submits its form
        return true;
      }
    }
  } finally {
    state.bypass -= 1;
  }
  // A page that took the key shows at once what it did with it; one that let
  // it through may still send from a later handler (keyup, a timer).
  const did = await editorDid(editor, wrote, cancelled ? 150 : 400);
  if (did === "sent" || (did === "same" && cancelled)) return true;
  await enterIsNotSend(trigger, editor, original);
  return false;
}

/**
 * Enter did not send here: give the person their text back as typed (with the line break, where Enter made one).
 * @param {Extract<Trigger, {kind: "enter"}>} trigger @param {Element} editor @param {string} original
 */
async function enterIsNotSend(trigger, editor, original) {
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
    // (No beforeinput: nothing would take a line break back out of the protected text.)
    if (replayKey(editor, { key: "Enter", code: "Enter" }, null)) return "enter";
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
