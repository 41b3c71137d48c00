// The content script (Veil's isolated world, from document_start). While an
// editor holds text Veil has not protected, every activation that could send
// it is caught in the capture phase -- Enter and Ctrl/Cmd+Enter in the
// editor, a form submission, and a click (pointerdown, mousedown, click, or
// Enter/Space on a focused control) on any clickable element of the editor's
// composer region (its form, or its nearest ancestor that also holds a
// button). The prompt is protected by the core, written back through the
// editor, and the activation is replayed so the site's own code sends the
// protected text. The adapter's selectors (sites.js) only make this precise:
// the composer rule does not depend on them. A control that is clearly not a
// send (attach, voice, a menu) passes, and Veil watches whether the text left.
//
// Behind it, the network guard (guard.js, in the page's world) refuses any
// request that still carries the unprotected text; this script tells it which
// texts are approved and, when it refuses one, protects the prompt, puts it
// back in the box and says what happened. Fail closed: without a protected
// text nothing is sent, unless the person chose "send unprotected" for the
// site -- the only way an original leaves.
//
// This file only wires the modules of content/ to the page and to the worker:
//   state.js         the shared state (settings, what Veil is doing, what it learned)
//   guard-link.js    the channel to the network guard (messages.js GUARD_SCHEMA)
//   drafts.js        which editor holds an unprotected draft
//   composer.js      the composer rule: which activations could send it
//   intercept.js     catching Enter, clicks and submissions in the capture phase
//   protect.js       protecting the draft and writing it back
//   replay.js        replaying the activation so the site sends the protected text
//   recover.js       after the guard refused a request
//   panel-insert.js  a prompt written in Veil's side panel
//   notice.js        the on-page notice and the "protection is off" sign
//   page-check.js    what Veil found on the page (popup, badge)
// (esbuild bundles them into one classic script: build.mjs.)


import { ext } from "./chrome-api.js";
import { editorInfo } from "./content/drafts.js";
import { listenToGuard, tellGuardState } from "./content/guard-link.js";
import { onKeydown, onPointer, onSubmit } from "./content/intercept.js";
import { renderOff } from "./content/notice.js";
import { reportCheck, siteCheck } from "./content/page-check.js";
import { composeInsert } from "./content/panel-insert.js";
import { afterGuardBlocked, noteActivation } from "./content/recover.js";
import { latestReply } from "./content/reply.js";
import { intercepting, siteId, state } from "./content/state.js";
import { editableRoot, editorKind, readText } from "./editors.js";
import { ErrorCode } from "./errors.js";
import { fail, Msg, ok, Target } from "./messages.js";
import { normalizeSettings } from "./settings.js";

function readSettings() {
  ext.storage.local.get(__VEIL_TEST_SWITCHES__ ? ["settings", "veilTestSwitches"] : "settings").then((/** @type {any} */ stored) => {
    state.settings = normalizeSettings(stored.settings);
    if (__VEIL_TEST_SWITCHES__) state.switches = stored.veilTestSwitches || {};
    tellGuardState();
    renderOff();
  });
  ext.storage.onChanged((/** @type {any} */ changes, /** @type {string} */ area) => {
    if (area !== "local") return;
    if (changes.settings) state.settings = normalizeSettings(changes.settings.newValue);
    if (__VEIL_TEST_SWITCHES__ && changes.veilTestSwitches) state.switches = changes.veilTestSwitches.newValue || {};
    tellGuardState();
    renderOff();
  });
}

/** focusin and input: the editor the person uses. @param {Event} event */
function noteEditor(event) {
  const root = editableRoot(event.composedPath?.()[0] ?? event.target);
  if (root && root !== state.lastEditor) {
    state.lastEditor = root;
    reportCheck();
  }
  if (root && !intercepting()) renderOff();
}

function listenToPage() {
  for (const type of ["keydown", "pointerdown", "click"]) window.addEventListener(type, noteActivation, true);
  for (const type of ["pointerdown", "mousedown", "pointerup", "mouseup", "click"]) {
    window.addEventListener(type, (event) => onPointer(/** @type {MouseEvent} */ (event)), true);
  }
  window.addEventListener("keydown", onKeydown, true);
  window.addEventListener("submit", onSubmit, true);
  window.addEventListener("focusin", noteEditor, true);
  window.addEventListener("input", noteEditor, true);
  window.addEventListener("scroll", () => state.settings && !intercepting() && renderOff(), true);
  window.addEventListener("resize", () => state.settings && !intercepting() && renderOff());
  window.addEventListener("load", () => {
    reportCheck();
    renderOff();
  });
}

function listenToWorker() {
  ext.runtime.onMessage((/** @type {any} */ msg, /** @type {unknown} */ _sender, /** @type {(reply: unknown) => void} */ sendResponse) => {
    if (!msg || msg.target !== Target.CONTENT) return false;
    if (msg.type === Msg.GET_DRAFT) {
      const editor = editorInfo().editor;
      sendResponse(ok({ text: editor ? readText(editor) : "", editorKind: editorKind(editor), siteId: siteId() }));
    } else if (msg.type === Msg.GET_REPLY) {
      sendResponse(ok(latestReply()));
    } else if (msg.type === Msg.SITE_CHECK) {
      reportCheck();
      sendResponse(ok(siteCheck()));
    } else if (msg.type === Msg.COMPOSE_INSERT) {
      composeInsert(msg.data || {}).then(
        (result) => sendResponse(ok(result)),
        (err) => sendResponse(fail(ErrorCode.INTERNAL, err?.message || String(err))),
      );
      return true;
    }
    return false;
  });
}

function main() {
  readSettings();
  listenToGuard(afterGuardBlocked);
  listenToPage();
  listenToWorker();
}

if (!(/** @type {any} */ (globalThis).__veilContentScript)) {
  /** @type {any} */ (globalThis).__veilContentScript = true;
  main();
}
