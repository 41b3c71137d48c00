// Unit tests of the service worker's handlers (src/sw/), run against a fake
// chrome.* adapter and a fake core: node --test extension/test/
import assert from "node:assert/strict";
import fs from "node:fs";
import { test } from "node:test";

import { Op } from "../src/core-ops.js";
import { ErrorCode } from "../src/errors.js";
import { message, Msg, SCHEMA, Target } from "../src/messages.js";
import { entryKey, historyKey } from "../src/settings.js";
import { badgeFor } from "../src/sw/badge.js";
import { callCore } from "../src/sw/core-client.js";
import { dispatch, HANDLERS } from "../src/sw/handlers.js";
import { ensureSiteScripts } from "../src/sw/sites.js";
import { EXT_ORIGIN, fakeCore, fakeExt, senders } from "./fake-ext.mjs";
import { assertKeys, keysOf } from "./schema-keys.mjs";

const CHATGPT = "https://chatgpt.com/c/1";

function env(options = {}) {
  return fakeExt({ core: fakeCore(options.core), tabs: [{ id: 7, url: CHATGPT }], ...options });
}

/** `data` that records which keys a handler reads (get and `in`). */
function recording(data) {
  const read = new Set();
  const proxy = new Proxy(data, {
    get: (target, key) => (typeof key === "string" && read.add(key), target[key]),
    has: (target, key) => (read.add(String(key)), key in target),
  });
  return { proxy, read };
}

/**
 * Send one message to the worker's dispatch as `sender` would; checks that the
 * handler read only documented data keys and that a successful reply has
 * exactly the documented reply keys.
 */
async function call({ ext }, type, data = {}, sender = senders.page()) {
  const { proxy, read } = recording(data);
  const reply = await dispatch(ext, message(type, Target.BACKGROUND, proxy), sender);
  const documented = keysOf(SCHEMA[type].data).all;
  assert.deepEqual([...read].filter((k) => !documented.has(k)), [], `${type} read data keys messages.js does not document`);
  if (reply.ok && SCHEMA[type].reply) assertKeys(SCHEMA[type].reply, Object.keys(reply.data), `the reply to ${type}`);
  return reply;
}

