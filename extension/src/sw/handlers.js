// The worker's message handlers, one per type that targets the background
// (messages.js documents each `data` and reply), and `dispatch`, which checks
// the envelope and the sender before a handler runs. Every handler reads and
// writes chrome.storage through `ext` and keeps nothing in memory.

import { Op } from "../core-ops.js";
import { badRequest, ErrorCode, errorCode, errorText } from "../errors.js";
import { envelopeError, fail, isExtensionPage, Msg, ok, PRIVILEGED, SCHEMA, Target } from "../messages.js";
import { restoreReply } from "../restore.js";
import { effectiveHeader, patchSite } from "../settings.js";
import { customSiteId, GENERIC_ADAPTER, parseCustomOrigin } from "../sites.js";
import { refreshAllBadges, refreshBadge, savePageCheck } from "./badge.js";
import { composeRedeem, composeSend, openPanel } from "./compose.js";
import { callCore } from "./core-client.js";
import { appendHistory, clearHistory, finishReceipt, readHistory, readIndexes, saveReply, withdrawEntry } from "./history.js";
import { drawsSentTo, loadLedger, memoView, resetMemo, unsendDraws, withMemo, wordsSentBefore } from "./memo.js";
import { pageSite, registerSite, siteIdFor, siteList, unregisterSite } from "./sites.js";
import {
  loadCoreStatus,
  loadRootguard,
  loadSettings,
  ROOTGUARD_LOCK,
  rootguardArgs,
  saveCoreStatus,
  saveRootguard,
  updateSettings,
} from "./storage.js";

/** Run `fn`; an error it throws is the request's fault (a bad value, an unknown site). */
function refused(fn) {
  try {
    return fn();
  } catch (err) {
    throw err?.code ? err : badRequest(errorText(err));
  }
}

function knownSite(settings, siteId) {
  const site = settings.sites[siteId];
  if (!site) throw badRequest(`unknown site ${JSON.stringify(siteId)}`);
  return site;
}

// ---------------------------------------------------------------- protect

/** `options.failOpen: false` (the side panel): a failed protection never sends the original. */
async function protect(ext, data, sender, { failOpen = true } = {}) {
  const started = performance.now();
  const timings = {};
  const url = sender.url || sender.tab?.url || "";
  const settings = await loadSettings(ext);
  const siteId = siteIdFor(url, settings);
  if (!siteId) return { action: "send", text: null, notice: null, protected: false };
  const site = settings.sites[siteId];
  const text = String(data.text ?? "");
  if (!site.enabled) return { action: "send", text: null, notice: null, protected: false };
  const base = { original: text, epsilon: site.epsilon, mode: site.mode, url };
  try {
    const args = { text, epsilon: site.epsilon, mode: site.mode, header: effectiveHeader(settings, siteId), rootguard: null, alphabets: site.alphabets, headerLanguage: site.headerLanguage };
    // Under the memo lock: a word already released is sent as its stored draw,
    // and RootGuard (which may draw a root's value the first time it is
    // mentioned) reads, draws and stores under its own lock inside it, so two
    // tabs can never draw one word or one value twice.
    let before = {}; // the memo's variants as they were before this send
    const result = await withMemo(
      ext,
      text,
      async (memo, ledger) => {
        before = structuredClone(memo);
        const callArgs = { ...args, memo, siteId, ledgerTotal: ledger.total, ledgerSite: ledger.sites[siteId] ?? null };
        if (site.mode === "text") return callCore(ext, Op.SANITIZE, callArgs, settings.coreTimeoutMs, timings);
        return ext.withLock(ROOTGUARD_LOCK, async () => {
          const stored = await loadRootguard(ext);
          if (stored?.state) callArgs.rootguard = rootguardArgs(stored);
          const out = await callCore(ext, Op.SANITIZE, callArgs, settings.coreTimeoutMs, timings);
          if (out.rootguardState && stored?.state && JSON.stringify(out.rootguardState) !== JSON.stringify(stored.state)) {
            await saveRootguard(ext, { ...stored, state: out.rootguardState, events: withDriftEvents(stored, out.rootguardState) });
          }
          return out;
        });
      },
      { siteId },
    );
    const receipt = result.receipt;
    const notice = protectNotice(receipt, result.replacements, wordsSentBefore(before, result.memoSeen, siteId)) + rootguardNotice(result.replacements);
    timings.beforeHistory = performance.now() - started;
    const id = await appendHistory(ext, siteId, { ...base, status: "protected", sent: result.text, receipt, replacements: result.replacements, timings, memoSentHere: result.memoSentHere || [] }, settings.historyLimit);
    // Not awaited: the reply goes out first. If the worker stops before this
    // finishes, the entry keeps the basic bound and a null composed bound.
    finishReceipt(ext, id, receipt, settings.coreTimeoutMs).catch(() => {});
    return { action: "send", text: result.text, notice, protected: true, receipt, historyId: id };
  } catch (err) {
    if (site.failOpen && failOpen) {
      const notice = `Veil could not protect this prompt (${errorText(err)}); sent UNPROTECTED as you chose for this site.`;
      await appendHistory(ext, siteId, { ...base, status: "unprotected", sent: text, notice }, settings.historyLimit);
      return { action: "send-unprotected", text: null, notice, protected: false };
    }
    const notice = `Veil blocked this send: ${errorText(err)}. Your text is still in the box and saved in Veil's history.`;
    await appendHistory(ext, siteId, { ...base, status: "blocked", sent: null, notice }, settings.historyLimit);
    return { action: "block", text: null, notice, protected: false };
  }
}

