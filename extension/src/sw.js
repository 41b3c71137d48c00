// The service worker: routes messages, owns chrome.storage, starts the core.
//
// It keeps no state in globals (Chrome may stop it at any moment): settings,
// history and RootGuard's cache are read from chrome.storage on every message.
// Listeners are registered at top level so a restarted worker receives them.

import { Msg, PRIVILEGED, Target, envelopeError, fail, isExtensionPage, message, ok } from "./messages.js";
import { effectiveHeader, entryKey, historyKey, normalizeSettings, patchSite } from "./settings.js";
import { GENERIC_ADAPTER, SITES, customSiteId, originMatchPattern, parseCustomOrigin, siteForUrl } from "./sites.js";
import { local, session, sleep, withLock } from "./chrome-api.js";

const OFFSCREEN_URL = "offscreen.html";
const EXT_ORIGIN = chrome.runtime.getURL("");
const STORAGE_LOCK = "veil-storage";
const ROOTGUARD_LOCK = "veil-rootguard";

// ---------------------------------------------------------------- the core

async function ensureOffscreen() {
  const url = chrome.runtime.getURL(OFFSCREEN_URL);
  const contexts = await chrome.runtime.getContexts({ contextTypes: ["OFFSCREEN_DOCUMENT"], documentUrls: [url] });
  if (contexts.length > 0) return;
  try {
    await chrome.offscreen.createDocument({
      url: OFFSCREEN_URL,
      reasons: ["WORKERS"],
      justification: "Runs Veil's Python privacy core (Pyodide) so prompts are protected before they are sent.",
    });
  } catch (err) {
    if (!/single offscreen|already exists/i.test(String(err?.message))) throw err;
  }
}

/**
 * Call the Python core; rejects if it does not answer within `timeoutMs`.
 * `timings`, when given, receives {core: round trip ms, python: ms inside Python}.
 */
async function callCore(op, args, timeoutMs, timings = null) {
  const started = performance.now();
  const deadline = Date.now() + timeoutMs;
  let ensured = false;
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`the privacy core did not answer within ${timeoutMs} ms`);
    let reply;
    try {
      reply = await Promise.race([
        chrome.runtime.sendMessage(message(Msg.CORE_CALL, Target.OFFSCREEN, { op, args })),
        sleep(left).then(() => ({ ok: false, error: { code: "timeout", message: `the privacy core did not answer within ${timeoutMs} ms` } })),
      ]);
    } catch (err) {
      // No offscreen document yet, or it is still loading its listener: make
      // sure it exists (once) and try again shortly.
      if (/Receiving end does not exist|Could not establish connection/i.test(String(err?.message))) {
        if (!ensured) {
          await ensureOffscreen();
          ensured = true;
        } else {
          await sleep(Math.min(50, Math.max(1, deadline - Date.now())));
        }
        continue;
      }
      throw err;
    }
    if (reply === undefined) {
      // Another extension page answered nothing: the core is not there yet.
      if (!ensured) {
        await ensureOffscreen();
        ensured = true;
      } else {
        await sleep(20);
      }
      continue;
    }
    if (!reply.ok) {
      const error = new Error(reply.error?.message || "the privacy core failed");
      error.code = reply.error?.code;
      throw error;
    }
    if (timings) {
      timings.core = performance.now() - started;
      timings.python = reply.ms;
    }
    return reply.data;
  }
}

// ---------------------------------------------------------------- storage

async function loadSettings() {
  const { settings } = await local.get("settings");
  return normalizeSettings(settings);
}

function updateSettings(mutate) {
  return withLock(STORAGE_LOCK, async () => {
    const settings = await loadSettings();
    mutate(settings);
    await local.set({ settings });
    return settings;
  });
}

function appendHistory(siteId, entry, limit) {
  return withLock(STORAGE_LOCK, async () => {
    const key = historyKey(siteId);
    const { [key]: index = [] } = await local.get(key);
    const full = { id: crypto.randomUUID(), ts: Date.now(), siteId, ...entry };
    index.push({ id: full.id, ts: full.ts, status: full.status, epsilon: full.epsilon, mode: full.mode, length: full.original.length });
    const dropped = index.length > limit ? index.splice(0, index.length - limit) : [];
    await local.set({ [key]: index, [entryKey(full.id)]: full });
    if (dropped.length) await local.remove(dropped.map((e) => entryKey(e.id)));
    return full.id;
  });
}

