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

/* global __VEIL_TEST_SWITCHES__ */

import { GENERIC_ADAPTER, customSiteId, siteForUrl } from "./sites.js";
import { editableRoot, editorKind, findFirst, readText, sameText, writeText } from "./editors.js";
import { ErrorCode } from "./errors.js";
import { Msg, Target, fail, message, ok } from "./messages.js";
import { normalizeSettings } from "./settings.js";
import { ext } from "./chrome-api.js";

const NOTICE_TAG = "veil-notice";
const OFF_TAG = "veil-off";
const TO_GUARD = "veil:to-guard";
const FROM_GUARD = "veil:from-guard";

// What counts as a control in a composer region (besides anything drawn with
// a pointer cursor).
const CLICKABLE =
  "button, [role=button], input[type=submit], input[type=button], input[type=image], a[href], [onclick], [tabindex]:not([tabindex='-1'])";
const NOT_SEND_ROLE =
  "input[type=file], select, input[type=checkbox], input[type=radio], input[type=text], [role=menuitem], [role=tab], [role=checkbox], [role=switch], [role=option], [role=combobox], [aria-haspopup]:not([aria-haspopup=false]), [aria-expanded]";
// Any editor, for a page whose adapter finds none (only to show where it is).
const ANY_EDITOR = ["textarea", "[contenteditable=true]", "[contenteditable=plaintext-only]", "[contenteditable='']"];
const SEND_WORDS = /\b(send|submit|ask|go)\b/i;
const NOT_SEND_WORDS =
  /attach|upload|file|image|photo|camera|voice|micro|dictat|record|audio|model|menu|more|option|setting|emoji|tool|search|think|reason|style|\b(add|plus|mic|mode|web|close|cancel|stop|copy|share)\b/i;

/** A control a person would not call "send" (attach, voice, a picker). */
function clearlyNotSend(control) {
  if (control.matches(NOT_SEND_ROLE) || control.querySelector("input[type=file]")) return true;
  const text = (control.textContent || "").trim();
  const label = ["aria-label", "title", "data-testid", "name", "id"].map((a) => control.getAttribute(a) || "").join(" ") + " " + (text.length <= 40 ? text : "");
  if (SEND_WORDS.test(label)) return false;
  return NOT_SEND_WORDS.test(label);
}

