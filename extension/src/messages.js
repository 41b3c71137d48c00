// One message schema for every part of the extension: {type, target, data}.
//
// `target` says who handles it: "background" (the service worker), "offscreen"
// (the Pyodide core), or "content" (the content script of a tab). SCHEMA below
// lists, for each type, who sends it, its `data` keys and its reply's `data`
// keys (a key ending in "?" may be left out); extension/test/messages.test.mjs
// checks that every message sent in src/ and every reply of the worker's
// handlers has exactly these keys. Replies are {ok: true, data} or
// {ok: false, error: {code, message}}, with a code from errors.js.

export const Target = Object.freeze({
  BACKGROUND: "background",
  OFFSCREEN: "offscreen",
  CONTENT: "content",
});

export const Msg = Object.freeze({
  PROTECT: "protect",
  CORE_STATUS: "core-status",
  CORE_CALL: "core-call",
  GET_STATE: "get-state",
  SET_SITE: "set-site",
  ADD_SITE: "add-site",
  REMOVE_SITE: "remove-site",
  SET_GLOBAL: "set-global",
  PREVIEW: "preview",
  EXPLAIN: "explain",
  CLEAR_HISTORY: "clear-history",
  GET_HISTORY: "get-history",
  ROOTGUARD_SAVE: "rootguard-save",
  ROOTGUARD_RESET: "rootguard-reset",
  ROOTGUARD_EXPORT: "rootguard-export",
  ROOTGUARD_IMPORT: "rootguard-import",
  ROOTGUARD_ADD: "rootguard-add",
  GET_DRAFT: "get-draft",
  SITE_CHECK: "site-check",
  PAGE_CHECK: "page-check",
  MEMO_STATE: "memo-state",
  MEMO_RESET: "memo-reset",
  LEDGER_STATE: "ledger-state",
  COMPOSE_SEND: "compose-send",
  COMPOSE_INSERT: "compose-insert",
  COMPOSE_REDEEM: "compose-redeem",
  OPEN_PANEL: "open-panel",
  GET_REPLY: "get-reply",
  RESTORE_REPLY: "restore-reply",
  WITHDRAW: "withdraw",
  SAVE_REPLY: "save-reply",
});

// Senders: "content" (the content script), "offscreen" (the offscreen page),
// "background" (the worker), "pages" (the popup and the options page).
const SETTINGS = "the whole settings object (settings.js)";

