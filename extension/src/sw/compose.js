// Composing in Veil's side panel: the person writes the prompt in an extension
// page the site cannot read; the worker protects it with the site's settings
// (handlers.js's `protect`, passed in, never re-implemented) and hands ONLY the
// protected text to the tab's content script, with a one-time token for that
// exact text. The content script writes it into the site's editor and, right
// before it sends it through the site's own path, redeems the token with the
// text the editor then holds: the worker says yes once, for that tab and that
// text, and never again (so the content script does not re-protect it, and
// nothing else rides on the exemption). Fail closed: a tab without an editor,
// a site Veil does not protect, or a protection that failed writes nothing.
//
// Tokens live in chrome.storage.session (the worker may stop between issue and
// redeem) under one lock; they expire after TOKEN_TTL_MS.

import { sameText } from "../editors.js";
import { badRequest, ErrorCode } from "../errors.js";
import { message, Msg, Target } from "../messages.js";
import { siteIdFor } from "./sites.js";
import { loadSettings } from "./storage.js";

/** The manifest's shortcut (Alt+Shift+V) that opens the panel. */
export const COMPOSE_COMMAND = "open-compose-panel";
export const TOKEN_KEY = "composeTokens";
export const TOKEN_TTL_MS = 60_000;
const TOKEN_LOCK = "veil-compose-tokens";

