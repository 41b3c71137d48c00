// The side panel's send (src/sw/compose.js): the one-time token for the exact
// protected text, and compose-send end to end against a fake content script.
import assert from "node:assert/strict";
import fs from "node:fs";
import { test } from "node:test";

import { Op } from "../src/core-ops.js";
import { ErrorCode } from "../src/errors.js";
import { message, Msg, Target } from "../src/messages.js";
import { historyKey } from "../src/settings.js";
import { COMPOSE_COMMAND, issueToken, newToken, redeemToken, TOKEN_KEY, TOKEN_TTL_MS } from "../src/sw/compose.js";
import { dispatch } from "../src/sw/handlers.js";
import { fakeCore, fakeExt, senders } from "./fake-ext.mjs";

const CHATGPT = "https://chatgpt.com/c/1";
const TAB = 7;
const ORIGINAL = "Patient Xylofant, invoice KX-40917";
// A stand-in protection that shares no letter or digit with what was typed.
const masked = (text) => `P:${text.replace(/[A-Za-z0-9]/g, "x")}`;
const MASKING = {
  sanitize: (args) => {
    const out = fakeCore().sanitize(args);
    out.text = out.perturbed = masked(args.text);
    return out;
  },
};

// ---------------------------------------------------------------- the token

test("a token is 128 random bits, a new one each time", () => {
  const tokens = new Set(Array.from({ length: 200 }, newToken));
  assert.equal(tokens.size, 200);
  for (const t of tokens) assert.match(t, /^[0-9a-f]{32}$/);
});

test("a token lets its tab send its exact text once", async () => {
  const { ext } = fakeExt();
  const token = await issueToken(ext, { tabId: TAB, text: "protected text" });
  assert.deepEqual(await redeemToken(ext, { token, tabId: TAB, text: "protected text" }), { ok: true });
  const again = await redeemToken(ext, { token, tabId: TAB, text: "protected text" });
  assert.equal(again.ok, false);
  assert.match(again.reason, /already used/);
});

test("a rich editor's reshaped whitespace still matches; any other character does not", async () => {
  const { ext } = fakeExt();
  const t1 = await issueToken(ext, { tabId: TAB, text: "line one\n\nline two" });
  assert.equal((await redeemToken(ext, { token: t1, tabId: TAB, text: "line one\nline two\n" })).ok, true);
  const t2 = await issueToken(ext, { tabId: TAB, text: "Pt*ient Xyl_fmCt" });
  const other = await redeemToken(ext, { token: t2, tabId: TAB, text: "Patient Xylofant" });
  assert.equal(other.ok, false);
  assert.match(other.reason, /does not hold the protected text/);
  // Spent by the failed try: the right text cannot follow it.
  assert.equal((await redeemToken(ext, { token: t2, tabId: TAB, text: "Pt*ient Xyl_fmCt" })).ok, false);
});

test("a token is refused for another tab, after it expires, and when made up", async () => {
  const { ext, session } = fakeExt();
  const t1 = await issueToken(ext, { tabId: TAB, text: "x1" });
  const wrongTab = await redeemToken(ext, { token: t1, tabId: 8, text: "x1" });
  assert.deepEqual(wrongTab, { ok: false, reason: "the token was issued for another tab" });
  const now = Date.now();
  const t2 = await issueToken(ext, { tabId: TAB, text: "x2", now });
  const late = await redeemToken(ext, { token: t2, tabId: TAB, text: "x2", now: now + TOKEN_TTL_MS + 1 });
  assert.deepEqual(late, { ok: false, reason: "the token expired" });
  assert.equal((await redeemToken(ext, { token: "0".repeat(32), tabId: TAB, text: "x" })).ok, false);
  assert.equal((await redeemToken(ext, { token: { toString: () => t1 }, tabId: TAB, text: "x1" })).ok, false);
  // Spent and expired tokens do not pile up in storage.
  await issueToken(ext, { tabId: TAB, text: "x3", now: now + TOKEN_TTL_MS + 2 });
  assert.equal(Object.keys((await session.get(TOKEN_KEY))[TOKEN_KEY]).length, 1);
});

test("issuing needs a tab and a non-empty text", async () => {
  const { ext } = fakeExt();
  await assert.rejects(issueToken(ext, { tabId: null, text: "x" }), /tab/);
  await assert.rejects(issueToken(ext, { tabId: TAB, text: "  " }), /protected text/);
});

// ---------------------------------------------------------------- compose-send

/**
 * A worker with a fake content script in tab 7: it answers site-check and
 * get-draft like content.js, and on compose-insert redeems the token through
 * the worker's dispatch (as content.js does) before it "sends".
 */