export const SCHEMA = Object.freeze({
  [Msg.PROTECT]: {
    from: ["content"],
    target: Target.BACKGROUND,
    data: { text: "the prompt as typed", url: "the page's URL (the worker uses sender.url)" },
    reply: {
      action: '"send" | "block" | "send-unprotected"',
      text: "the text to send, or null (send what is in the editor)",
      notice: "what the page's notice says, or null",
      protected: "true when `text` is the protected prompt",
      "receipt?": "the k-RR receipt (null in numbers mode); only when protected",
      "historyId?": "the history entry of this send; only when protected (withdraw names it)",
    },
  },
  // The replayed Enter made a new line: the protected text never left. The
  // entry says "withdrawn" and its words stop counting as sent to the site.
  [Msg.WITHDRAW]: {
    from: ["content"],
    target: Target.BACKGROUND,
    data: { historyId: "the protect reply's historyId" },
    reply: { withdrawn: "true when the entry was a protected send of this site and is now withdrawn", words: "words no longer counted as sent to the site" },
  },
  // The site's reply to a protected send, as the page shows it (the options
  // page's history restores it in the person's words; the page gets nothing).
  [Msg.SAVE_REPLY]: {
    from: ["content"],
    target: Target.BACKGROUND,
    data: { historyId: "the protect (or compose-insert) historyId", text: "the reply's text as the page shows it" },
    reply: { saved: "true when kept with that entry (a protected send of this site, in the last 10 minutes)" },
  },
  [Msg.CORE_STATUS]: {
    from: ["offscreen"],
    target: Target.BACKGROUND,
    data: {
      state: '"booting" | "ready" | "error"',
      "step?": "while booting: what the core is doing (the popup shows it)",
      "ms?": "boot time",
      "readyAt?": "epoch ms",
      "documentStartedAt?": "epoch ms",
      "fromSnapshot?": "restored from the memory snapshot",
      "python?": "Python's version",
      "rootguard?": "RootGuard is available",
      "snapshot?": "what became of the snapshot",
      "snapshotProblem?": "why a snapshot did not restore",
      "phases?": "ms per boot phase",
      "error?": "why the core failed",
      "worker?": "true: the core runs in the offscreen page's module worker (core-worker.js)",
      "msSinceDocument?": "when ready: ms from the offscreen document's start",
    },
    reply: {},
  },
  [Msg.CORE_CALL]: {
    from: ["background"],
    target: Target.OFFSCREEN,
    data: { op: "a name from core-ops.js", args: "the op's arguments" },
    // The op's JSON result is the reply's data; the envelope also has `ms`
    // (time inside Python), on success and failure.
    reply: null,
  },
  [Msg.GET_STATE]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { "url?": "the popup's tab URL, for `current`", "withRootguard?": "the options page: add RootGuard's view and the default header" },
    reply: {
      settings: SETTINGS,
      coreStatus: "the last core-status, or {state: \"unknown\"}",
      history: "{siteId: history index}",
      sites: "[{id, name, hosts, custom, origin?}]",
      current: "{url, siteId, origin} for data.url, or null",
      "rootguard?": "{profile, trueValues, hasState, noisy, ledger, describe, spent, drifts, events, defaultProfile, error} (withRootguard)",
      defaultHeader: "py_core's default header (withRootguard), else null",
      genericAdapter: "the editor adapter of sites people add",
    },
  },
  [Msg.SET_SITE]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { siteId: "a site id", patch: "{enabled?, epsilon?, mode?, failOpen?, header?}" },
    reply: { settings: SETTINGS },
  },
  [Msg.ADD_SITE]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { origin: "the origin (permission already granted by the page)", "tabId?": "a tab to inject the content script into now" },
    reply: { siteId: "the new site's id", settings: SETTINGS },
  },
  [Msg.REMOVE_SITE]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { siteId: "an added site's id (custom:...)" },
    reply: { settings: SETTINGS },
  },
  [Msg.SET_GLOBAL]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { "header?": "text | null (py_core's default)", "coreTimeoutMs?": "500..60000", "historyLimit?": "1..10000" },
    reply: { settings: SETTINGS },
  },
  [Msg.PREVIEW]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: {
      siteId: "a site id (its ε, mode and header are used)",
      text: "the text to preview",
      "sample?": "true for Veil's sample text: drawn afresh, not kept in the word memo",
    },
    reply: {
      text: "what would be sent",
      perturbed: "the perturbed part",
      receipt: "the k-RR receipt with words, or null (numbers mode)",
      replacements: "RootGuard's replacements",
      words: "the per-word forecast, or null (numbers mode)",
    },
  },
  [Msg.EXPLAIN]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { epsilon: "ε per character" },
    reply: {
      epsilonRequested: "ε as asked",
      epsilonPerChar: "ε as implemented",
      keepProbability: "p, a character's chance to be kept",
      changedShare: "1 - p",
      nameIntact6: "p^6",
      k: "the alphabet's size",
    },
  },
  [Msg.CLEAR_HISTORY]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { siteId: "a site id, or null for every site" },
    reply: { cleared: "the site ids cleared" },
  },
  [Msg.GET_HISTORY]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { siteId: "a site id" },
    reply: { siteId: "the site id", entries: "the full entries, oldest first" },
  },
  [Msg.ROOTGUARD_SAVE]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { profile: "a RootGuard profile", trueValues: "{root: number}" },
    reply: { state: "RootGuard's state", noisy: "the cached noisy values", ledger: "its ledger", describe: "the profile described" },
  },
  [Msg.ROOTGUARD_RESET]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { confirm: "must be true", reason: "recorded in the events", "trueValues?": "new true values (before a first draw)" },
    reply: { state: "RootGuard's state", noisy: "the cached noisy values", ledger: "its ledger", describe: "the profile described" },
  },
  [Msg.ROOTGUARD_EXPORT]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: {},
    reply: { record: "the stored record with its format tag (what 'veil rootguard import' reads)" },
  },
  [Msg.ROOTGUARD_IMPORT]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { record: "a record exported by the options page or 'veil rootguard export'" },
    reply: { relation: "new, same or extends (a conflict is refused)", state: "RootGuard's state", noisy: "the cached noisy values", ledger: "its ledger", describe: "the profile described" },
  },
  [Msg.ROOTGUARD_ADD]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { values: "{root: number}: values to store now; only these are drawn (or take the draw of the same value written in a prompt)" },
    reply: {
      state: "RootGuard's state",
      noisy: "the cached noisy values",
      ledger: "its ledger",
      describe: "the profile described",
      trueValues: "the stored true values, in the profile's order",
      added: "roots that had no value",
      updated: "roots whose stored value changed",
      adopted: "of those, the ones that took an earlier draw of the same value (nothing spent)",
    },
  },
  [Msg.MEMO_STATE]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: {},
    reply: {
      words: "distinct words in the memo",
      variants: "stored draws (a word has one per setting it was drawn at)",
      unsent: "draws shown in a preview and not sent yet",
      entries: "the newest draws: {word, sent, epsilon, alphabets, sites, ts}",
      events: "every reset, with its reason",
      ledger: "the lifetime ledger's figures: {total, sites: {siteId: ...}} (py_core.memo.ledger_summary)",
    },
  },
  [Msg.MEMO_RESET]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { confirm: "must be true", "reason?": "why (kept in the log)" },
    reply: { forgotten: "words forgotten", events: "the reset log" },
  },
  [Msg.LEDGER_STATE]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { siteId: "a site id" },
    reply: {
      total: "the lifetime ledger over all sites (py_core.memo.ledger_summary)",
      site: "the same for this site",
    },
  },
  [Msg.GET_DRAFT]: {
    from: ["pages", "background"],
    target: Target.CONTENT,
    data: {},
    reply: { text: "the draft in the site's editor", editorKind: "its kind (editors.js), or null", siteId: "the page's site id" },
  },
  [Msg.SITE_CHECK]: {
    from: ["pages"],
    target: Target.CONTENT,
    data: {},
    reply: {
      siteId: "the page's site id",
      custom: "true on a site the person added",
      protected: "protection is on for the site",
      adapterFound: "the adapter's editor selectors (sites.js) found the editor",
      editor: '{kind (editors.js) or null, foundBy: "adapter" | "typing" | "focus" | "page" | null}',
      send: '{foundBy: "adapter" | "composer" | null, controls: how many controls the composer rule guards}',
      guard: "{running: the network guard answered, blocked: requests it refused on this page}",
    },
  },
  [Msg.PAGE_CHECK]: {
    from: ["content"],
    target: Target.BACKGROUND,
    data: {
      adapterFound: "the adapter's selectors found the editor",
      editorFound: "an editor was found at all (adapter, typing or focus)",
      guard: "the network guard is running in the page",
    },
    reply: {},
  },
  // Composing in Veil's side panel (sw/compose.js): the page only ever gets the protected text.
  [Msg.COMPOSE_SEND]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { tabId: "the chat page's tab (sidepanel.html?tab=ID)", text: "the prompt written in the panel" },
    reply: {
      sent: "true when the protected text was written into the site's editor and sent through the site's own path",
      text: "the protected text given to the page, or null when nothing was written",
      notice: "what happened, in words (why nothing was written, when so)",
      "receipt?": "the k-RR receipt (absent in numbers mode and when nothing was protected)",
    },
  },
  [Msg.COMPOSE_INSERT]: {
    from: ["background"],
    target: Target.CONTENT,
    data: { text: "the protected text (never the original)", token: "the one-time token issued for exactly this text and tab", "historyId?": "the send's history entry (its reply is kept with it)" },
    reply: { sent: "the site's send path was triggered and the text left the editor", notice: "what happened, in words" },
  },
  [Msg.COMPOSE_REDEEM]: {
    from: ["content"],
    target: Target.BACKGROUND,
    data: { token: "the token from compose-insert", text: "what the editor holds right before the send" },
    reply: {},
  },
  [Msg.OPEN_PANEL]: {
    from: ["content"],
    target: Target.BACKGROUND,
    data: {},
    reply: { where: '"side-panel", or "window" where Chrome refused sidePanel.open (no user gesture): the same page in a window of its own' },
  },
  // The reply in the person's words, in Veil's side panel only (restore.js).
  [Msg.GET_REPLY]: {
    from: ["pages"],
    target: Target.CONTENT,
    data: {},
    reply: { text: "the text of the page's latest reply (\"\" when none)", count: "how many replies the page shows", index: "which one `text` is (1-based; the latest)" },
  },
  [Msg.RESTORE_REPLY]: {
    from: ["pages"],
    target: Target.BACKGROUND,
    data: { siteId: "the reply's site (its draws and RootGuard values)", text: "the reply as the page shows it" },
    reply: {
      segments: '[{kind: "plain" | "word" | "close" | "value", text, original?, sent?}] (restore.js)',
      words: "draws mapped back to the person's word",
      close: "close matches (a half-restored word)",
      values: "RootGuard values shown as sent and as true",
    },
  },
});