async function until(check, what, ms = 2000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

async function setMode(e, siteId, patch) {
  const reply = await call(e, Msg.SET_SITE, { siteId, patch });
  assert.ok(reply.ok, JSON.stringify(reply));
}

async function saveRootguard(e) {
  const reply = await call(e, Msg.ROOTGUARD_SAVE, { profile: { values: { age: { domain: [0, 120] } } }, trueValues: { age: 52 } });
  assert.ok(reply.ok, JSON.stringify(reply));
}

// ---------------------------------------------------------------- protect

test("protect: the core's text is sent, the history keeps the original, the receipt is finished after", async () => {
  const e = env();
  const reply = await call(e, Msg.PROTECT, { text: "my secret", url: CHATGPT }, senders.content(CHATGPT));
  assert.equal(reply.ok, true);
  assert.equal(reply.data.action, "send");
  assert.equal(reply.data.text, "protected(my secret)");
  assert.equal(reply.data.protected, true);
  assert.match(reply.data.notice, /ε = 5\.00 per character, 9 characters/);
  const sanitize = e.state.coreCalls.find((c) => c.op === Op.SANITIZE);
  assert.deepEqual(sanitize.args, {
    text: "my secret",
    epsilon: 5,
    mode: "text",
    header: null,
    rootguard: null,
    alphabets: "fold", // the default: accents into ASCII (docs/accents/report.md)
    headerLanguage: "auto",
    // The word memo: no word stored yet, and the lifetime ledger is empty.
    memo: {},
    siteId: "chatgpt",
    ledgerTotal: null,
    ledgerSite: null,
  });
  const [index] = Object.values(await e.local.get(historyKey("chatgpt")));
  assert.equal(index.length, 1);
  const key = entryKey(index[0].id);
  const finished = await until(async () => {
    const entry = (await e.local.get(key))[key];
    return entry.receipt.epsilon_total_composed !== null && entry;
  }, "the composed ε");
  assert.equal(finished.original, "my secret");
  assert.equal(finished.sent, "protected(my secret)");
  assert.equal(finished.status, "protected");
  assert.equal(finished.receipt.epsilon_total_composed, 0.9);
});

test("protect: a failing core blocks the send, or sends unprotected where the person chose so", async () => {
  const broken = () => {
    throw Object.assign(new Error("boom"), { code: "internal" });
  };
  const e = env({ core: { sanitize: broken } });
  const blocked = await call(e, Msg.PROTECT, { text: "hello", url: CHATGPT }, senders.content(CHATGPT));
  assert.deepEqual(blocked.data, {
    action: "block",
    text: null,
    notice: "Veil blocked this send: boom. Your text is still in the box and saved in Veil's history.",
    protected: false,
  });
  await setMode(e, "chatgpt", { failOpen: true });
  const open = await call(e, Msg.PROTECT, { text: "hello", url: CHATGPT }, senders.content(CHATGPT));
  assert.equal(open.data.action, "send-unprotected");
  const { entries } = (await call(e, Msg.GET_HISTORY, { siteId: "chatgpt" })).data;
  assert.deepEqual(entries.map((h) => [h.status, h.original, h.sent]), [["blocked", "hello", null], ["unprotected", "hello", "hello"]]);
});

test("protect: a page that is no protected site, or a site turned off, is let through untouched", async () => {
  const e = env();
  const other = await call(e, Msg.PROTECT, { text: "x", url: "https://example.org/" }, senders.content("https://example.org/"));
  assert.deepEqual(other.data, { action: "send", text: null, notice: null, protected: false });
  await setMode(e, "chatgpt", { enabled: false });
  const off = await call(e, Msg.PROTECT, { text: "x", url: CHATGPT }, senders.content(CHATGPT));
  assert.deepEqual(off.data, { action: "send", text: null, notice: null, protected: false });
  assert.deepEqual(e.state.coreCalls.filter((c) => c.op === Op.SANITIZE), []);
});

test("protect: numbers mode without RootGuard blocks with the core's reason", async () => {
  const e = env();
  await setMode(e, "chatgpt", { mode: "numbers" });
  const reply = await call(e, Msg.PROTECT, { text: "I am 52", url: CHATGPT }, senders.content(CHATGPT));
  assert.equal(reply.data.action, "block");
  assert.match(reply.data.notice, /no RootGuard profile/);
});

test("protect: RootGuard's state is read, advanced and stored under one lock, so two tabs never draw twice", async () => {
  const e = env({ answerAfterMs: 5 });
  await saveRootguard(e);
  await setMode(e, "chatgpt", { mode: "both" });
  const sends = [1, 2, 3].map(() => call(e, Msg.PROTECT, { text: "I am 52", url: CHATGPT }, senders.content(CHATGPT)));
  const replies = await Promise.all(sends);
  assert.ok(replies.every((r) => r.data.action === "send"), JSON.stringify(replies));
  const { rootguard } = await e.local.get("rootguard");
  assert.equal(rootguard.state.draws, 3, "each send saw the state the one before stored");
  const draws = e.state.coreCalls.filter((c) => c.op === Op.SANITIZE).map((c) => c.args.rootguard.state.draws);
  assert.deepEqual(draws, [0, 1, 2]);
});

// ---------------------------------------------------------------- who may send what

test("senders: privileged types only from Veil's pages, protect only from its content script", async () => {
  const e = env();
  const fromTab = await call(e, Msg.SET_SITE, { siteId: "chatgpt", patch: { enabled: false } }, senders.content(CHATGPT));
  assert.equal(fromTab.error.code, ErrorCode.FORBIDDEN);
  const fromOther = await call(e, Msg.GET_HISTORY, { siteId: "chatgpt" }, senders.otherExtension());
  assert.equal(fromOther.error.code, ErrorCode.FORBIDDEN);
  const protectFromPage = await call(e, Msg.PROTECT, { text: "x", url: CHATGPT }, senders.page());
  assert.equal(protectFromPage.error.code, ErrorCode.FORBIDDEN);
  const statusFromTab = await call(e, Msg.CORE_STATUS, { state: "ready" }, senders.content(CHATGPT));
  assert.equal(statusFromTab.error.code, ErrorCode.FORBIDDEN);
  assert.equal((await e.local.get("settings")).settings, undefined, "nothing was stored");
});

test("dispatch: other targets are left to their listeners; bad envelopes and unknown types are refused", async () => {
  const { ext } = env();
  assert.equal(dispatch(ext, message(Msg.CORE_CALL, Target.OFFSCREEN, { op: Op.PING, args: {} }), senders.page()), null);
  assert.equal(dispatch(ext, undefined, senders.page()), null);
  const bad = await dispatch(ext, { type: 3, target: Target.BACKGROUND }, senders.page());
  assert.equal(bad.error.code, ErrorCode.BAD_MESSAGE);
  const unknown = await dispatch(ext, message("get-everything", Target.BACKGROUND), senders.page());
  assert.equal(unknown.error.code, ErrorCode.UNKNOWN_TYPE);
  const wrongTarget = await dispatch(ext, message(Msg.GET_DRAFT, Target.BACKGROUND), senders.page());
  assert.equal(wrongTarget.error.code, ErrorCode.UNKNOWN_TYPE);
  const inherited = await dispatch(ext, message("toString", Target.BACKGROUND), senders.page());
  assert.equal(inherited.error.code, ErrorCode.UNKNOWN_TYPE);
});

// ---------------------------------------------------------------- settings and sites

test("set-site and set-global: validated, refused with bad-request naming the value", async () => {
  const e = env();
  const eps = await call(e, Msg.SET_SITE, { siteId: "chatgpt", patch: { epsilon: 0.1 } });
  assert.deepEqual(eps.error, { code: ErrorCode.BAD_REQUEST, message: "epsilon must be a number from 0.5 to 11; got 0.1" });
  const site = await call(e, Msg.SET_SITE, { siteId: "nowhere", patch: {} });
  assert.deepEqual(site.error, { code: ErrorCode.BAD_REQUEST, message: 'unknown site "nowhere"' });
  const limit = await call(e, Msg.SET_GLOBAL, { historyLimit: 0 });
  assert.equal(limit.error.code, ErrorCode.BAD_REQUEST);
  assert.match(limit.error.message, /historyLimit must be an integer from 1 to 10000; got 0/);
  const header = await call(e, Msg.SET_GLOBAL, { header: 3 });
  assert.equal(header.error.code, ErrorCode.BAD_REQUEST);
  assert.equal((await e.local.get("settings")).settings, undefined, "a refused change stores nothing");
  const good = await call(e, Msg.SET_GLOBAL, { header: "", coreTimeoutMs: 1000 });
  assert.equal(good.data.settings.header, "");
  assert.equal((await e.local.get("settings")).settings.coreTimeoutMs, 1000);
});

test("add-site needs Chrome's permission; it registers the content script and the network guard, remove-site undoes it", async () => {
  const origin = "https://chat.example.org";
  const denied = env();
  const refused = await call(denied, Msg.ADD_SITE, { origin });
  assert.equal(refused.error.code, ErrorCode.BAD_REQUEST);
  assert.match(refused.error.message, /has not granted access to https:\/\/chat\.example\.org/);

  const e = env({ granted: ["https://chat.example.org/*"] });
  const added = await call(e, Msg.ADD_SITE, { origin: "chat.example.org/some/path", tabId: 4 });
  assert.equal(added.data.siteId, `custom:${origin}`);
  assert.deepEqual(added.data.settings.custom[`custom:${origin}`], { origin, name: "chat.example.org" });
  assert.deepEqual(e.state.scripts.get(`custom:${origin}`).matches, ["https://chat.example.org/*"]);
  const guard = e.state.scripts.get(`guard:custom:${origin}`);
  assert.deepEqual([guard.js, guard.world, guard.runAt, guard.matches], [["guard.js"], "MAIN", "document_start", ["https://chat.example.org/*"]]);
  assert.deepEqual(e.state.injected, [
    { tabId: 4, files: ["guard.js"], world: "MAIN" },
    { tabId: 4, files: ["content.js"], world: "ISOLATED" },
  ]);
  const protect = await call(e, Msg.PROTECT, { text: "hi", url: `${origin}/c` }, senders.content(`${origin}/c`));
  assert.equal(protect.data.protected, true, "an added site is protected");

  const builtin = await call(e, Msg.REMOVE_SITE, { siteId: "chatgpt" });
  assert.equal(builtin.error.code, ErrorCode.BAD_REQUEST);
  const removed = await call(e, Msg.REMOVE_SITE, { siteId: `custom:${origin}` });
  assert.equal(removed.data.settings.custom[`custom:${origin}`], undefined);
  assert.equal(e.state.scripts.size, 0);
});

test("get-state: the view model for the popup, and RootGuard's view for the options page", async () => {
  const e = env();
  await call(e, Msg.PROTECT, { text: "hi", url: CHATGPT }, senders.content(CHATGPT));
  const popup = await call(e, Msg.GET_STATE, { url: CHATGPT });
  assert.deepEqual(popup.data.current, { url: CHATGPT, siteId: "chatgpt", origin: "https://chatgpt.com" });
  assert.equal(popup.data.history.chatgpt.length, 1);
  assert.deepEqual(popup.data.coreStatus, { state: "unknown" });
  assert.equal(popup.data.defaultHeader, null);
  assert.ok(!("rootguard" in popup.data));
  assert.equal(e.state.coreCalls.filter((c) => c.op !== Op.SANITIZE && c.op !== Op.COMPOSED_EPSILON).length, 0, "the popup's state costs no core call");
  const options = await call(e, Msg.GET_STATE, { withRootguard: true });
  assert.equal(options.data.current, null);
  assert.equal(options.data.defaultHeader, "DEFAULT HEADER");
  assert.equal(options.data.rootguard.hasState, false);
  assert.deepEqual(options.data.rootguard.defaultProfile, { values: { age: { domain: [0, 120] } } });
  assert.equal(options.data.rootguard.error, null);
});

// ---------------------------------------------------------------- the core for the pages

test("preview uses the site's settings and stores nothing but the memo's draws, not even RootGuard's new state", async () => {
  const e = env();
  await saveRootguard(e);
  await setMode(e, "chatgpt", { mode: "both", epsilon: 3 });
  const before = e.local.dump();
  const reply = await call(e, Msg.PREVIEW, { siteId: "chatgpt", text: "I am 52" });
  assert.equal(reply.data.text, "protected(I am 52)");
  assert.ok(!("rootguardState" in reply.data));
  const args = e.state.coreCalls.at(-1).args;
  assert.equal(args.epsilon, 3);
  assert.equal(args.mode, "both");
  assert.deepEqual(args.rootguard.state, { draws: 0 });
  assert.deepEqual(e.local.dump(), before);
});

test("core errors reach the page as the core's own code, one of ERROR_CODES", async () => {
  const invalid = () => {
    throw Object.assign(new Error("epsilon must be > 0"), { code: "invalid_request" });
  };
  const e = env({ core: { explain: invalid } });
  const reply = await call(e, Msg.EXPLAIN, { epsilon: -1 });
  assert.deepEqual(reply.error, { code: "invalid_request", message: "epsilon must be > 0" });
  const profile = env({ core: { rootguard_init: () => { throw Object.assign(new Error("bad"), { code: "invalid_profile" }); } } });
  const saved = await call(profile, Msg.ROOTGUARD_SAVE, { profile: {}, trueValues: {} });
  assert.deepEqual(saved.error, { code: "invalid_profile", message: "bad" });
  // A class name (what the bridge used to send) is not a code: nothing maps it any more.
  const named = env({ core: { explain: () => { throw Object.assign(new Error("x"), { code: "StateError" }); } } });
  assert.equal((await call(named, Msg.EXPLAIN, { epsilon: 5 })).error.code, ErrorCode.INTERNAL);
  const explained = await call(env(), Msg.EXPLAIN, { epsilon: 5 });
  assert.equal(explained.data.keepProbability, 0.5);
});

test("the core client starts the offscreen document when nobody answers, and gives up at its deadline", async () => {
  const e = env({ offscreen: false });
  assert.deepEqual(await callCore(e.ext, Op.PING, {}, 1000), fakeCore().ping());
  assert.equal(e.state.offscreenCreated, 1);
  const slow = env({ answerAfterMs: 200 });
  await assert.rejects(callCore(slow.ext, Op.PING, {}, 30), (err) => err.code === ErrorCode.TIMEOUT && /within 30 ms/.test(err.message));
  const timings = {};
  await callCore(env().ext, Op.PING, {}, 1000, timings);
  assert.equal(timings.python, 1);
  assert.ok(timings.core >= 0);
});

// ---------------------------------------------------------------- history

test("history: the oldest entries beyond the limit are dropped, clear-history deletes every key", async () => {
  const e = env();
  await call(e, Msg.SET_GLOBAL, { historyLimit: 2 });
  for (const text of ["one", "two", "three"]) await call(e, Msg.PROTECT, { text, url: CHATGPT }, senders.content(CHATGPT));
  const { entries } = (await call(e, Msg.GET_HISTORY, { siteId: "chatgpt" })).data;
  assert.deepEqual(entries.map((h) => h.original), ["two", "three"]);
  assert.equal(Object.keys(e.local.dump()).filter((k) => k.startsWith("entry:")).length, 2);
  const unknown = await call(e, Msg.GET_HISTORY, { siteId: "nowhere" });
  assert.equal(unknown.error.code, ErrorCode.BAD_REQUEST);
  await until(() => e.state.coreCalls.filter((c) => c.op === Op.COMPOSED_EPSILON).length === 3, "the receipts");
  await new Promise((resolve) => setTimeout(resolve, 20)); // let the finished receipts be written
  assert.deepEqual((await call(e, Msg.CLEAR_HISTORY, { siteId: null })).data.cleared.slice(0, 2), ["chatgpt", "claude"]);
  assert.deepEqual(Object.keys(e.local.dump()).filter((k) => k.startsWith("entry:") || k.startsWith("history:")), []);
});

// ---------------------------------------------------------------- RootGuard

test("rootguard: saved once, never re-drawn by a second save; a reset needs confirm and is recorded", async () => {
  const e = env();
  await saveRootguard(e);
  const again = await call(e, Msg.ROOTGUARD_SAVE, { profile: {}, trueValues: {} });
  assert.equal(again.error.code, ErrorCode.BAD_REQUEST);
  assert.match(again.error.message, /never re-drawn/);
  const unconfirmed = await call(e, Msg.ROOTGUARD_RESET, { confirm: "yes", reason: "x" });
  assert.equal(unconfirmed.error.code, ErrorCode.BAD_REQUEST);
  const reset = await call(e, Msg.ROOTGUARD_RESET, { confirm: true, reason: "new job" });
  assert.deepEqual(reset.data.state, { draws: 100 });
  const { rootguard } = await e.local.get("rootguard");
  assert.deepEqual(rootguard.events.map((ev) => [ev.event, ev.reason]), [["initialised", "profile saved"], ["reset", "new job"]]);
  assert.deepEqual(rootguard.trueValues, { age: 52 });
  const none = await call(env(), Msg.ROOTGUARD_RESET, { confirm: true, reason: "x" });
  assert.deepEqual(none.error, { code: ErrorCode.BAD_REQUEST, message: "there is no RootGuard profile to reset" });
});

// ---------------------------------------------------------------- core status and badge

test("core-status is kept in session storage and every tab's badge follows it", async () => {
  const e = env();
  await call(e, Msg.CORE_STATUS, { state: "booting" }, senders.page("offscreen.html"));
  assert.equal(e.state.badges.get(7).text, "…");
  await call(e, Msg.CORE_STATUS, { state: "ready", ms: 12, fromSnapshot: true }, senders.page("offscreen.html"));
  assert.equal(e.state.badges.get(7).text, "on");
  assert.equal((await e.session.get("coreStatus")).coreStatus.fromSnapshot, true);
  await setMode(e, "chatgpt", { enabled: false });
  await until(() => e.state.badges.get(7).text === "off", "the badge to say off");
  await call(e, Msg.CORE_STATUS, { state: "error", error: "no wasm" }, senders.page("offscreen.html"));
  assert.equal(e.state.badges.get(7).text, "off", "a site turned off says off even when the core failed");
});

test("page-check: what a tab's content script found sets that tab's badge; only content scripts send it", async () => {
  const e = env();
  await call(e, Msg.CORE_STATUS, { state: "ready", ms: 12 }, senders.page("offscreen.html"));
  assert.equal(e.state.badges.get(7).text, "on");
  await call(e, Msg.PAGE_CHECK, { adapterFound: false, editorFound: true, guard: true }, senders.content(CHATGPT));
  assert.equal(e.state.badges.get(7).text, "on?");
  assert.match(e.state.badges.get(7).title, /this site changed its page; Veil protects it with its general rules and the network guard/);
  await call(e, Msg.PAGE_CHECK, { adapterFound: true, editorFound: true, guard: true }, senders.content(CHATGPT));
  assert.equal(e.state.badges.get(7).text, "on");
  const fromPage = await call(e, Msg.PAGE_CHECK, { adapterFound: false, editorFound: true, guard: true }, senders.page());
  assert.equal(fromPage.error.code, ErrorCode.FORBIDDEN);
});

test("an added site from an older Veil gets its network guard when Veil is updated", async () => {
  const origin = "https://chat.example.org";
  const e = env({ granted: ["https://chat.example.org/*"] });
  await call(e, Msg.ADD_SITE, { origin });
  e.state.scripts.delete(`guard:custom:${origin}`);
  await ensureSiteScripts(e.ext);
  assert.equal(e.state.scripts.get(`guard:custom:${origin}`).world, "MAIN");
  await call(e, Msg.REMOVE_SITE, { siteId: `custom:${origin}` });
  assert.equal(e.state.scripts.size, 0);
});

test("the badge says what the site's protection is", () => {
  const settings = { sites: { a: { enabled: true, epsilon: 4, mode: "numbers" }, b: { enabled: true, epsilon: 4, mode: "text" } } };
  assert.deepEqual(badgeFor(null, settings, { state: "ready" }), { text: "", color: "#6b7280", title: "Veil" });
  assert.equal(badgeFor("a", settings, { state: "ready" }).text, "#");
  assert.equal(badgeFor("b", settings, { state: "ready" }).title, "Veil: protected, ε = 4 per character (text)");
  assert.match(badgeFor("b", settings, { state: "error", error: "x" }).title, /failed \(x\); sends are blocked/);
  assert.equal(badgeFor("b", settings, undefined).text, "…");
});

// ---------------------------------------------------------------- the shape of the worker

test("every type that targets the background has a handler, and only those", () => {
  const background = Object.keys(SCHEMA).filter((type) => SCHEMA[type].target === Target.BACKGROUND);
  assert.deepEqual(Object.keys(HANDLERS).sort(), background.sort());
});

test("the worker keeps no state in module globals", () => {
  const dir = new URL("../src/sw/", import.meta.url);
  const files = [new URL("../src/sw.js", import.meta.url), ...fs.readdirSync(dir).map((f) => new URL(f, dir))];
  for (const file of files) {
    const code = fs.readFileSync(file, "utf8");
    const mutable = code.match(/^(?:let|var)\s+\w+|^const\s+\w+\s*=\s*(?:new\s|\[|\{)/gm) || [];
    assert.deepEqual(mutable, [], `${file.pathname}: a module-level mutable value`);
  }
  assert.equal(EXT_ORIGIN.startsWith("chrome-extension://"), true);
});

test("core codes: a code of ERROR_CODES passes as it is, anything else is internal_error", async () => {
  const { ERROR_CODES, coreCode } = await import("../src/errors.js");
  assert.equal(coreCode("setup_required"), "setup_required");
  assert.equal(coreCode("state_conflict"), "state_conflict");
  assert.ok(Object.values(ErrorCode).every((code) => Object.hasOwn(ERROR_CODES, code)));
  for (const former of ["StateError", "bad-state", "rootguard-not-set-up", "toString", "", undefined]) {
    assert.equal(coreCode(former), ErrorCode.INTERNAL, String(former));
  }
});

test("rootguard: export carries the stored record with its format; import takes new/same/extends, refuses a conflict untouched", async () => {
  const empty = env();
  const nothing = await call(empty, Msg.ROOTGUARD_EXPORT, {});
  assert.equal(nothing.error.code, ErrorCode.BAD_REQUEST);
  const source = env();
  await saveRootguard(source);
  const exported = await call(source, Msg.ROOTGUARD_EXPORT, {});
  const { record } = exported.data;
  assert.equal(record.format, "veil.rootguard.record");
  assert.equal(record.version, 1);
  assert.deepEqual(record.trueValues, { age: 52 });
  // Into a browser with nothing: taken, with an import event.
  const fresh = env();
  const imported = await call(fresh, Msg.ROOTGUARD_IMPORT, { record });
  assert.equal(imported.data.relation, "new");
  const stored = (await fresh.local.get("rootguard")).rootguard;
  assert.deepEqual(stored.state, record.state);
  assert.equal(stored.events.at(-1).event, "imported");
  // The same record again: nothing changes.
  const same = await call(fresh, Msg.ROOTGUARD_IMPORT, { record });
  assert.equal(same.data.relation, "same");
  assert.deepEqual((await fresh.local.get("rootguard")).rootguard, stored);
  // A conflicting record: refused, the stored one untouched.
  const conflict = await call(fresh, Msg.ROOTGUARD_IMPORT, { record: { ...record, state: { draws: -1 } } });
  assert.equal(conflict.error.code, ErrorCode.BAD_REQUEST);
  assert.match(conflict.error.message, /nothing was changed: age was drawn differently/);
  assert.deepEqual((await fresh.local.get("rootguard")).rootguard, stored);
  // A record that extends this one: taken.
  const more = await call(fresh, Msg.ROOTGUARD_IMPORT, { record: { ...record, state: { draws: 5 } } });
  assert.equal(more.data.relation, "extends");
  assert.deepEqual((await fresh.local.get("rootguard")).rootguard.state, { draws: 5 });
});
