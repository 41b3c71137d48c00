// One message schema for every part of the extension: {type, target, data}.
//
// `target` says who handles it: "background" (the service worker), "offscreen"
// (the Pyodide core), or "content" (the content script of a tab). Each type has
// one documented `data` shape, listed here. Replies are {ok: true, data} or
// {ok: false, error: {code, message}}.

export const Target = Object.freeze({
  BACKGROUND: "background",
  OFFSCREEN: "offscreen",
  CONTENT: "content",
});

export const Msg = Object.freeze({
  // content -> background. data: {text, url}. reply data:
  // {action: "send" | "block" | "send-unprotected", text?, notice, receipt?}
  PROTECT: "protect",
  // offscreen -> background. data: {state: "booting"|"ready"|"error", ms?, fromSnapshot?, error?}
  CORE_STATUS: "core-status",
  // background -> offscreen. data: {op, args}. reply data: the op's JSON result.
  CORE_CALL: "core-call",
  // extension pages -> background. data: {}. reply data: the whole view model.
  GET_STATE: "get-state",
  // extension pages -> background. data: {siteId, patch: {enabled?, epsilon?, mode?, failOpen?, header?}}
  SET_SITE: "set-site",
  // extension pages -> background. data: {origin}. (permission already granted by the page)
  ADD_SITE: "add-site",
  // extension pages -> background. data: {siteId}
  REMOVE_SITE: "remove-site",
  // extension pages -> background. data: {header: string | null, coreTimeoutMs?, historyLimit?}
  SET_GLOBAL: "set-global",
  // extension pages -> background. data: {siteId, text}. reply: {text, receipt, replacements}
  PREVIEW: "preview",
  // extension pages -> background. data: {epsilon}. reply: {epsilon, keepProbability, ...}
  EXPLAIN: "explain",
  // extension pages -> background. data: {siteId: string | null} (null: every site)
  CLEAR_HISTORY: "clear-history",
  // extension pages -> background. data: {siteId}. reply data: {siteId, entries: [full entries]}
  GET_HISTORY: "get-history",
  // extension pages -> background. data: {profile, trueValues}
  ROOTGUARD_SAVE: "rootguard-save",
  // extension pages -> background. data: {confirm: true, reason}
  ROOTGUARD_RESET: "rootguard-reset",
  // popup -> content. data: {}. reply data: {text, editorKind} (the draft in the site's editor)
  GET_DRAFT: "get-draft",
});

// Types that change settings, spend budget or reveal stored originals: only
// the extension's own pages may send them.
export const PRIVILEGED = new Set([
  Msg.GET_STATE,
  Msg.SET_SITE,
  Msg.ADD_SITE,
  Msg.REMOVE_SITE,
  Msg.SET_GLOBAL,
  Msg.PREVIEW,
  Msg.EXPLAIN,
  Msg.CLEAR_HISTORY,
  Msg.GET_HISTORY,
  Msg.ROOTGUARD_SAVE,
  Msg.ROOTGUARD_RESET,
]);

export function message(type, target, data = {}) {
  return { type, target, data };
}

export function ok(data) {
  return { ok: true, data };
}

export function fail(code, messageText) {
  return { ok: false, error: { code, message: String(messageText) } };
}

/** True when `sender` is one of this extension's own pages (popup, options, offscreen). */
export function isExtensionPage(sender, extensionId, extensionOrigin) {
  if (!sender || sender.id !== extensionId) return false;
  if (sender.tab && !String(sender.url || "").startsWith(extensionOrigin)) return false;
  const origin = sender.origin || (sender.url ? new URL(sender.url).origin : "");
  return origin === extensionOrigin.replace(/\/$/, "");
}

/** Validate the envelope of an incoming message; returns an error string or null. */
export function envelopeError(msg) {
  if (!msg || typeof msg !== "object") return "a message must be an object {type, target, data}";
  if (typeof msg.type !== "string") return "message.type must be a string";
  if (typeof msg.target !== "string") return "message.target must be a string";
  if (msg.data !== undefined && (typeof msg.data !== "object" || msg.data === null)) {
    return "message.data must be an object";
  }
  return null;
}
