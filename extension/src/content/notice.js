// What Veil says on the page: the notice (bottom right, in a shadow root) and
// the "protection is off" sign near the editor. Only Veil's own words and the
// protected text's fate go here -- never the person's original.

import { ext } from "../chrome-api.js";
import { message, Msg, Target } from "../messages.js";
import { editorInfo } from "./drafts.js";
import { adapter, intercepting, state } from "./state.js";

const NOTICE_TAG = "veil-notice";
const OFF_TAG = "veil-off";

/** @typedef {"working" | "protected" | "blocked" | "unprotected" | "off"} NoticeKind */

/** @type {ReturnType<typeof setTimeout> | undefined} */
let hideTimer;

function noticeHost() {
  let host = /** @type {HTMLElement | null} */ (document.querySelector(NOTICE_TAG));
  if (!host) {
    host = document.createElement(NOTICE_TAG);
    const root = host.attachShadow({ mode: "open" });
    root.innerHTML = `<style>
        :host { all: initial; position: fixed; right: 16px; bottom: 16px; z-index: 2147483647; }
        .box { font: 13px/1.4 system-ui, sans-serif; max-width: 380px; padding: 10px 12px; border-radius: 8px;
               box-shadow: 0 4px 16px rgba(0,0,0,.25); color: #111; background: #f8fafc; border-left: 4px solid #64748b;
               display: flex; gap: 8px; align-items: flex-start; }
        .box[data-kind="protected"] { border-color: #15803d; }
        .box[data-kind="blocked"] { border-color: #b91c1c; background: #fef2f2; }
        .box[data-kind="unprotected"], .box[data-kind="off"] { border-color: #b45309; background: #fffbeb; }
        button { all: unset; cursor: pointer; padding: 0 4px; font-weight: bold; }
        button.panel { font-weight: normal; text-decoration: underline; white-space: nowrap; }
        .box[data-kind="working"] button.panel { display: none; }
      </style><div class="box" role="status" aria-live="polite"><span class="text"></span>` +
      `<button class="panel" title="Write your next prompt in Veil's side panel: this page then sees only the protected text">Write in Veil's panel</button>` +
      `<button class="close" aria-label="Dismiss">×</button></div>`;
    root.querySelector("button.close")?.addEventListener("click", hideNotice);
    root.querySelector("button.panel")?.addEventListener("click", openPanel);
    (document.body || document.documentElement).appendChild(host);
  }
  return host;
}

/** Show `text` in Veil's notice. @param {string} text @param {NoticeKind} kind */
export function notify(text, kind) {
  const host = noticeHost();
  const root = /** @type {ShadowRoot} */ (host.shadowRoot);
  host.hidden = false;
  host.dataset.kind = kind;
  const box = /** @type {HTMLElement} */ (root.querySelector(".box"));
  box.dataset.kind = kind;
  /** @type {HTMLElement} */ (root.querySelector(".text")).textContent = text;
  clearTimeout(hideTimer);
  if (kind === "protected" || kind === "off") hideTimer = setTimeout(hideNotice, 6000);
}

/** The notice's button: the worker opens Veil's side panel on this tab (inside this click's gesture). */
function openPanel() {
  ext.runtime.send(message(Msg.OPEN_PANEL, Target.BACKGROUND, {})).then(
    (/** @type {any} */ reply) => {
      if (!reply?.ok) notify(`Veil could not open its panel here (${reply?.error?.message || "no answer"}): press Alt+Shift+V, or use the button in Veil's popup.`, "off");
    },
    () => notify("Veil could not open its panel here: press Alt+Shift+V, or use the button in Veil's popup.", "off"),
  );
}

function hideNotice() {
  const host = /** @type {HTMLElement | null} */ (document.querySelector(NOTICE_TAG));
  if (host) host.hidden = true;
}

// ------------------------------------------------------------ "protection is off", near the editor

let offFrame = 0;

/** Show or hide the "protection is off" sign (next frame). */
export function renderOff() {
  cancelAnimationFrame(offFrame);
  offFrame = requestAnimationFrame(placeOff);
}

function placeOff() {
  let host = /** @type {HTMLElement | null} */ (document.querySelector(OFF_TAG));
  const off = state.settings !== null && Boolean(adapter()) && !intercepting();
  if (!off) {
    if (host) host.hidden = true;
    return;
  }
  if (!host) {
    host = document.createElement(OFF_TAG);
    const root = host.attachShadow({ mode: "open" });
    root.innerHTML = `<style>
        :host { all: initial; position: fixed; z-index: 2147483646; pointer-events: none; }
        span { font: 600 11px/1.6 system-ui, sans-serif; color: #78350f; background: #fef3c7; border: 1px solid #d97706;
               border-radius: 10px; padding: 1px 8px; white-space: nowrap; box-shadow: 0 1px 4px rgba(0,0,0,.15); }
      </style><span role="status">Veil: protection off here — prompts are sent as typed</span>`;
    (document.body || document.documentElement).appendChild(host);
  }
  host.hidden = false;
  const editor = editorInfo().editor;
  const rect = editor?.getBoundingClientRect();
  if (rect && rect.width > 0) {
    host.style.left = `${Math.max(4, rect.left)}px`;
    host.style.top = `${Math.max(4, rect.top - 22)}px`;
    host.style.bottom = "";
  } else {
    host.style.left = "16px";
    host.style.top = "";
    host.style.bottom = "16px";
  }
}