// ---------------------------------------------------------------- state for the pages

async function viewRootguard(ext, settings) {
  const rootguard = await loadRootguard(ext);
  const timeout = settings.coreTimeoutMs;
  let view = null;
  let defaultProfile = null;
  let error = null;
  try {
    if (rootguard?.state) {
      view = await callCore(ext, Op.ROOTGUARD_VIEW, { profile: rootguard.profile, state: rootguard.state, trueValues: rootguard.trueValues || {} }, timeout);
    } else if (rootguard?.profile) {
      view = await callCore(ext, Op.ROOTGUARD_DESCRIBE, { profile: rootguard.profile }, timeout);
    }
    defaultProfile = (await callCore(ext, Op.ROOTGUARD_DEFAULT, {}, timeout)).profile;
    view ??= await callCore(ext, Op.ROOTGUARD_DESCRIBE, { profile: defaultProfile }, timeout);
  } catch (err) {
    error = errorText(err);
  }
  return {
    profile: rootguard?.profile ?? null,
    trueValues: rootguard?.trueValues ?? {},
    hasState: Boolean(rootguard?.state),
    noisy: view?.noisy ?? null,
    ledger: view?.ledger ?? null,
    describe: view?.describe ?? null,
    spent: view?.spent ?? null,
    drifts: view?.drifts ?? [],
    events: rootguard?.events ?? [],
    defaultProfile,
    error,
  };
}

async function getState(ext, data) {
  const settings = await loadSettings(ext);
  const coreStatus = (await loadCoreStatus(ext)) ?? { state: "unknown" };
  const state = {
    settings,
    coreStatus,
    history: await readIndexes(ext, Object.keys(settings.sites)),
    sites: siteList(settings),
    current: data.url ? pageSite(data.url, settings) : null,
    defaultHeader: null,
    genericAdapter: GENERIC_ADAPTER,
  };
  if (data.withRootguard) {
    state.rootguard = await viewRootguard(ext, settings);
    state.defaultHeader = await callCore(ext, Op.PING, {}, settings.coreTimeoutMs).then((p) => p.defaultHeader, () => null);
  }
  return state;
}

// ---------------------------------------------------------------- settings

async function setSite(ext, data) {
  const settings = await updateSettings(ext, (s) => {
    const site = knownSite(s, data.siteId);
    s.sites[data.siteId] = refused(() => patchSite(site, data.patch));
  });
  refreshAllBadges(ext).catch(() => {});
  return { settings };
}

function integerIn(name, value, lo, hi) {
  const v = Number(value);
  if (!Number.isInteger(v) || v < lo || v > hi) throw badRequest(`${name} must be an integer from ${lo} to ${hi}; got ${value}`);
  return v;
}

async function setGlobal(ext, data) {
  const settings = await updateSettings(ext, (s) => {
    if ("header" in data) {
      if (data.header !== null && typeof data.header !== "string") throw badRequest("header must be text or null (the default)");
      s.header = data.header;
    }
    if ("coreTimeoutMs" in data) s.coreTimeoutMs = integerIn("coreTimeoutMs", data.coreTimeoutMs, 500, 60000);
    if ("historyLimit" in data) s.historyLimit = integerIn("historyLimit", data.historyLimit, 1, 10000);
  });
  return { settings };
}