/** 128 random bits from the CSPRNG, as hex. */
export function newToken() {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function live(tokens, now) {
  return Object.fromEntries(Object.entries(tokens || {}).filter(([, t]) => t.expires > now));
}

/** A token that lets `tabId` send exactly `text` once, within TOKEN_TTL_MS. */
export async function issueToken(ext, { tabId, text, now = Date.now() }) {
  if (!Number.isInteger(tabId)) throw new Error("a compose token needs the tab it is for");
  if (typeof text !== "string" || !text.trim()) throw new Error("a compose token needs the protected text it is for");
  return ext.withLock(TOKEN_LOCK, async () => {
    const stored = (await ext.storage.session.get(TOKEN_KEY))[TOKEN_KEY];
    const tokens = live(stored, now);
    const token = newToken();
    tokens[token] = { tabId, text, expires: now + TOKEN_TTL_MS };
    await ext.storage.session.set({ [TOKEN_KEY]: tokens });
    return token;
  });
}

/**
 * Redeem `token` for `tabId` sending `text`: {ok: true} or {ok: false, reason}.
 * The token is spent by any attempt, good or bad (one try, no guessing).
 * Rich editors may reshape whitespace as a paste does, so runs of whitespace
 * count as one space; every other character must be identical.
 */
export async function redeemToken(ext, { token, tabId, text, now = Date.now() }) {
  return ext.withLock(TOKEN_LOCK, async () => {
    const stored = (await ext.storage.session.get(TOKEN_KEY))[TOKEN_KEY];
    const tokens = live(stored, now);
    const entry = typeof token === "string" && Object.hasOwn(tokens, token) ? tokens[token] : null;
    if (entry) delete tokens[token];
    await ext.storage.session.set({ [TOKEN_KEY]: tokens });
    if (!entry) {
      const expired = typeof token === "string" && stored && Object.hasOwn(stored, token);
      return { ok: false, reason: expired ? "the token expired" : "the token is unknown or was already used" };
    }
    if (entry.tabId !== tabId) return { ok: false, reason: "the token was issued for another tab" };
    if (typeof text !== "string" || !sameText(text, entry.text, { loose: true })) {
      return { ok: false, reason: "the editor does not hold the protected text the token was issued for" };
    }
    return { ok: true };
  });
}

// ---------------------------------------------------------------- handlers

function refusal(notice) {
  return { sent: false, text: null, notice };
}

async function askTab(ext, tabId, msg) {
  try {
    return await ext.tabs.send(tabId, msg);
  } catch {
    return null;
  }
}

/**
 * The panel's "Send": {sent, text, notice, receipt?}. `protect` is handlers.js's
 * protect(ext, data, sender, options); it is called without the site's
 * "send unprotected" choice, so a failed protection never sends the original.
 */
export async function composeSend(ext, data, { protect }) {
  const tabId = data.tabId;
  if (!Number.isInteger(tabId)) throw badRequest("compose-send needs the tab id of the chat page (sidepanel.html?tab=ID)");
  const text = String(data.text ?? "");
  if (!text.trim()) throw badRequest("there is nothing to send: write your prompt in the panel first");
  let tab;
  try {
    tab = await ext.tabs.get(tabId);
  } catch {
    tab = null;
  }
  if (!tab?.url) return refusal("That tab is gone; open Veil's panel again from the chat page. Nothing was sent.");
  const settings = await loadSettings(ext);
  const siteId = siteIdFor(tab.url, settings);
  if (!siteId) return refusal("Veil does not protect this site, so it writes nothing into it. Add the site in Veil's popup first. Nothing was sent.");
  if (!settings.sites[siteId].enabled) return refusal("Veil's protection is off for this site, so the panel writes nothing into it. Turn it on in Veil's popup. Nothing was sent.");
  // Before anything is drawn: is there an editor Veil can write into?
  const check = await askTab(ext, tabId, message(Msg.SITE_CHECK, Target.CONTENT, {}));
  if (!check?.ok) return refusal("Veil is not running in that tab yet: reload the page. Nothing was sent.");
  if (!check.data.protected) return refusal("Veil's protection is not on in that tab, so the panel writes nothing into it. Nothing was sent.");
  if (!check.data.editor.foundBy) return refusal("Veil found no chat box on that page to write into (click into it once, then send again). Nothing was sent.");
  const draft = await askTab(ext, tabId, message(Msg.GET_DRAFT, Target.CONTENT, {}));
  if (!draft?.ok) return refusal("Veil could not read the chat box of that page. Nothing was sent.");
  if (draft.data.text.trim()) {
    return refusal("The site's chat box holds text typed there; send or clear it first (Veil protects it when it is sent). Veil wrote nothing into the page.");
  }

  const result = await protect(ext, { text, url: tab.url }, { url: tab.url, tab }, { failOpen: false });
  if (result.action !== "send" || !result.protected || typeof result.text !== "string") {
    return refusal(result.notice ? `${result.notice.replace(/ Your text is still in the box[^.]*\./, "")} Nothing was written into the page.` : "Veil could not protect this prompt. Nothing was written into the page.");
  }
  const token = await issueToken(ext, { tabId, text: result.text });
  const reply = await askTab(ext, tabId, message(Msg.COMPOSE_INSERT, Target.CONTENT, { text: result.text, token, historyId: result.historyId }));
  if (!reply?.ok) {
    await redeemToken(ext, { token, tabId, text: null }); // spend it: nobody may use it later
    return refusal(`The page did not take the protected text (${reply?.error?.message || "no answer from Veil's content script"}). Nothing was sent.`);
  }
  const { sent, notice } = reply.data;
  return { sent: Boolean(sent), text: result.text, notice, ...(result.receipt ? { receipt: result.receipt } : {}) };
}

/** The content script redeems its token right before it sends: {} or a refusal. */
export async function composeRedeem(ext, data, sender) {
  const outcome = await redeemToken(ext, { token: data.token, tabId: sender.tab?.id, text: data.text });
  if (!outcome.ok) {
    /** @type {Error & {code?: string}} */
    const err = new Error(`Veil refused to send this text: ${outcome.reason}`);
    err.code = ErrorCode.FORBIDDEN;
    throw err;
  }
  return {};
}

/**
 * Open Veil's panel on the sender's tab (the notice's button). Chrome opens a
 * side panel only inside a user gesture, and a click in the page does not
 * carry one through the message; then the same page opens in a small window
 * of its own -- an extension page too, which the site cannot read.
 * {where: "side-panel" | "window"}.
 */
export async function openPanel(ext, _data, sender) {
  const tabId = sender.tab?.id;
  if (!Number.isInteger(tabId)) throw badRequest("open-panel comes from a tab");
  try {
    await ext.sidePanel.openFor(tabId);
    return { where: "side-panel" };
  } catch {
    await ext.windows.openPopup(`sidepanel.html?tab=${tabId}`, { width: 440, height: 720 });
    return { where: "window" };
  }
}