function main() {
  const builtin = siteForUrl(location.href);
  let settings = null; // null until read; until then every send is intercepted
  let switches = {}; // the e2e tests' switches (test builds only)
  let busy = false;
  let bypass = 0;
  let gesture = null; // an intercepted click whose events are still arriving
  let lastEditor = null; // the editable root the person last used
  const written = new WeakMap(); // editor -> the protected text Veil wrote into it
  const enterIsNewline = new WeakSet(); // editors where a plain Enter turned out to be a line break
  const learned = new WeakSet(); // controls that took the text out of the editor
  let guard = { ready: false, active: false, blocked: 0, checked: 0 };
  let lastReported = "";

  ext.storage.local.get(__VEIL_TEST_SWITCHES__ ? ["settings", "veilTestSwitches"] : "settings").then((stored) => {
    settings = normalizeSettings(stored.settings);
    if (__VEIL_TEST_SWITCHES__) switches = stored.veilTestSwitches || {};
    tellGuardState();
    renderOff();
  });
  ext.storage.onChanged((changes, area) => {
    if (area !== "local") return;
    if (changes.settings) settings = normalizeSettings(changes.settings.newValue);
    if (__VEIL_TEST_SWITCHES__ && changes.veilTestSwitches) switches = changes.veilTestSwitches.newValue || {};
    tellGuardState();
    renderOff();
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

  /** The DOM interception (the test build can turn it off to test the network guard alone). */
  function domInterception() {
    return !(__VEIL_TEST_SWITCHES__ && switches.domInterception === false);
  }

  // ------------------------------------------------------------ the guard

  function toGuard(data) {
    document.dispatchEvent(new CustomEvent(TO_GUARD, { detail: JSON.stringify(data) }));
  }

  function tellGuardState() {
    // (The benchmark's switch runs without the guard, to measure what it adds.)
    const guardOff = __VEIL_TEST_SWITCHES__ && switches.guard === false;
    toGuard({ type: "state", protected: Boolean(adapter()) && intercepting() && !guardOff });
  }

  function approve(text, original) {
    toGuard({ type: "approve", text, original: original ?? null });
  }

  document.addEventListener(FROM_GUARD, (event) => {
    let msg;
    try {
      msg = JSON.parse(event.detail);
    } catch {
      return;
    }
    if (msg.type === "ready") {
      guard.ready = true;
      if (settings) tellGuardState();
      else toGuard({ type: "hello" });
    } else if (msg.type === "status") {
      guard = { ready: true, active: msg.active, blocked: msg.blocked, checked: msg.checked };
    } else if (msg.type === "blocked") {
      guard.ready = true;
      guard.blocked += 1;
      // Let the site's handler finish (it may clear the box after sending).
      setTimeout(() => afterGuardBlocked(msg), 0);
    }
  });
  toGuard({ type: "hello" });

  // ------------------------------------------------------------ editors

  function isOurs(editor, text) {
    const mine = written.get(editor);
    return mine !== undefined && sameText(text, mine, { loose: true });
  }

  function unprotectedText(editor) {
    if (!editor?.isConnected) return null;
    const text = readText(editor);
    return text.trim() && !isOurs(editor, text) ? text : null;
  }

  /** {editor, foundBy}: the adapter's selectors, else the editor last typed into, else the focused one. */
  function editorInfo() {
    const ad = adapter();
    const byAdapter = ad ? findFirst(document, ad.editor) : null;
    if (byAdapter) return { editor: editableRoot(byAdapter) || byAdapter, foundBy: "adapter" };
    if (lastEditor?.isConnected) return { editor: lastEditor, foundBy: "typing" };
    const focused = editableRoot(document.activeElement);
    if (focused) return { editor: focused, foundBy: "focus" };
    const onPage = findFirst(document, ANY_EDITOR);
    if (onPage) return { editor: editableRoot(onPage) || onPage, foundBy: "page" };
    return { editor: null, foundBy: null };
  }

  function candidateEditors() {
    const list = [];
    const add = (e) => e && e.isConnected && !list.includes(e) && list.push(e);
    add(editorInfo().editor);
    add(lastEditor);
    add(editableRoot(document.activeElement));
    return list;
  }

  const noteEditor = (event) => {
    const root = editableRoot(event.composedPath?.()[0] ?? event.target);
    if (root && root !== lastEditor) {
      lastEditor = root;
      reportCheck();
    }
    if (root && !intercepting()) renderOff();
  };

  /** The controls next to the editor (for the popup): those of the nearest ancestor (6 levels up) that has any. */
  function composerControls(editor) {
    const form = editor.closest("form");
    let node = form || editor.parentElement;
    for (let depth = 0; node && node !== document.body && node !== document.documentElement && depth < 6; depth++) {
      const found = [];
      for (const c of node.querySelectorAll("*")) {
        if (found.length >= 50) break;
        if (c === editor || editor.contains(c) || c.contains(editor)) continue;
        if (looksClickable(c) && !found.some((f) => f.contains(c))) found.push(c);
      }
      if (found.length || form) return found;
      node = node.parentElement || node.getRootNode()?.host || null;
    }
    return [];
  }

  /**
   * The composer region an activation at `path` shares with `editor`: the
   * editor's form, or the nearest ancestor of the editor (up to 6 levels) that
   * also holds the clicked element -- no selector involved.
   */
  function composerOf(editor, path) {
    const form = editor.closest("form");
    if (form && path.includes(form)) return form;
    let node = editor.parentElement || editor.getRootNode()?.host || null;
    for (let depth = 0; node && depth < 6; depth++) {
      if (node === document.body || node === document.documentElement) return null;
      if (path.includes(node)) return node;
      node = node.parentElement || node.getRootNode()?.host || null;
    }
    return null;
  }

  function looksClickable(el) {
    if (el.matches(CLICKABLE)) return true;
    try {
      return getComputedStyle(el).cursor === "pointer";
    } catch {
      return false;
    }
  }

  /** The innermost control on the event's path inside `region`, outside the editor. */
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

  /** {editor, text, control, how} when the event's path is an activation that could send an unprotected draft. */
  function sendActivation(path) {
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

  function stop(event) {
    event.preventDefault();
    event.stopImmediatePropagation();
  }

  /** After a control Veil let pass: did the text leave the editor? Then that control sends. */
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

  // ------------------------------------------------------------ catching sends

  const GESTURE_REST = new Set(["mousedown", "pointerup", "mouseup", "click"]);

  function onPointer(event) {
    if (bypass > 0) return;
    if (gesture && !gesture.ended && GESTURE_REST.has(event.type)) {
      // The rest of a click Veil is holding: the site sees it when Veil replays it.
      stop(event);
      if (event.type === "click") gesture.end();
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
    if (busy) return;
    gesture = startGesture(event, path[0], hit.control);
    protectAndSend(hit.editor, hit.text, { kind: "pointer", gesture });
  }

  function startGesture(event, target, control) {
    let done;
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

  function onKeydown(event) {
    if (bypass > 0 || !domInterception()) return;
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
    if (busy) return;
    const init = { key: "Enter", code: "Enter", ctrlKey: event.ctrlKey, metaKey: event.metaKey };
    const caret = editor instanceof HTMLTextAreaElement ? [editor.selectionStart, editor.selectionEnd] : null;
    protectAndSend(editor, text, { kind: "enter", target, init, plain, caret });
  }

  /** Enter or Space on a focused control of the composer that is not a native button (those click). */
  function onControlKey(event, path) {
    if (event.key !== "Enter" && event.key !== " ") return;
    if (event.shiftKey || event.altKey || event.ctrlKey || event.metaKey) return;
    const hit = sendActivation(path);
    if (!hit || hit.how === "not-send" || !intercepting()) return;
    if (hit.control.matches("button, input")) return; // its click comes next and is caught there
    stop(event);
    if (busy) return;
    const init = { key: event.key, code: event.code, keyCode: event.keyCode };
    protectAndSend(hit.editor, hit.text, { kind: "key", control: hit.control, init });
  }

  function onSubmit(event) {
    if (bypass > 0 || !domInterception()) return;
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !adapter()) return;
    const inForm = [...candidateEditors(), ...form.querySelectorAll("textarea, [contenteditable=true], [contenteditable=plaintext-only]")];
    const editor = inForm.find((e) => form.contains(e) && unprotectedText(editableRoot(e) || e));
    if (!editor) return;
    const root = editableRoot(editor) || editor;
    const text = unprotectedText(root);
    if (!intercepting()) {
      watchLeaves(root, text, "off");
      return;
    }
    stop(event);
    if (busy) return;
    protectAndSend(root, text, { kind: "submit", form, submitter: event.submitter });
  }

  // ------------------------------------------------------------ replaying the send

  function dispatchClick(g) {
    let target = g.target?.isConnected ? g.target : g.control?.isConnected ? g.control : null;
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

  function keyEvent(type, init) {
    const event = new KeyboardEvent(type, { ...init, bubbles: true, cancelable: true, composed: true });
    const code = init.keyCode ?? (init.key === "Enter" ? 13 : 32);
    for (const prop of ["keyCode", "which"]) Object.defineProperty(event, prop, { get: () => code });
    return event;
  }

  async function resend(trigger, editor, original) {
    if (trigger.kind === "pointer") await trigger.gesture.over;
    bypass += 1;
    try {
      if (trigger.kind === "pointer") {
        dispatchClick(trigger.gesture);
      } else if (trigger.kind === "key") {
        const handled = !trigger.control.dispatchEvent(keyEvent("keydown", trigger.init));
        trigger.control.dispatchEvent(keyEvent("keyup", trigger.init));
        if (!handled) trigger.control.click();
      } else if (trigger.kind === "submit") {
        const submitter = trigger.submitter && trigger.form.contains(trigger.submitter) ? trigger.submitter : undefined;
        trigger.form.requestSubmit(submitter);
      } else {
        const target = trigger.target?.isConnected ? trigger.target : editor;
        target.focus?.();
        const handled = !target.dispatchEvent(keyEvent("keydown", trigger.init));
        target.dispatchEvent(keyEvent("keyup", trigger.init));
        if (!handled) await enterNotHandled(trigger, editor, original);
      }
    } finally {
      bypass -= 1;
    }
  }

  /** Nobody acted on the replayed Enter. */
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
    if (trigger.plain && trigger.caret) editor.setSelectionRange?.(trigger.caret[0] + 1, trigger.caret[0] + 1);
    notify(trigger.plain ? "Enter makes a new line on this page; Veil sent nothing. Your text is as you typed it." : "Nothing on this page sends on this key; Veil sent nothing. Your text is as you typed it.", "protected");
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

  /**
   * Protect `original` and write it into `editor`: {outcome: "protected" |
   * "unprotected" | "off" | "blocked", notice}. Nothing is sent here.
   */
  async function protectInto(editor, original) {
    try {
      const reply = await askBackground(original);
      if (!reply?.ok) throw new Error(reply?.error?.message || "no answer from Veil's service worker");
      const result = reply.data;
      if (result.action === "block") return { outcome: "blocked", notice: result.notice };
      if (result.action === "send" && typeof result.text === "string") {
        approve(result.text, original);
        const ok = await writeText(editor, result.text);
        if (!ok) {
          await writeText(editor, original);
          return { outcome: "blocked", notice: "Veil blocked this send: it could not write the protected text into this editor. Your text is back in the box and saved in Veil's history." };
        }
        const now = readText(editor);
        written.set(editor, now);
        if (now !== result.text) approve(now, original);
        return { outcome: "protected", notice: result.notice };
      }
      if (result.action === "send-unprotected") {
        approve(original); // the person chose this for the site: the one way an original leaves
        return { outcome: "unprotected", notice: result.notice };
      }
      approve(original); // protection is off for the site
      return { outcome: "off", notice: null };
    } catch (err) {
      if (siteSettings()?.failOpen) {
        approve(original);
        return { outcome: "unprotected", notice: `Veil could not protect this prompt (${err?.message || err}); sent UNPROTECTED as you chose for this site.` };
      }
      return { outcome: "blocked", notice: `Veil blocked this send: ${err?.message || err}. Your text is still in the box.` };
    }
  }

  async function protectAndSend(editor, original, trigger) {
    busy = true;
    notify("Veil is protecting this prompt…", "working");
    try {
      const { outcome, notice } = await protectInto(editor, original);
      if (outcome === "blocked") {
        notify(notice, "blocked");
        return;
      }
      if (outcome === "protected") notify(notice, "protected");
      else if (outcome === "unprotected") notify(notice, "unprotected");
      else notify("Sent as typed: Veil's protection is off for this site.", "off");
      await resend(trigger, editor, original);
    } finally {
      busy = false;
      if (gesture === trigger.gesture) gesture = null;
    }
  }

  // ------------------------------------------------------------ a prompt written in Veil's side panel

  /**
   * The side panel's send (sw/compose.js): `text` is already protected -- the
   * original never reaches this page -- and `token` is the worker's one-time
   * permission for exactly that text in this tab. Write it into the site's
   * editor, redeem the token with what the editor then holds, and send it
   * through the site's own path without protecting it again. Anything else
   * (text the person typed here, text the page changed) gets no exemption: the
   * token is spent and nothing is sent. {sent, notice}.
   */
  async function composeInsert({ text, token }) {
    const refuse = (notice) => ({ sent: false, notice });
    if (typeof text !== "string" || !text.trim() || typeof token !== "string") return refuse("Veil's panel sent nothing to write. Nothing was sent.");
    if (!adapter() || !intercepting()) return refuse("Veil's protection is off on this page, so the panel wrote nothing into it. Nothing was sent.");
    if (busy) return refuse("Veil is still protecting another send on this page; nothing was written. Send again in a moment.");
    const { editor } = editorInfo();
    if (!editor) return refuse("Veil found no chat box on this page, so it wrote nothing. Nothing was sent.");
    const before = readText(editor);
    if (before.trim() && !isOurs(editor, before)) {
      return refuse("The site's chat box holds text typed there; send or clear it first. Veil wrote nothing into the page.");
    }
    busy = true;
    try {
      approve(text, null); // the network guard lets the protected text through
      const wrote = await writeText(editor, text);
      if (!wrote) {
        await writeText(editor, "");
        return refuse("Veil could not write the protected text into this chat box. Nothing was sent.");
      }
      written.set(editor, readText(editor)); // Veil's own text: a later send does not protect it again
      const holding = readText(editor);
      let redeemed;
      try {
        redeemed = await ext.runtime.send(message(Msg.COMPOSE_REDEEM, Target.BACKGROUND, { token, text: holding }));
      } catch (err) {
        redeemed = { ok: false, error: { message: `Veil's service worker did not answer (${err?.message || err})` } };
      }
      // The page may have changed the box while the worker answered: only the text redeemed goes.
      if (!redeemed?.ok || !sameText(readText(editor), holding, { loose: true })) {
        written.delete(editor);
        await writeText(editor, "");
        const why = redeemed?.ok ? "the chat box changed before the send" : redeemed?.error?.message || "the token was refused";
        notify(`Veil did not send the panel's prompt: ${why}. Nothing was sent.`, "blocked");
        return refuse(`Veil did not send: ${why}. Nothing was sent.`);
      }
      const how = sendThroughSite(editor);
      if (how && (await textLeaves(editor, holding))) {
        const notice = "Veil sent the prompt you wrote in its panel: this page saw only the protected text.";
        notify(notice, "protected");
        return { sent: true, notice };
      }
      const notice = "Veil wrote the protected text into the chat box, but the site did not send it: press its send button (the text is already protected).";
      notify(notice, "protected");
      return refuse(notice);
    } finally {
      busy = false;
    }
  }

  /** Trigger the site's own send for the text in `editor`: its send button, Enter, its form, a composer control. */
  function sendThroughSite(editor) {
    bypass += 1;
    try {
      const button = findSendButton();
      if (button) {
        button.click();
        return "button";
      }
      editor.focus?.();
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
        control.click();
        return "composer";
      }
      return null;
    } finally {
      bypass -= 1;
    }
  }

  /** Resolves true once `text` has left `editor` (the site took it), false after 2 s. */
  async function textLeaves(editor, text) {
    for (let waited = 0; waited <= 2000; waited += 50) {
      const now = editor.isConnected ? readText(editor) : "";
      if (!sameText(now, text, { loose: true })) return true;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return false;
  }

  // ------------------------------------------------------------ after the guard refused a request

  let recovering = false;
  let lastActivation = 0; // when the person last pressed Enter or clicked a control (a send is near)
  const noteActivation = (event) => {
    if (event.type === "keydown") {
      if (event.key === "Enter" && !event.shiftKey && !event.altKey) lastActivation = Date.now();
    } else if (!editableRoot(event.composedPath?.()[0] ?? event.target)) {
      lastActivation = Date.now(); // a click outside the editor (inside it is editing)
    }
  };

  async function afterGuardBlocked(info) {
    const what = info.api === "form" ? "a form submission" : `a ${info.api} request`;
    const where = info.host ? ` to ${info.host}` : "";
    const why = info.reason === "draft" ? "it carried your prompt unprotected" : `it was ${info.reason}, which Veil cannot check, while your prompt is unprotected`;
    if (recovering || busy) return;
    const editor = candidateEditors().find((e) => e.isConnected) || null;
    const inBox = editor ? readText(editor) : "";
    const draft = typeof info.draft === "string" ? info.draft : "";
    const stillInBox = inBox.trim() && sameText(inBox, draft, { loose: true });
    const justActivated = Date.now() - lastActivation < 3000;
    if (!editor || !draft || (inBox.trim() && !(stillInBox && justActivated))) {
      notify(`Veil stopped ${what}${where}: ${why}. Nothing was sent.${inBox.trim() ? " Your text is still in the box." : ""}`, "blocked");
      return;
    }
    // The person just sent (the site took the text out of the box, or left it
    // there when its request failed): put it back, protected.
    recovering = true;
    notify("Veil is protecting this prompt…", "working");
    try {
      const { outcome, notice } = await protectInto(editor, draft);
      if (outcome === "protected") {
        notify(`Veil stopped ${what}${where}: ${why}. It has protected your prompt and put it back in the box: send it again. (${notice})`, "blocked");
      } else if (outcome === "blocked") {
        await writeText(editor, draft);
        notify(`Veil stopped ${what}${where}: ${why}. ${notice}`, "blocked");
      } else {
        await writeText(editor, draft);
        notify(`Veil stopped ${what}${where}: ${why}. ${notice || "Protection is off for this site now"}: send it again to send it as typed.`, "unprotected");
      }
    } finally {
      recovering = false;
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
        .box[data-kind="unprotected"], .box[data-kind="off"] { border-color: #b45309; background: #fffbeb; }
        button { all: unset; cursor: pointer; padding: 0 4px; font-weight: bold; }
        button.panel { font-weight: normal; text-decoration: underline; white-space: nowrap; }
        .box[data-kind="working"] button.panel { display: none; }
      </style><div class="box" role="status" aria-live="polite"><span class="text"></span>` +
        `<button class="panel" title="Write your next prompt in Veil's side panel: this page then sees only the protected text">Write in Veil's panel</button>` +
        `<button class="close" aria-label="Dismiss">×</button></div>`;
      root.querySelector("button.close").addEventListener("click", hideNotice);
      root.querySelector("button.panel").addEventListener("click", openPanel);
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
    if (kind === "protected" || kind === "off") hideTimer = setTimeout(hideNotice, 6000);
  }

  /** The notice's button: the worker opens Veil's side panel on this tab (inside this click's gesture). */
  function openPanel() {
    ext.runtime.send(message(Msg.OPEN_PANEL, Target.BACKGROUND, {})).then(
      (reply) => {
        if (!reply?.ok) notify(`Veil could not open its panel here (${reply?.error?.message || "no answer"}): press Alt+Shift+V, or use the button in Veil's popup.`, "off");
      },
      () => notify("Veil could not open its panel here: press Alt+Shift+V, or use the button in Veil's popup.", "off"),
    );
  }

  function hideNotice() {
    const host = document.querySelector(NOTICE_TAG);
    if (host) host.hidden = true;
  }

  // ------------------------------------------------------------ "protection is off", near the editor

  let offFrame = 0;

  function renderOff() {
    cancelAnimationFrame(offFrame);
    offFrame = requestAnimationFrame(placeOff);
  }

  function placeOff() {
    let host = document.querySelector(OFF_TAG);
    const off = settings !== null && Boolean(adapter()) && !intercepting();
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

  // ------------------------------------------------------------ what Veil found on this page

  function siteCheck() {
    const ad = adapter();
    const info = editorInfo();
    const byAdapter = findSendButton();
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
      guard: { running: guard.ready, blocked: guard.blocked },
    };
  }

  function reportCheck() {
    if (!adapter()) return;
    const check = siteCheck();
    const key = JSON.stringify([check.adapterFound, check.editor.foundBy, check.guard.running]);
    if (key === lastReported) return;
    lastReported = key;
    ext.runtime
      .send(message(Msg.PAGE_CHECK, Target.BACKGROUND, { adapterFound: check.adapterFound, editorFound: Boolean(check.editor.foundBy), guard: check.guard.running }))
      .catch(() => {});
  }

  // ------------------------------------------------------------ wiring

  for (const type of ["keydown", "pointerdown", "click"]) window.addEventListener(type, noteActivation, true);
  for (const type of ["pointerdown", "mousedown", "pointerup", "mouseup", "click"]) window.addEventListener(type, onPointer, true);
  window.addEventListener("keydown", onKeydown, true);
  window.addEventListener("submit", onSubmit, true);
  window.addEventListener("focusin", noteEditor, true);
  window.addEventListener("input", noteEditor, true);
  window.addEventListener("scroll", () => settings && !intercepting() && renderOff(), true);
  window.addEventListener("resize", () => settings && !intercepting() && renderOff());
  window.addEventListener("load", () => {
    reportCheck();
    renderOff();
  });

  ext.runtime.onMessage((msg, _sender, sendResponse) => {
    if (!msg || msg.target !== Target.CONTENT) return false;
    if (msg.type === Msg.GET_DRAFT) {
      const editor = editorInfo().editor;
      sendResponse(ok({ text: editor ? readText(editor) : "", editorKind: editorKind(editor), siteId: siteId() }));
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

if (!globalThis.__veilContentScript) {
  globalThis.__veilContentScript = true;
  main();
}