// Types that change settings, spend budget or reveal stored originals: only
// the extension's own pages may send them.
export const PRIVILEGED = new Set(Object.keys(SCHEMA).filter((type) => SCHEMA[type].from.includes("pages") && SCHEMA[type].target === Target.BACKGROUND));

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

// ------------------------------------------------------------ the guard <-> content channel
//
// The network guard (guard.js, in the page's world) and the content script
// (content/guard-link.js, Veil's isolated world) share no chrome.runtime: they
// talk through DOM events on the document, TO_GUARD and FROM_GUARD, whose
// `detail` is the JSON of a flat object {type, ...fields}. GUARD_SCHEMA lists,
// for each type, who sends it ("content" or "guard") and its fields with their
// JSON types (a type ending in "|null" may be null). A message a receiver does
// not expect -- unknown type, the wrong sender, a field missing, extra or of
// another type -- is dropped (parseGuardMessage); extension/test/
// guard-channel.test.mjs checks that every message the two scripts send has
// exactly these fields.

export const TO_GUARD = "veil:to-guard";
export const FROM_GUARD = "veil:from-guard";

export const GuardMsg = Object.freeze({
  HELLO: "hello",
  STATE: "state",
  APPROVE: "approve",
  READY: "ready",
  STATUS: "status",
  BLOCKED: "blocked",
});