function env({ check = {}, draft = "", core = {}, tamper = null } = {}) {
  const e = fakeExt({ core: fakeCore(core), tabs: [{ id: TAB, url: CHATGPT }] });
  const toTab = [];
  const pageSent = [];
  e.ext.tabs.send = async (tabId, msg) => {
    toTab.push(structuredClone(msg));
    if (tabId !== TAB) throw new Error("Could not establish connection. Receiving end does not exist.");
    if (msg.type === Msg.SITE_CHECK) return { ok: true, data: { protected: true, editor: { kind: "prosemirror", foundBy: "adapter" }, ...check } };
    if (msg.type === Msg.GET_DRAFT) return { ok: true, data: { text: draft, editorKind: "prosemirror", siteId: "chatgpt" } };
    if (msg.type === Msg.COMPOSE_INSERT) {
      const holding = tamper ? tamper(msg.data.text) : msg.data.text;
      const redeemed = await dispatch(e.ext, message(Msg.COMPOSE_REDEEM, Target.BACKGROUND, { token: msg.data.token, text: holding }), senders.content(CHATGPT));
      if (!redeemed.ok) return { ok: true, data: { sent: false, notice: redeemed.error.message } };
      pageSent.push(holding);
      return { ok: true, data: { sent: true, notice: "sent" } };
    }
    return undefined;
  };
  return { ...e, toTab, pageSent };
}

const composeSend = (e, data) => dispatch(e.ext, message(Msg.COMPOSE_SEND, Target.BACKGROUND, data), senders.page("sidepanel.html?tab=7"));

test("compose-send: only the protected text reaches the tab, once, and the history holds one protected entry", async () => {
  const e = env({ core: MASKING });
  const reply = await composeSend(e, { tabId: TAB, text: ORIGINAL });
  assert.equal(reply.ok, true, JSON.stringify(reply));
  assert.deepEqual(Object.keys(reply.data).sort(), ["notice", "receipt", "sent", "text"]);
  assert.equal(reply.data.sent, true);
  assert.equal(reply.data.text, masked(ORIGINAL));
  assert.deepEqual(e.pageSent, [masked(ORIGINAL)]);
  // Nothing the tab was told holds a word of the original.
  assert.deepEqual(e.toTab.map((m) => m.type), [Msg.SITE_CHECK, Msg.GET_DRAFT, Msg.COMPOSE_INSERT]);
  for (const msg of e.toTab) for (const word of ["Patient", "Xylofant", "KX-40917"]) assert.ok(!JSON.stringify(msg).includes(word), JSON.stringify(msg));
  assert.equal(e.state.coreCalls.filter((c) => c.op === Op.SANITIZE).length, 1); // protected once
  const index = (await e.local.get(historyKey("chatgpt")))[historyKey("chatgpt")];
  assert.equal(index.length, 1);
  assert.equal(index[0].status, "protected");
});

test("compose-send: the page changing the box before the send spends the token and sends nothing", async () => {
  const e = env({ tamper: (text) => `${text} and more` });
  const reply = await composeSend(e, { tabId: TAB, text: ORIGINAL });
  assert.equal(reply.ok, true);
  assert.equal(reply.data.sent, false);
  assert.match(reply.data.notice, /does not hold the protected text/);
  assert.deepEqual(e.pageSent, []);
});

test("compose-send refuses before drawing anything: unknown tab, site off, no editor, a typed draft", async () => {
  const cases = [
    [{ tabId: 99 }, env(), /tab is gone/],
    [{}, env({ check: { protected: false } }), /not on in that tab/],
    [{}, env({ check: { editor: { kind: null, foundBy: null } } }), /no chat box/],
    [{}, env({ draft: "typed in the site" }), /holds text typed there/],
  ];
  for (const [data, e, why] of cases) {
    const reply = await composeSend(e, { tabId: TAB, text: ORIGINAL, ...data });
    assert.equal(reply.ok, true, JSON.stringify(reply));
    assert.deepEqual(reply.data, { sent: false, text: null, notice: reply.data.notice });
    assert.match(reply.data.notice, why);
    assert.equal(e.state.coreCalls.filter((c) => c.op === Op.SANITIZE).length, 0);
    assert.ok(!e.toTab.some((m) => m.type === Msg.COMPOSE_INSERT));
  }
  const off = env();
  await dispatch(off.ext, message(Msg.SET_SITE, Target.BACKGROUND, { siteId: "chatgpt", patch: { enabled: false } }), senders.page());
  const reply = await composeSend(off, { tabId: TAB, text: ORIGINAL });
  assert.match(reply.data.notice, /protection is off for this site/);
  assert.deepEqual(off.toTab, []);
});