/**
 * Finish a receipt after the send: the tight composed ε is exact but slow
 * (most of a sanitization's time), so it is computed once the prompt is gone.
 */
async function finishReceipt(id, receipt, timeoutMs) {
  if (!receipt || receipt.epsilon_total_composed !== null) return;
  const { epsilon_total_composed } = await callCore(
    "composed_epsilon",
    { n: receipt.chars_perturbed, epsilon: receipt.epsilon_per_char, delta: receipt.delta },
    timeoutMs,
  );
  await withLock(STORAGE_LOCK, async () => {
    const key = entryKey(id);
    const { [key]: entry } = await local.get(key);
    if (!entry?.receipt) return;
    entry.receipt.epsilon_total_composed = epsilon_total_composed;
    await local.set({ [key]: entry });
  });
}

async function readHistory(siteId) {
  const key = historyKey(siteId);
  const { [key]: index = [] } = await local.get(key);
  const entries = await local.get(index.map((e) => entryKey(e.id)));
  return index.map((e) => entries[entryKey(e.id)] || { ...e, original: "(missing)", sent: null });
}

/** The site id for a page URL: a built-in site, a custom origin, or null. */
function siteIdFor(url, settings) {
  const builtin = siteForUrl(url);
  if (builtin) return builtin.id;
  try {
    const id = customSiteId(new URL(url).origin);
    if (settings.custom[id]) return id;
  } catch {
    /* not a URL */
  }
  return null;
}

// ---------------------------------------------------------------- badge

async function refreshBadge(tabId, url) {
  if (tabId === undefined || tabId < 0) return;
  const [{ coreStatus }, settings] = await Promise.all([session.get("coreStatus"), loadSettings()]);
  const siteId = url ? siteIdFor(url, settings) : null;
  let text = "";
  let color = "#6b7280";
  let title = "Veil";
  if (siteId) {
    const site = settings.sites[siteId];
    if (!site.enabled) {
      text = "off";
      title = "Veil: protection is off for this site";
    } else if (coreStatus?.state === "error") {
      text = "!";
      color = "#b91c1c";
      title = `Veil: the privacy core failed (${coreStatus.error}); sends are blocked`;
    } else if (coreStatus?.state !== "ready") {
      text = "…";
      color = "#b45309";
      title = "Veil: the privacy core is starting";
    } else {
      text = site.mode === "numbers" ? "#" : "on";
      color = "#15803d";
      title = `Veil: protected, ε = ${site.epsilon} per character (${site.mode})`;
    }
  }
  try {
    await chrome.action.setBadgeText({ tabId, text });
    await chrome.action.setBadgeBackgroundColor({ tabId, color });
    await chrome.action.setTitle({ tabId, title });
  } catch {
    /* the tab went away */
  }
}

async function refreshAllBadges() {
  const tabs = await chrome.tabs.query({});
  await Promise.all(tabs.map((tab) => refreshBadge(tab.id, tab.url)));
}

// ---------------------------------------------------------------- handlers

function errorText(err) {
  return String(err?.message || err);
}

