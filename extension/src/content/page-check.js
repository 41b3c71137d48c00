// What Veil found on this page (the popup's "what Veil found", the badge's
// "on?"): the editor, the send control, the network guard.

import { ext } from "../chrome-api.js";
import { editorKind } from "../editors.js";
import { message, Msg, Target } from "../messages.js";
import { clearlyNotSend, composerControls, findSendButton } from "./composer.js";
import { editorInfo } from "./drafts.js";
import { adapter, builtin, intercepting, siteId, state } from "./state.js";

/** The site-check reply (messages.js SCHEMA[Msg.SITE_CHECK].reply). */
export function siteCheck() {
  const ad = adapter();
  const info = editorInfo();
  const byAdapter = findSendButton();
  /** @type {{foundBy: "adapter" | "composer" | null, controls: number}} */
  let send = { foundBy: null, controls: 0 };
  if (byAdapter) send = { foundBy: "adapter", controls: 1 };
  else if (info.editor) {
    const controls = composerControls(info.editor).filter((c) => !clearlyNotSend(c));
    if (controls.length) send = { foundBy: "composer", controls: controls.length };
  }
  return {
    siteId: siteId(),
    custom: !builtin,
    protected: Boolean(ad) && intercepting(),
    adapterFound: info.foundBy === "adapter",
    editor: { kind: editorKind(info.editor), foundBy: info.foundBy },
    send,
    guard: { running: state.guard.ready, blocked: state.guard.blocked },
  };
}

/** Tell the worker (for the badge) when what Veil found changed. */
export function reportCheck() {
  if (!adapter()) return;
  const check = siteCheck();
  const key = JSON.stringify([check.adapterFound, check.editor.foundBy, check.guard.running]);
  if (key === state.lastReported) return;
  state.lastReported = key;
  ext.runtime
    .send(message(Msg.PAGE_CHECK, Target.BACKGROUND, { adapterFound: check.adapterFound, editorFound: Boolean(check.editor.foundBy), guard: check.guard.running }))
    .catch(() => {});
}