export const GUARD_SCHEMA = Object.freeze({
  [GuardMsg.HELLO]: { from: "content", fields: {}, doc: "are you there? (the guard answers with status)" },
  [GuardMsg.STATE]: {
    from: "content",
    fields: { protected: "boolean" },
    doc: "whether the site is protected now (the guard answers with status)",
  },
  [GuardMsg.APPROVE]: {
    from: "content",
    fields: { text: "string", original: "string|null" },
    doc: "let `text` through (the protected text Veil wrote, or the original the person chose to send); `original`: the draft it protects",
  },
  [GuardMsg.READY]: { from: "guard", fields: {}, doc: "the guard is installed in this page" },
  [GuardMsg.STATUS]: {
    from: "guard",
    fields: { active: "boolean", checked: "number", blocked: "number", lastBlocked: "object|null" },
    doc: "whether it guards, how many requests it checked and refused, the last refusal {api, at}",
  },
  [GuardMsg.BLOCKED]: {
    from: "guard",
    fields: { api: "string", host: "string", reason: "string", draft: "string|null" },
    doc: "it refused a request: the API, the host, why (\"draft\" or what it could not read), the draft it carried",
  },
});

/**
 * A guard-channel message, {type, ...data}.
 * @param {string} type a GuardMsg
 * @param {Record<string, unknown>} data its fields (GUARD_SCHEMA)
 */
export function guardMessage(type, data = {}) {
  return { ...data, type };
}

/** @param {unknown} value @param {string} type "string", "object|null", ... */
function hasJsonType(value, type) {
  return type.split("|").some((t) => (t === "null" ? value === null : value !== null && typeof value === t));
}

/**
 * Why `msg` is not a message `receiver` ("content" or "guard") may take, or null when it is.
 * @param {unknown} msg @param {"content" | "guard"} receiver
 */
export function guardMessageError(msg, receiver) {
  if (!msg || typeof msg !== "object") return "not an object";
  const { type, ...fields } = /** @type {Record<string, unknown>} */ (msg);
  const spec = typeof type === "string" && Object.hasOwn(GUARD_SCHEMA, type) ? GUARD_SCHEMA[/** @type {keyof typeof GUARD_SCHEMA} */ (type)] : null;
  if (!spec) return `unknown type ${JSON.stringify(type)}`;
  if (spec.from === receiver) return `${type} is sent by the ${receiver}, not to it`;
  const want = /** @type {Record<string, string>} */ (spec.fields);
  for (const key of Object.keys(fields)) if (!Object.hasOwn(want, key)) return `${type}: unexpected field ${key}`;
  for (const [key, jsonType] of Object.entries(want)) {
    if (!Object.hasOwn(fields, key)) return `${type}: missing field ${key}`;
    if (!hasJsonType(fields[key], jsonType)) return `${type}: ${key} is not ${jsonType}`;
  }
  return null;
}

/**
 * The message in an event's `detail` (JSON), when `receiver` may take it; else null.
 * @param {unknown} detail @param {"content" | "guard"} receiver
 * @returns {Record<string, any> | null}
 */
export function parseGuardMessage(detail, receiver) {
  if (typeof detail !== "string") return null;
  let msg;
  try {
    msg = JSON.parse(detail);
  } catch {
    return null;
  }
  return guardMessageError(msg, receiver) === null ? msg : null;
}