async function handleProtect(data, sender) {
  const started = performance.now();
  const timings = {};
  const url = sender.url || sender.tab?.url || "";
  const settings = await loadSettings();
  const siteId = siteIdFor(url, settings);
  if (!siteId) return { action: "send", text: null, notice: null, protected: false };
  const site = settings.sites[siteId];
  const text = String(data.text ?? "");
  if (!site.enabled) return { action: "send", text: null, notice: null, protected: false };
  const base = { original: text, epsilon: site.epsilon, mode: site.mode, url };
  try {
    const args = { text, epsilon: site.epsilon, mode: site.mode, header: effectiveHeader(settings, siteId), rootguard: null };
    const result =
      site.mode === "text"
        ? await callCore("sanitize", args, settings.coreTimeoutMs, timings)
        : // RootGuard may draw a root's value the first time it is mentioned; read,
          // call and store under one lock so two tabs can never draw it twice.
          await withLock(ROOTGUARD_LOCK, async () => {
            const { rootguard: stored } = await local.get("rootguard");
            if (stored?.state) args.rootguard = { profile: stored.profile, trueValues: stored.trueValues, state: stored.state };
            const out = await callCore("sanitize", args, settings.coreTimeoutMs, timings);
            if (out.rootguardState && stored?.state && JSON.stringify(out.rootguardState) !== JSON.stringify(stored.state)) {
              await local.set({ rootguard: { ...stored, state: out.rootguardState } });
            }
            return out;
          });
    const receipt = result.receipt;
    const notice = receipt
      ? `Veil protected this prompt: ε = ${receipt.epsilon_per_char.toFixed(2)} per character, ${receipt.chars_perturbed} characters` +
        (result.replacements.length ? `, ${result.replacements.length} values from RootGuard's cache` : "")
      : `Veil replaced ${result.replacements.length} values with RootGuard's cached noisy values`;
    timings.beforeHistory = performance.now() - started;
    const id = await appendHistory(siteId, { ...base, status: "protected", sent: result.text, receipt, replacements: result.replacements, timings }, settings.historyLimit);
    // Not awaited: the reply goes out first. If the worker stops before this
    // finishes, the entry keeps the basic bound and a null composed bound.
    finishReceipt(id, receipt, settings.coreTimeoutMs).catch(() => {});
    return { action: "send", text: result.text, notice, protected: true, receipt };
  } catch (err) {
    if (site.failOpen) {
      const notice = `Veil could not protect this prompt (${errorText(err)}); sent UNPROTECTED as you chose for this site.`;
      await appendHistory(siteId, { ...base, status: "unprotected", sent: text, notice }, settings.historyLimit);
      return { action: "send-unprotected", text: null, notice, protected: false };
    }
    const notice = `Veil blocked this send: ${errorText(err)}. Your text is still in the box and saved in Veil's history.`;
    await appendHistory(siteId, { ...base, status: "blocked", sent: null, notice }, settings.historyLimit);
    return { action: "block", text: null, notice, protected: false };
  }
}

async function viewRootguard(settings) {
  const { rootguard } = await local.get("rootguard");
  let view = null;
  let defaultProfile = null;
  let error = null;
  try {
    if (rootguard?.state) {
        view = await callCore("rootguard_view", { profile: rootguard.profile, state: rootguard.state }, settings.coreTimeoutMs);
    } else if (rootguard?.profile) {
      view = await callCore("rootguard_describe", { profile: rootguard.profile }, settings.coreTimeoutMs);
    }
    defaultProfile = (await callCore("rootguard_default", {}, settings.coreTimeoutMs)).profile;
    view ??= await callCore("rootguard_describe", { profile: defaultProfile }, settings.coreTimeoutMs);
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
    events: rootguard?.events ?? [],
    defaultProfile,
    error,
  };
}

async function handleGetState(data) {
  const settings = await loadSettings();
  const { coreStatus = { state: "unknown" } } = await session.get("coreStatus");
  const keys = Object.keys(settings.sites).map(historyKey);
  const stored = await local.get(keys);
  const history = {};
  for (const id of Object.keys(settings.sites)) history[id] = stored[historyKey(id)] || [];
  const sites = [
    ...SITES.map((s) => ({ id: s.id, name: s.name, hosts: s.hosts, custom: false })),
    ...Object.entries(settings.custom).map(([id, c]) => ({ id, name: c.name, hosts: [new URL(c.origin).host], origin: c.origin, custom: true })),
  ];
  let current = null;
  if (data.url) {
    const id = siteIdFor(data.url, settings);
    let origin = null;
    try {
      origin = new URL(data.url).origin;
    } catch {
      /* not a URL */
    }
    current = { url: data.url, siteId: id, origin };
  }
  const rootguard = data.withRootguard ? await viewRootguard(settings) : undefined;
  let defaultHeader = null;
  if (data.withRootguard) {
    defaultHeader = await callCore("ping", {}, settings.coreTimeoutMs).then((p) => p.defaultHeader, () => null);
  }
  return { settings, coreStatus, history, sites, current, rootguard, defaultHeader, genericAdapter: GENERIC_ADAPTER };
}

