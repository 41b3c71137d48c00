// Catching sends in the capture phase, before the site's handlers: Enter and
// Ctrl/Cmd+Enter in the editor, Enter/Space on a focused control, a form
// submission, and a click (pointerdown, mousedown, click) on a control of the
// composer region. While a click is held, the rest of its events are held too
// and replayed with it.

import { editableRoot, readText, sameText } from "../editors.js";
import { sendActivation } from "./composer.js";
import { candidateEditors, unprotectedText } from "./drafts.js";
import { notify } from "./notice.js";
import { protectAndSend } from "./protect.js";
import { adapter, domInterception, enterIsNewline, intercepting, learned, state } from "./state.js";

const GESTURE_REST = new Set(["mousedown", "pointerup", "mouseup", "click"]);

/** @param {Event} event */
function stop(event) {
  event.preventDefault();
  event.stopImmediatePropagation();
}

/**
 * After an activation Veil let pass: did the text leave the editor? Then that control sends.
 * @param {Element} editor @param {string} text @param {"off" | "control"} why @param {Element} [control]
 */
function watchLeaves(editor, text, why, control) {
  const left = () => {
    const now = editor.isConnected ? readText(editor) : "";
    return !now.trim() || (!sameText(now, text, { loose: true }) && !now.includes(text.trim().slice(0, 12)));
  };
  const look = () => {
    if (!left()) return false;
    if (why === "off") notify("Sent as typed: Veil's protection is off for this site.", "off");
    else if (control) learned.add(control);
    return true;
  };
  setTimeout(() => look() || setTimeout(look, 400), 0);
}

/** @param {MouseEvent} event @param {EventTarget} target @param {Element} control */
function startGesture(event, target, control) {
  /** @type {() => void} */
  let done = () => {};
  /** @type {import("./state.js").Gesture} */
  const g = {
    target,
    control,
    startedWith: event.type,
    x: event.clientX,
    y: event.clientY,
    ended: false,
    over: new Promise((resolve) => (done = resolve)),
    end() {
      g.ended = true;
      done();
    },
  };
  if (event.type === "click") g.end();
  else setTimeout(() => g.end(), 1000); // the button was released elsewhere
  return g;
}

/** pointerdown, mousedown, pointerup, mouseup, click. @param {MouseEvent} event */
export function onPointer(event) {
  if (state.bypass > 0) return;
  if (state.gesture && !state.gesture.ended && GESTURE_REST.has(event.type)) {
    // The rest of a click Veil is holding: the site sees it when Veil replays it.
    stop(event);
    if (event.type === "click") state.gesture.end();
    return;
  }
  if (event.type !== "pointerdown" && event.type !== "mousedown" && event.type !== "click") return;
  if (event.button !== 0 || !domInterception()) return;
  const path = event.composedPath();
  const hit = sendActivation(path);
  if (!hit) return;
  if (!intercepting()) {
    watchLeaves(hit.editor, hit.text, "off");
    return;
  }
  if (hit.how === "not-send") {
    watchLeaves(hit.editor, hit.text, "control", hit.control);
    return;
  }
  stop(event);
  if (state.busy) return;
  const gesture = startGesture(event, path[0], hit.control);
  state.gesture = gesture;
  protectAndSend(hit.editor, hit.text, { kind: "pointer", gesture });
}

/** @param {KeyboardEvent} event */
export function onKeydown(event) {
  if (state.bypass > 0 || !domInterception()) return;
  if (event.isComposing || event.keyCode === 229) return;
  const path = event.composedPath();
  const target = path[0];
  const editor = editableRoot(target);
  if (!editor) {
    onControlKey(event, path);
    return;
  }
  if (event.key !== "Enter" || event.shiftKey || event.altKey) return;
  if (!adapter()) return;
  const text = unprotectedText(editor);
  if (!text) return;
  if (!intercepting()) {
    watchLeaves(editor, text, "off");
    return;
  }
  const plain = !event.ctrlKey && !event.metaKey;
  if (plain && enterIsNewline.has(editor)) return;
  stop(event);
  if (state.busy) return;
  const init = { key: "Enter", code: "Enter", ctrlKey: event.ctrlKey, metaKey: event.metaKey };
  /** @type {[number, number] | null} */
  const caret = editor instanceof HTMLTextAreaElement ? [editor.selectionStart, editor.selectionEnd] : null;
  protectAndSend(editor, text, { kind: "enter", target, init, plain, caret });
}

/**
 * Enter or Space on a focused control of the composer that is not a native button (those click).
 * @param {KeyboardEvent} event @param {EventTarget[]} path
 */
function onControlKey(event, path) {
  if (event.key !== "Enter" && event.key !== " ") return;
  if (event.shiftKey || event.altKey || event.ctrlKey || event.metaKey) return;
  const hit = sendActivation(path);
  if (!hit || hit.how === "not-send" || !intercepting()) return;
  if (hit.control.matches("button, input")) return; // its click comes next and is caught there
  stop(event);
  if (state.busy) return;
  const init = { key: event.key, code: event.code, keyCode: event.keyCode };
  protectAndSend(hit.editor, hit.text, { kind: "key", control: hit.control, init });
}

/** @param {SubmitEvent} event */
export function onSubmit(event) {
  if (state.bypass > 0 || !domInterception()) return;
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !adapter()) return;
  const inForm = [...candidateEditors(), ...form.querySelectorAll("textarea, [contenteditable=true], [contenteditable=plaintext-only]")];
  const editor = inForm.find((e) => form.contains(e) && unprotectedText(editableRoot(e) || e));
  if (!editor) return;
  const root = editableRoot(editor) || editor;
  const text = /** @type {string} */ (unprotectedText(root));
  if (!intercepting()) {
    watchLeaves(root, text, "off");
    return;
  }
  stop(event);
  if (state.busy) return;
  protectAndSend(root, text, { kind: "submit", form, submitter: event.submitter });
}