async function addSite(ext, data) {
  const origin = refused(() => parseCustomOrigin(data.origin));
  const id = customSiteId(origin);
  await registerSite(ext, id, origin);
  const settings = await updateSettings(ext, (s) => {
    s.custom[id] = { origin, name: new URL(origin).host };
    s.sites[id] = patchSite(s.sites[id], {});
  });
  if (Number.isInteger(data.tabId)) {
    // The open tab gets both now; the guard wraps what the page has not already
    // taken a reference to, so the popup asks for a reload to be sure.
    await ext.scripting.inject(data.tabId, ["guard.js"], "MAIN").catch(() => {});
    await ext.scripting.inject(data.tabId, ["content.js"]).catch(() => {});
  }
  return { siteId: id, settings };
}

async function removeSite(ext, data) {
  const id = String(data.siteId || "");
  if (!id.startsWith("custom:")) throw badRequest("only sites you added can be removed; turn a built-in site off instead");
  await unregisterSite(ext, id);
  const settings = await updateSettings(ext, (s) => {
    delete s.custom[id];
    delete s.sites[id];
  });
  return { settings };
}

// ---------------------------------------------------------------- the core for the pages

async function preview(ext, data) {
  const settings = await loadSettings(ext);
  const site = knownSite(settings, data.siteId);
  const rootguard = site.mode === "text" ? null : rootguardArgs(await loadRootguard(ext));
  const text = String(data.text ?? "");
  const args = { text, epsilon: site.epsilon, mode: site.mode, header: effectiveHeader(settings, data.siteId), rootguard, alphabets: site.alphabets, headerLanguage: site.headerLanguage };
  // The draw shown is kept in the word memo (as shown, sent to no site): the
  // send of the same words sends exactly it, and previewing again cannot re-roll
  // it (Veil's own sample text is the exception). RootGuard's state it returns
  // is dropped: a preview spends no budget.
  const result =
    data.sample === true
      ? await callCore(ext, Op.PREVIEW, args, settings.coreTimeoutMs)
      : await withMemo(ext, text, (memo) => callCore(ext, Op.PREVIEW, { ...args, memo }, settings.coreTimeoutMs));
  delete result.rootguardState;
  delete result.memoAdded;
  return result;
}

async function explain(ext, data) {
  const settings = await loadSettings(ext);
  return callCore(ext, Op.EXPLAIN, { epsilon: Number(data.epsilon) }, settings.coreTimeoutMs);
}

// ---------------------------------------------------------------- history

async function clearHistoryOf(ext, data) {
  const settings = await loadSettings(ext);
  const ids = data.siteId ? [data.siteId] : Object.keys(settings.sites);
  await clearHistory(ext, ids);
  return { cleared: ids };
}

async function getHistory(ext, data) {
  knownSite(await loadSettings(ext), data.siteId);
  return { siteId: data.siteId, entries: await readHistory(ext, data.siteId) };
}

// ---------------------------------------------------------------- RootGuard

async function rootguardSave(ext, data) {
  const settings = await loadSettings(ext);
  return ext.withLock(ROOTGUARD_LOCK, async () => {
    if ((await loadRootguard(ext))?.state) {
      throw badRequest('RootGuard already holds cached noisy values; they are never re-drawn. Use "Reset cached values" to start over.');
    }
    const trueValues = data.trueValues || {};
    const result = await callCore(ext, Op.ROOTGUARD_INIT, { profile: data.profile, trueValues }, settings.coreTimeoutMs);
    const events = [{ ts: Date.now(), event: "initialised", reason: "profile saved" }];
    await saveRootguard(ext, { profile: data.profile, trueValues, state: result.state, events });
    return result;
  });
}

/** The events with one "drift" entry per value newly drawn for a number that is not the stored one. */
function withDriftEvents(stored, state) {
  const before = stored?.state?.drifts || {};
  const added = Object.entries(state?.drifts || {}).flatMap(([name, draws]) =>
    Object.keys(draws).filter((key) => !(key in (before[name] || {}))).map(() => name));
  const events = [...(stored?.events || [])];
  for (const name of added) {
    events.push({ ts: Date.now(), event: "drift", reason: `${name}: a prompt held a value other than the stored one; it was drawn once as a new value and is reused whenever that value is written again` });
  }
  return events;
}

/** What the notice adds for RootGuard: each value's ε both ways, and the numbers that drifted. */
/**
 * The page's notice for a protected send: ε per character, the total ε of the
 * prompt (basic composition over every perturbed character), and the words
 * sent as before -- only those already sent to this site (not a preview's
 * draws, nor words another site got: this site sees those for the first time).
 */
