// The content script: catches a send (Enter, a click on the send button, a
// form submit) in the capture phase from document_start, has the prompt
// protected by the core, writes the protected text back through the editor and
// lets the site's own code send it. Fail closed: without a protected text,
// nothing is sent unless the person chose "send unprotected" for the site.

import { GENERIC_ADAPTER, customSiteId, siteForUrl } from "./sites.js";
import { editableRoot, editorKind, findEditor, readText, sameText, writeText } from "./editors.js";
import { Msg, Target, message, ok } from "./messages.js";
import { normalizeSettings } from "./settings.js";
import { ext } from "./chrome-api.js";

const NOTICE_TAG = "veil-notice";

function main() {
  const builtin = siteForUrl(location.href);
  let settings = null; // null until read; until then every send is intercepted
  let busy = false;
  let bypass = 0;
  let justWritten = null; // {editor, text, until}: our own protected text on its way out

  ext.storage.local.get("settings").then(({ settings: stored }) => {
    settings = normalizeSettings(stored);
  });
  ext.storage.onChanged((changes, area) => {
    if (area === "local" && changes.settings) settings = normalizeSettings(changes.settings.newValue);
  });

  function siteId() {
    if (builtin) return builtin.id;
    return customSiteId(location.origin);
  }

  function adapter() {
    if (builtin) return builtin;
    if (settings && !settings.custom[siteId()]) return null; // the site was removed
    return GENERIC_ADAPTER;
  }

  function siteSettings() {
    return settings ? settings.sites[siteId()] : null;
  }

  function intercepting() {
    const site = siteSettings();
    return site === null || site === undefined ? settings === null : site.enabled;
  }

  function isOurs(editor) {
    return Boolean(justWritten && justWritten.editor === editor && Date.now() < justWritten.until && sameText(readText(editor), justWritten.text));
  }

  function editorForTarget(target, ad) {
    const root = editableRoot(target);
    if (!root) return null;
    const editor = findEditor(ad, target);
    return editor && (editor === root || editor.contains(root) || root.contains(editor)) ? editor : null;
  }

  function sendButtonFor(target, ad) {
    if (!(target instanceof Element)) return null;
    for (const selector of ad.send) {
      try {
        const button = target.closest(selector);
        if (button) return button;
      } catch {
        /* a selector this browser cannot parse */
      }
    }
    return null;
  }

  function stop(event) {
    event.preventDefault();
    event.stopImmediatePropagation();
  }

  function onKeydown(event) {
    if (bypass > 0 || event.key !== "Enter") return;
    if (event.shiftKey || event.altKey || event.isComposing || event.keyCode === 229) return;
    const ad = adapter();
    if (!ad || !intercepting()) return;
    const editor = editorForTarget(event.target, ad);
    if (!editor) return;
    const text = readText(editor);
    if (!text.trim() || isOurs(editor)) return;
    stop(event);
    if (busy) return;
    const init = { key: "Enter", code: "Enter", ctrlKey: event.ctrlKey, metaKey: event.metaKey };
    protectAndSend(editor, text, { kind: "enter", target: event.target, init });
  }

  function onClick(event) {
    if (bypass > 0) return;
    const ad = adapter();
    if (!ad || !intercepting()) return;
    const button = sendButtonFor(event.target, ad);
    if (!button) return;
    const editor = findEditor(ad, null);
    if (!editor) return;
    const text = readText(editor);
    if (!text.trim() || isOurs(editor)) return;
    stop(event);
    if (busy) return;
    protectAndSend(editor, text, { kind: "click", button });
  }

  function onSubmit(event) {
    if (bypass > 0) return;
    const ad = adapter();
    if (!ad || !intercepting()) return;
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    const editor = findEditor(ad, null);
    if (!editor || !form.contains(editor)) return;
    const text = readText(editor);
    if (!text.trim() || isOurs(editor)) return;
    stop(event);
    if (busy) return;
    protectAndSend(editor, text, { kind: "submit", form, submitter: event.submitter });
  }

  function resend(trigger, editor) {
    bypass += 1;
    try {
      if (trigger.kind === "click") {
        trigger.button.click();
      } else if (trigger.kind === "submit") {
        const submitter = trigger.submitter && trigger.form.contains(trigger.submitter) ? trigger.submitter : undefined;
        trigger.form.requestSubmit(submitter);
      } else {
        const target = trigger.target?.isConnected ? trigger.target : editor;
        target.focus?.();
        const down = new KeyboardEvent("keydown", { ...trigger.init, bubbles: true, cancelable: true, composed: true });
        for (const prop of ["keyCode", "which"]) Object.defineProperty(down, prop, { get: () => 13 });
        const handled = !target.dispatchEvent(down);
        target.dispatchEvent(new KeyboardEvent("keyup", { ...trigger.init, bubbles: true, cancelable: true, composed: true }));
        if (!handled) {
          // Nobody acted on the Enter: fall back to the site's send button.
          const button = findSendButton();
          if (button) button.click();
          else editor.closest("form")?.requestSubmit();
        }
      }
    } finally {
      bypass -= 1;
    }
  }

  function findSendButton() {
    const ad = adapter();
    for (const selector of ad?.send || []) {
      let nodes;
      try {
        nodes = document.querySelectorAll(selector);
      } catch {
        continue;
      }
      for (const node of nodes) if (!node.disabled && node.getAttribute("aria-disabled") !== "true") return node;
    }
    return null;
  }

  async function askBackground(text) {
    const timeout = (settings?.coreTimeoutMs ?? 6000) + 3000;
    let timer;
    try {
      return await Promise.race([
        ext.runtime.send(message(Msg.PROTECT, Target.BACKGROUND, { text, url: location.href })),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`Veil's service worker did not answer within ${timeout} ms`)), timeout);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  async function protectAndSend(editor, original, trigger) {
    busy = true;
    notify("Veil is protecting this prompt…", "working");
    try {
      const reply = await askBackground(original);
      if (!reply?.ok) throw new Error(reply?.error?.message || "no answer from Veil's service worker");
      const result = reply.data;
      if (result.action === "block") {
        notify(result.notice, "blocked");
        return;
      }
      if (result.action === "send" && typeof result.text === "string") {
        const written = await writeText(editor, result.text);
        if (!written) {
          await writeText(editor, original);
          notify("Veil blocked this send: it could not write the protected text into this editor. Your text is back in the box and saved in Veil's history.", "blocked");
          return;
        }
        justWritten = { editor, text: readText(editor), until: Date.now() + 5000 };
        notify(result.notice, "protected");
      } else if (result.action === "send-unprotected") {
        notify(result.notice, "unprotected");
      } else {
        hideNotice();
      }
      resend(trigger, editor);
    } catch (err) {
      if (siteSettings()?.failOpen) {
        notify(`Veil could not protect this prompt (${err?.message || err}); sent UNPROTECTED as you chose for this site.`, "unprotected");
        resend(trigger, editor);
      } else {
        notify(`Veil blocked this send: ${err?.message || err}. Your text is still in the box.`, "blocked");
      }
    } finally {
      busy = false;
    }
  }

  // ------------------------------------------------------------ the notice

  let hideTimer = null;

  function noticeHost() {
    let host = document.querySelector(NOTICE_TAG);
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
        .box[data-kind="unprotected"] { border-color: #b45309; background: #fffbeb; }
        button { all: unset; cursor: pointer; padding: 0 4px; font-weight: bold; }
      </style><div class="box" role="status" aria-live="polite"><span class="text"></span><button aria-label="Dismiss">×</button></div>`;
      root.querySelector("button").addEventListener("click", hideNotice);
      (document.body || document.documentElement).appendChild(host);
    }
    return host;
  }

  function notify(text, kind) {
    const host = noticeHost();
    host.hidden = false;
    host.dataset.kind = kind;
    const box = host.shadowRoot.querySelector(".box");
    box.dataset.kind = kind;
    host.shadowRoot.querySelector(".text").textContent = text;
    clearTimeout(hideTimer);
    if (kind === "protected") hideTimer = setTimeout(hideNotice, 6000);
  }

  function hideNotice() {
    const host = document.querySelector(NOTICE_TAG);
    if (host) host.hidden = true;
  }

  // ------------------------------------------------------------ wiring

  window.addEventListener("keydown", onKeydown, true);
  window.addEventListener("click", onClick, true);
  window.addEventListener("submit", onSubmit, true);

  ext.runtime.onMessage((msg, _sender, sendResponse) => {
    if (!msg || msg.target !== Target.CONTENT) return false;
    if (msg.type === Msg.GET_DRAFT) {
      const ad = adapter();
      const editor = ad ? findEditor(ad, null) : null;
      sendResponse(ok({ text: editor ? readText(editor) : "", editorKind: editorKind(editor), siteId: siteId() }));
    }
    return false;
  });
}

if (!globalThis.__veilContentScript) {
  globalThis.__veilContentScript = true;
  main();
}