async function handleAddSite(data) {
  const origin = parseCustomOrigin(data.origin);
  const id = customSiteId(origin);
  const pattern = originMatchPattern(origin);
  const granted = await chrome.permissions.contains({ origins: [pattern] });
  if (!granted) throw new Error(`Chrome has not granted access to ${origin}; accept the permission prompt to add it`);
  const existing = await chrome.scripting.getRegisteredContentScripts({ ids: [id] });
  if (existing.length === 0) {
    await chrome.scripting.registerContentScripts([
      { id, matches: [pattern], js: ["content.js"], runAt: "document_start", allFrames: false, persistAcrossSessions: true },
    ]);
  }
  const settings = await updateSettings((s) => {
    s.custom[id] = { origin, name: data.name || new URL(origin).host };
    s.sites[id] = patchSite(s.sites[id], {});
  });
  if (Number.isInteger(data.tabId)) {
    await chrome.scripting.executeScript({ target: { tabId: data.tabId }, files: ["content.js"] }).catch(() => {});
  }
  return { siteId: id, settings };
}

async function handleRemoveSite(data) {
  const id = String(data.siteId || "");
  if (!id.startsWith("custom:")) throw new Error("only sites you added can be removed; turn a built-in site off instead");
  await chrome.scripting.unregisterContentScripts({ ids: [id] }).catch(() => {});
  const settings = await updateSettings((s) => {
    delete s.custom[id];
    delete s.sites[id];
  });
  return { settings };
}

async function handleRootguardSave(data) {
  const settings = await loadSettings();
  return withLock(ROOTGUARD_LOCK, async () => {
    const { rootguard } = await local.get("rootguard");
    if (rootguard?.state) {
      throw new Error("RootGuard already holds cached noisy values; they are never re-drawn. Use \"Reset cached values\" to start over.");
    }
    const result = await callCore("rootguard_init", { profile: data.profile, trueValues: data.trueValues || {} }, settings.coreTimeoutMs);
    const events = [{ ts: Date.now(), event: "initialised", reason: "profile saved" }];
    await local.set({ rootguard: { profile: data.profile, trueValues: data.trueValues || {}, state: result.state, events } });
    return result;
  });
}

async function handleRootguardReset(data) {
  if (data.confirm !== true) throw new Error("a reset re-draws every cached noisy value; it needs {confirm: true}");
  const settings = await loadSettings();
  return withLock(ROOTGUARD_LOCK, async () => {
    const { rootguard } = await local.get("rootguard");
    const profile = data.profile ?? rootguard?.profile;
    const trueValues = data.trueValues ?? rootguard?.trueValues ?? {};
    if (!profile) throw new Error("there is no RootGuard profile to reset");
    const result = rootguard?.state
      ? await callCore("rootguard_reset", { profile, trueValues, state: rootguard.state }, settings.coreTimeoutMs)
      : await callCore("rootguard_init", { profile, trueValues }, settings.coreTimeoutMs);
    const events = [...(rootguard?.events || []), { ts: Date.now(), event: "reset", reason: String(data.reason || "reset by the person") }];
    await local.set({ rootguard: { profile, trueValues, state: result.state, events } });
    return result;
  });
}