export function protectNotice(receipt, replacements, sentBefore) {
  const values = replacements?.length ? `${replacements.length} value${replacements.length === 1 ? "" : "s"} from RootGuard's cache` : "";
  if (!receipt) return `Veil replaced ${replacements.length} values with RootGuard's cached noisy values`;
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const total = receipt.epsilon_total_basic;
  return (
    `Veil protected this prompt: ε = ${receipt.epsilon_per_char.toFixed(2)} per character, ${plural(receipt.chars_perturbed, "character")}` +
    (Number.isFinite(total) ? `, total ε ${total.toFixed(1)} (basic composition)` : "") +
    (sentBefore ? `; ${plural(sentBefore, "word")} sent as before to this site: nothing new revealed` : "") +
    (values ? `; ${values}` : "")
  );
}

function rootguardNotice(replacements) {
  if (!replacements?.length) return "";
  const labels = new Map();
  for (const r of replacements) for (const [name, g] of Object.entries(r.guarantees || {})) labels.set(name, `${name} ${g.label} (${g.domain_label})`);
  const shown = [...labels.values()];
  const drifted = replacements.filter((r) => r.drift).map((r) => r.name);
  return (shown.length ? `. RootGuard: ${shown.slice(0, 3).join("; ")}${shown.length > 3 ? `; and ${shown.length - 3} more` : ""}` : "") +
    (drifted.length ? `. ${[...new Set(drifted)].join(", ")}: not your stored value, sent as a new noisy draw; store it in Veil's options (RootGuard) if it is your value now` : "");
}

/** Store values later: only they are drawn (under the lock, like a save); every other draw stays. */
async function rootguardAdd(ext, data) {
  const settings = await loadSettings(ext);
  return ext.withLock(ROOTGUARD_LOCK, async () => {
    const rootguard = await loadRootguard(ext);
    if (!rootguard?.state) throw badRequest("RootGuard has no saved values yet: save your profile first");
    const values = data.values;
    if (!values || typeof values !== "object" || Array.isArray(values) || !Object.keys(values).length) {
      throw badRequest("values must be an object of root -> number with at least one value");
    }
    const result = await callCore(ext, Op.ROOTGUARD_ADD, { profile: rootguard.profile, trueValues: rootguard.trueValues || {}, state: rootguard.state, values }, settings.coreTimeoutMs);
    const events = [...(rootguard.events || [])];
    for (const name of [...result.added, ...result.updated]) {
      const how = result.adopted.includes(name) ? "took the draw already sent for that value (nothing spent)" : "drawn once";
      events.push({ ts: Date.now(), event: result.added.includes(name) ? "added" : "updated", reason: `${name} ${result.added.includes(name) ? "added" : "updated"} from the options page: ${how}` });
    }
    await saveRootguard(ext, { ...rootguard, trueValues: result.trueValues, state: result.state, events });
    const { state, noisy, ledger, describe, trueValues, added, updated, adopted } = result;
    return { state, noisy, ledger, describe, trueValues, added, updated, adopted };
  });
}

async function rootguardReset(ext, data) {
  if (data.confirm !== true) throw badRequest("a reset re-draws every cached noisy value; it needs {confirm: true}");
  const settings = await loadSettings(ext);
  return ext.withLock(ROOTGUARD_LOCK, async () => {
    const rootguard = await loadRootguard(ext);
    const profile = rootguard?.profile;
    const trueValues = data.trueValues ?? rootguard?.trueValues ?? {};
    if (!profile) throw badRequest("there is no RootGuard profile to reset");
    const result = rootguard?.state
      ? await callCore(ext, Op.ROOTGUARD_RESET, { profile, trueValues, state: rootguard.state }, settings.coreTimeoutMs)
      : await callCore(ext, Op.ROOTGUARD_INIT, { profile, trueValues }, settings.coreTimeoutMs);
    const events = [...(rootguard?.events || []), { ts: Date.now(), event: "reset", reason: String(data.reason || "reset by the person") }];
    await saveRootguard(ext, { profile, trueValues, state: result.state, events });
    return result;
  });
}

const RECORD_FORMAT = "veil.rootguard.record";

async function rootguardExport(ext) {
  const rootguard = await loadRootguard(ext);
  if (!rootguard?.state) throw badRequest("RootGuard has no drawn values to export yet; save your profile first");
  const { profile, trueValues, state, events } = rootguard;
  return { record: { format: RECORD_FORMAT, version: 1, profile, trueValues, state, events: events || [] } };
}