test("compose-send never sends the original, even where the site chose 'send unprotected'", async () => {
  const failing = () => {
    const err = new Error("the core is down");
    err.code = "timeout";
    throw err;
  };
  const e = env({ core: { sanitize: failing } });
  await dispatch(e.ext, message(Msg.SET_SITE, Target.BACKGROUND, { siteId: "chatgpt", patch: { failOpen: true } }), senders.page());
  const reply = await composeSend(e, { tabId: TAB, text: ORIGINAL });
  assert.equal(reply.ok, true);
  assert.equal(reply.data.sent, false);
  assert.equal(reply.data.text, null);
  assert.match(reply.data.notice, /Nothing was written into the page/);
  assert.ok(!e.toTab.some((m) => m.type === Msg.COMPOSE_INSERT));
  const index = (await e.local.get(historyKey("chatgpt")))[historyKey("chatgpt")];
  assert.deepEqual(index.map((h) => h.status), ["blocked"]);
});

test("compose-send needs a tab id and text; only Veil's pages may send it, only a content script may redeem", async () => {
  const e = env();
  assert.equal((await composeSend(e, { text: ORIGINAL })).error.code, ErrorCode.BAD_REQUEST);
  assert.equal((await composeSend(e, { tabId: TAB, text: " " })).error.code, ErrorCode.BAD_REQUEST);
  const fromContent = await dispatch(e.ext, message(Msg.COMPOSE_SEND, Target.BACKGROUND, { tabId: TAB, text: ORIGINAL }), senders.content(CHATGPT));
  assert.equal(fromContent.error.code, ErrorCode.FORBIDDEN);
  const token = await issueToken(e.ext, { tabId: TAB, text: "p" });
  const fromPage = await dispatch(e.ext, message(Msg.COMPOSE_REDEEM, Target.BACKGROUND, { token, text: "p" }), senders.page());
  assert.equal(fromPage.error.code, ErrorCode.FORBIDDEN);
  const fromOther = await dispatch(e.ext, message(Msg.COMPOSE_REDEEM, Target.BACKGROUND, { token, text: "p" }), senders.otherExtension());
  assert.equal(fromOther.error.code, ErrorCode.FORBIDDEN);
  // Still unspent (refused before it was looked at): the content script may use it.
  const ok = await dispatch(e.ext, message(Msg.COMPOSE_REDEEM, Target.BACKGROUND, { token, text: "p" }), senders.content(CHATGPT));
  assert.deepEqual(ok, { ok: true, data: {} });
});

test("open-panel opens Veil's panel on the sender's tab, or the same page in a window", async () => {
  const e = env();
  const opened = [];
  e.ext.sidePanel = { openFor: async (tabId) => opened.push(tabId) };
  const windows = [];
  e.ext.windows = { openPopup: async (path) => windows.push(path) };
  const reply = await dispatch(e.ext, message(Msg.OPEN_PANEL, Target.BACKGROUND, {}), senders.content(CHATGPT));
  assert.deepEqual(reply, { ok: true, data: { where: "side-panel" } });
  assert.deepEqual(opened, [TAB]);
  assert.deepEqual(windows, []);
  // Chrome refuses without a user gesture (a click in the page does not carry one): the same page in a window.
  e.ext.sidePanel.openFor = async () => {
    throw new Error("`sidePanel.open()` may only be called in response to a user gesture.");
  };
  const fallback = await dispatch(e.ext, message(Msg.OPEN_PANEL, Target.BACKGROUND, {}), senders.content(CHATGPT));
  assert.deepEqual(fallback, { ok: true, data: { where: "window" } });
  assert.deepEqual(windows, [`sidepanel.html?tab=${TAB}`]);
  const fromPage = await dispatch(e.ext, message(Msg.OPEN_PANEL, Target.BACKGROUND, {}), senders.page());
  assert.equal(fromPage.error.code, ErrorCode.FORBIDDEN);
});

test("the manifest declares the side panel, its permission and the shortcut the worker listens for", () => {
  const manifest = JSON.parse(fs.readFileSync(new URL("../static/manifest.json", import.meta.url), "utf8"));
  assert.ok(manifest.permissions.includes("sidePanel"));
  assert.equal(manifest.side_panel.default_path, "sidepanel.html");
  assert.ok(fs.existsSync(new URL("../static/sidepanel.html", import.meta.url)));
  assert.equal(manifest.commands[COMPOSE_COMMAND].suggested_key.default, "Alt+Shift+V");
  const sw = fs.readFileSync(new URL("../src/sw.js", import.meta.url), "utf8");
  assert.match(sw, /onCommand\(\(command, tab\) => \{\s*if \(command === COMPOSE_COMMAND/);
});