async function handlePrivileged(type, data) {
  switch (type) {
    case Msg.GET_STATE:
      return handleGetState(data);
    case Msg.SET_SITE: {
      const settings = await updateSettings((s) => {
        if (!s.sites[data.siteId]) throw new Error(`unknown site ${JSON.stringify(data.siteId)}`);
        s.sites[data.siteId] = patchSite(s.sites[data.siteId], data.patch);
      });
      refreshAllBadges().catch(() => {});
      return { settings };
    }
    case Msg.SET_GLOBAL: {
      const settings = await updateSettings((s) => {
        if ("header" in data) {
          if (data.header !== null && typeof data.header !== "string") throw new Error("header must be text or null (the default)");
          s.header = data.header;
        }
        if ("coreTimeoutMs" in data) {
          const v = Number(data.coreTimeoutMs);
          if (!Number.isInteger(v) || v < 500 || v > 60000) throw new Error(`coreTimeoutMs must be an integer from 500 to 60000; got ${data.coreTimeoutMs}`);
          s.coreTimeoutMs = v;
        }
        if ("historyLimit" in data) {
          const v = Number(data.historyLimit);
          if (!Number.isInteger(v) || v < 1 || v > 10000) throw new Error(`historyLimit must be an integer from 1 to 10000; got ${data.historyLimit}`);
          s.historyLimit = v;
        }
      });
      return { settings };
    }
    case Msg.ADD_SITE:
      return handleAddSite(data);
    case Msg.REMOVE_SITE:
      return handleRemoveSite(data);
    case Msg.PREVIEW: {
      const settings = await loadSettings();
      const site = settings.sites[data.siteId];
      if (!site) throw new Error(`unknown site ${JSON.stringify(data.siteId)}`);
      const epsilon = data.epsilon ?? site.epsilon;
      const mode = data.mode ?? site.mode;
      let rootguard = null;
      if (mode !== "text") {
        const stored = (await local.get("rootguard")).rootguard;
        rootguard = stored ? { profile: stored.profile, trueValues: stored.trueValues, state: stored.state } : null;
      }
      // A preview never stores anything: RootGuard's state it returns is dropped.
      const result = await callCore("preview", { text: String(data.text ?? ""), epsilon, mode, header: effectiveHeader(settings, data.siteId), rootguard }, settings.coreTimeoutMs);
      delete result.rootguardState;
      return result;
    }
    case Msg.EXPLAIN: {
      const settings = await loadSettings();
      return callCore("explain", { epsilon: Number(data.epsilon) }, settings.coreTimeoutMs);
    }
    case Msg.CLEAR_HISTORY: {
      const settings = await loadSettings();
      const ids = data.siteId ? [data.siteId] : Object.keys(settings.sites);
      await withLock(STORAGE_LOCK, async () => {
        const indexes = await local.get(ids.map(historyKey));
        const entries = Object.values(indexes).flatMap((index) => index.map((e) => entryKey(e.id)));
        await local.remove([...ids.map(historyKey), ...entries]);
      });
      return { cleared: ids };
    }
    case Msg.GET_HISTORY: {
      const settings = await loadSettings();
      if (!settings.sites[data.siteId]) throw new Error(`unknown site ${JSON.stringify(data.siteId)}`);
      return { siteId: data.siteId, entries: await readHistory(data.siteId) };
    }
    case Msg.ROOTGUARD_SAVE:
      return handleRootguardSave(data);
    case Msg.ROOTGUARD_RESET:
      return handleRootguardReset(data);
    default:
      throw new Error(`unknown message type ${JSON.stringify(type)}`);
  }
}

async function handleCoreStatus(data) {
  await session.set({ coreStatus: { ...data, at: Date.now() } });
  await refreshAllBadges();
  return {};
}

chrome.runtime.onMessage.addListener((msg, sender, sendResponse) => {
  if (!msg || msg.target !== Target.BACKGROUND) return false;
  const problem = envelopeError(msg);
  if (problem) {
    sendResponse(fail("bad-message", problem));
    return false;
  }
  const data = msg.data || {};
  let work;
  if (PRIVILEGED.has(msg.type)) {
    if (!isExtensionPage(sender, chrome.runtime.id, EXT_ORIGIN)) {
      sendResponse(fail("forbidden", `${msg.type} is accepted only from Veil's own pages`));
      return false;
    }
    work = handlePrivileged(msg.type, data);
  } else if (msg.type === Msg.PROTECT) {
    if (sender.id !== chrome.runtime.id || !sender.tab) {
      sendResponse(fail("forbidden", "protect is accepted only from Veil's content script"));
      return false;
    }
    work = handleProtect(data, sender);
  } else if (msg.type === Msg.CORE_STATUS) {
    if (!isExtensionPage(sender, chrome.runtime.id, EXT_ORIGIN)) {
      sendResponse(fail("forbidden", "core-status comes only from Veil's offscreen page"));
      return false;
    }
    work = handleCoreStatus(data);
  } else {
    sendResponse(fail("unknown-type", `unknown message type ${JSON.stringify(msg.type)}`));
    return false;
  }
  work.then(
    (result) => sendResponse(ok(result)),
    (err) => sendResponse(fail(err?.code || "error", errorText(err))),
  );
  return true;
});

chrome.runtime.onStartup.addListener(() => {
  ensureOffscreen().catch(() => {});
});

chrome.runtime.onInstalled.addListener(() => {
  ensureOffscreen().catch(() => {});
  refreshAllBadges().catch(() => {});
});

chrome.tabs.onUpdated.addListener((tabId, info, tab) => {
  if (info.status === "loading" || info.url) refreshBadge(tabId, tab.url).catch(() => {});
});

chrome.tabs.onActivated.addListener(({ tabId }) => {
  chrome.tabs.get(tabId).then((tab) => refreshBadge(tabId, tab.url)).catch(() => {});
});

// Every time the worker starts (browser start, a message, an event), make sure
// the core is up: it is cheap when the offscreen document already exists.
ensureOffscreen().catch(() => {});