async function rootguardImport(ext, data) {
  const settings = await loadSettings(ext);
  return ext.withLock(ROOTGUARD_LOCK, async () => {
    const here = await loadRootguard(ext);
    const hereRecord = here?.state ? { profile: here.profile, trueValues: here.trueValues || {}, state: here.state } : null;
    const checked = await callCore(ext, Op.ROOTGUARD_IMPORT_CHECK, { record: data.record, here: hereRecord }, settings.coreTimeoutMs);
    if (checked.relation === "conflict") {
      // Never merged: two independent draws of one value would spend its budget twice.
      throw badRequest(`this record does not match the one in this browser, nothing was changed: ${checked.reasons.join("; ")}`);
    }
    if (checked.relation !== "same") {
      const events = [...(here?.events || checked.record.events || []), { ts: Date.now(), event: "imported", reason: `${checked.relation} record imported from a file` }];
      await saveRootguard(ext, { ...checked.record, events });
    }
    const { state, noisy, ledger, describe } = checked;
    return { relation: checked.relation, state, noisy, ledger, describe };
  });
}

// ---------------------------------------------------------------- word memo and lifetime ledger

async function memoState(ext) {
  const settings = await loadSettings(ext);
  const view = await memoView(ext);
  const { total, sites } = view.ledger;
  const summary = await callCore(ext, Op.LEDGER, { total, sites }, settings.coreTimeoutMs);
  return { ...view, ledger: summary };
}

async function ledgerState(ext, data) {
  const settings = await loadSettings(ext);
  knownSite(settings, data.siteId);
  const { total, sites } = await loadLedger(ext);
  const siteLedger = sites[data.siteId] ?? null;
  const summary = await callCore(ext, Op.LEDGER, { total, sites: { site: siteLedger } }, settings.coreTimeoutMs);
  return { total: summary.total, site: summary.sites.site };
}

async function memoReset(ext, data) {
  if (data.confirm !== true) throw badRequest("a reset forgets every word's draw (the next send of each is a new release); it needs {confirm: true}");
  return resetMemo(ext, data.reason);
}

// ---------------------------------------------------------------- the core's status

async function coreStatus(ext, data) {
  await saveCoreStatus(ext, data);
  await refreshAllBadges(ext);
  return {};
}

// ---------------------------------------------------------------- what the content script found

async function pageCheck(ext, data, sender) {
  const tabId = sender.tab?.id;
  await savePageCheck(ext, tabId, { adapterFound: Boolean(data.adapterFound), editorFound: Boolean(data.editorFound), guard: Boolean(data.guard) });
  await refreshBadge(ext, tabId, sender.tab?.url || sender.url);
  return {};
}

// ---------------------------------------------------------------- dispatch

/** The handler of each type that targets the background: (ext, data, sender) -> reply data. */
export const HANDLERS = Object.freeze({
  [Msg.PROTECT]: protect,
  [Msg.CORE_STATUS]: coreStatus,
  [Msg.GET_STATE]: getState,
  [Msg.SET_SITE]: setSite,
  [Msg.SET_GLOBAL]: setGlobal,
  [Msg.ADD_SITE]: addSite,
  [Msg.REMOVE_SITE]: removeSite,
  [Msg.PREVIEW]: preview,
  [Msg.EXPLAIN]: explain,
  [Msg.CLEAR_HISTORY]: clearHistoryOf,
  [Msg.GET_HISTORY]: getHistory,
  [Msg.ROOTGUARD_SAVE]: rootguardSave,
  [Msg.ROOTGUARD_RESET]: rootguardReset,
  [Msg.ROOTGUARD_EXPORT]: rootguardExport,
  [Msg.ROOTGUARD_IMPORT]: rootguardImport,
  [Msg.ROOTGUARD_ADD]: rootguardAdd,
  [Msg.PAGE_CHECK]: pageCheck,
  [Msg.MEMO_STATE]: memoState,
  [Msg.MEMO_RESET]: memoReset,
  [Msg.LEDGER_STATE]: ledgerState,
  [Msg.COMPOSE_SEND]: (ext, data) => composeSend(ext, data, { protect }),
  [Msg.COMPOSE_REDEEM]: composeRedeem,
  [Msg.OPEN_PANEL]: openPanel,
  [Msg.RESTORE_REPLY]: restoreReplyOf,
  [Msg.WITHDRAW]: withdraw,
  [Msg.SAVE_REPLY]: saveReplyOf,
});

// ---------------------------------------------------------------- the reply in the person's words

/**
 * The side panel's reply restored (restore.js): every draw the word memo sent
 * to this site mapped back to its word, every RootGuard value of this site's
 * history shown as sent and as true. Only Veil's pages may ask (PRIVILEGED):
 * the answer holds originals.
 */
async function restoreReplyOf(ext, data) {
  const siteId = String(data.siteId || "");
  const text = String(data.text ?? "");
  if (!siteId) throw badRequest("restore-reply needs a siteId");
  const draws = await drawsSentTo(ext, siteId);
  const values = [];
  for (const entry of await readHistory(ext, siteId)) {
    for (const r of entry.replacements || []) {
      if (typeof r.replacement === "string" && typeof r.original === "string") values.push([r.replacement, r.original]);
    }
  }
  const segments = restoreReply(text, { draws, values });
  const count = (kind) => segments.filter((s) => s.kind === kind).length;
  return { segments, words: count("word"), close: count("close"), values: count("value") };
}

/**
 * The replayed Enter made a new line: nothing was sent. The entry (of the
 * sender's own site, made in the last two minutes) becomes "withdrawn" and its
 * words stop counting as sent to the site (unsendDraws; the ledger keeps it).
 */
async function withdraw(ext, data, sender) {
  const settings = await loadSettings(ext);
  const siteId = siteIdFor(sender.url || sender.tab?.url || "", settings);
  if (!siteId) throw badRequest("withdraw: this page is not one of Veil's sites");
  const notice = "Not sent: Enter made a new line on this page, so the protected text never left (the page's box held it until Veil put your text back).";
  const entry = await withdrawEntry(ext, siteId, String(data.historyId || ""), notice);
  if (!entry) return { withdrawn: false, words: 0 };
  const words = await unsendDraws(ext, siteId, entry.memoSentHere || []);
  return { withdrawn: true, words };
}

/** The site's reply to one of its protected sends, kept with the entry (the options page restores it). */
async function saveReplyOf(ext, data, sender) {
  const settings = await loadSettings(ext);
  const siteId = siteIdFor(sender.url || sender.tab?.url || "", settings);
  if (!siteId) throw badRequest("save-reply: this page is not one of Veil's sites");
  if (typeof data.text !== "string" || !data.text.trim()) throw badRequest("save-reply needs the reply's text");
  return { saved: await saveReply(ext, siteId, String(data.historyId || ""), data.text) };
}

/** Why `sender` may not send `type`, or null when it may. */
function forbidden(ext, type, sender) {
  const fromPage = isExtensionPage(sender, ext.runtime.id(), ext.runtime.url(""));
  if (PRIVILEGED.has(type)) return fromPage ? null : `${type} is accepted only from Veil's own pages`;
  if ([Msg.PROTECT, Msg.WITHDRAW, Msg.SAVE_REPLY, Msg.PAGE_CHECK, Msg.COMPOSE_REDEEM, Msg.OPEN_PANEL].includes(type)) {
    return sender?.id === ext.runtime.id() && sender.tab ? null : `${type} is accepted only from Veil's content script`;
  }
  if (type === Msg.CORE_STATUS) return fromPage ? null : "core-status comes only from Veil's offscreen page";
  return null;
}

/**
 * Handle one incoming message: null when it is not for the background (another
 * listener answers it), else a promise of the reply envelope. Never rejects.
 */
export function dispatch(ext, msg, sender) {
  if (!msg || msg.target !== Target.BACKGROUND) return null;
  const problem = envelopeError(msg);
  if (problem) return Promise.resolve(fail(ErrorCode.BAD_MESSAGE, problem));
  const handler = Object.hasOwn(HANDLERS, msg.type) ? HANDLERS[msg.type] : null;
  if (!handler || SCHEMA[msg.type]?.target !== Target.BACKGROUND) {
    return Promise.resolve(fail(ErrorCode.UNKNOWN_TYPE, `unknown message type ${JSON.stringify(msg.type)}`));
  }
  const refusal = forbidden(ext, msg.type, sender);
  if (refusal) return Promise.resolve(fail(ErrorCode.FORBIDDEN, refusal));
  return Promise.resolve()
    .then(() => handler(ext, msg.data || {}, sender))
    .then(ok, (err) => fail(errorCode(err), errorText(err)));
}
