// The word memo's storage (src/sw/memo.js) through the worker's handlers, with a
// fake core that follows py_core.memo's contract: a word given in `memo` at the
// same setting is sent as its stored form; any other word is drawn (here: a
// counter, so two draws of one word differ) and reported in memoAdded.
import assert from "node:assert/strict";
import { test } from "node:test";

import { message, Msg, Target } from "../src/messages.js";
import { entryKey } from "../src/settings.js";
import { dispatch } from "../src/sw/handlers.js";
import { MEMO_PREFIX, UNSENT_LIMIT, wordsOf } from "../src/sw/memo.js";
import { fakeCore, fakeExt, senders } from "./fake-ext.mjs";

const CHATGPT = "https://chatgpt.com/c/1";
const CLAUDE = "https://claude.ai/chat/1";

function memoCore({ hideFromCore = new Set() } = {}) {
  let draws = 0;
  const run = (args, preview) => {
    const key = `${args.alphabets}|0|${args.epsilon}`;
    const added = [];
    const seen = [];
    const used = [];
    const forms = {};
    const out = [];
    // "Q" stands for a RootGuard replacement: it cuts a typed unit into fragments.
    for (const word of args.text.split(/([ \t\n\r\v\fQ]+)/)) {
      if (!word || /^[ \t\n\r\v\fQ]+$/.test(word)) {
        out.push(word);
        continue;
      }
      const stored = hideFromCore.has(word) ? undefined : ((args.memo || {})[word] || []).find((v) => `${v.alphabets}|${v.marks ? 1 : 0}|${v.epsilon}` === key);
      if (stored) {
        out.push(stored.sent);
        if (!used.includes(word)) used.push(word), seen.push({ word, alphabets: args.alphabets, marks: false, epsilon: args.epsilon, first: !(stored.sites || []).length, here: (stored.sites || []).includes(args.siteId) });
      } else if (forms[word]) {
        out.push(forms[word]);
      } else {
        forms[word] = `${word[0]}#${++draws}`;
        added.push({ word, variant: { alphabets: args.alphabets, marks: false, epsilon: args.epsilon, sent: forms[word], slots: { ascii: word.length } } });
        seen.push({ word, alphabets: args.alphabets, marks: false, epsilon: args.epsilon, first: true });
        out.push(forms[word]);
      }
    }
    const text = out.join("");
    const result = { text, perturbed: text, receipt: { epsilon_per_char: args.epsilon, chars_perturbed: args.text.length, epsilon_total_composed: 1, delta: 1e-6, slots: [] }, replacements: [], rootguardState: null, memoAdded: added };
    if (preview) result.words = [];
    else {
      const count = (ledger, items) => ({ words: (ledger?.words || 0) + items.length });
      result.ledgerTotal = count(args.ledgerTotal, seen.filter((s) => s.first));
      result.ledgerSite = count(args.ledgerSite, seen.filter((s) => !s.here));
      result.memoSeen = seen;
    }
    return result;
  };
  return { sanitize: (args) => run(args, false), preview: (args) => run(args, true) };
}

function env(core = memoCore()) {
  return fakeExt({ core: fakeCore(core), tabs: [{ id: 7, url: CHATGPT }] });
}

async function protect(e, text, url = CHATGPT) {
  const reply = await dispatch(e.ext, message(Msg.PROTECT, Target.BACKGROUND, { text, url }), senders.content(url));
  assert.ok(reply.ok, JSON.stringify(reply));
  return reply.data.text;
}

async function preview(e, text) {
  const reply = await dispatch(e.ext, message(Msg.PREVIEW, Target.BACKGROUND, { siteId: "chatgpt", text }), senders.page());
  assert.ok(reply.ok, JSON.stringify(reply));
  return reply.data.text;
}

test("units are cut as py_core cuts them: words between ASCII whitespace, then letters/digits vs the rest", () => {
  assert.deepEqual(wordsOf("Ada  Lovelace,\tAda\u00a0x\u3000y\n(z) 4471-A Jérôme"), ["Ada", "Lovelace", ",", "\u00a0", "x", "\u3000", "y", "(", "z", ")", "4471", "-", "A", "Jérôme"]);
});

test("a word sent once is sent again as the same draw, on this site and on another", async () => {
  const e = env();
  const first = await protect(e, "Ada Lovelace");
  const again = await protect(e, "Lovelace and Ada");
  const elsewhere = await protect(e, "Ada", CLAUDE);
  assert.deepEqual(first.split(" "), [again.split(" ")[2], again.split(" ")[0]]);
  assert.equal(elsewhere, first.split(" ")[0]);
  const stored = e.local.dump()[MEMO_PREFIX + "Ada"];
  assert.equal(stored.length, 1);
  assert.deepEqual(stored[0].sites.sort(), ["chatgpt", "claude"]);
  const { memoLedger } = e.local.dump();
  assert.deepEqual(memoLedger.total, { words: 3 }); // Ada, Lovelace, and: each counted once
  assert.deepEqual(memoLedger.sites.chatgpt, { words: 3 });
  assert.deepEqual(memoLedger.sites.claude, { words: 1 });
});

test("the preview's draw is what is sent, and previewing again cannot re-roll it", async () => {
  const e = env();
  const shown = await preview(e, "invoice 4471-A");
  assert.equal(await preview(e, "invoice 4471-A"), shown);
  assert.deepEqual(e.local.dump().memoUnsent, ["invoice", "4471-A"]);
  assert.deepEqual(e.local.dump()[MEMO_PREFIX + "invoice"][0].sites, []);
  assert.equal(await protect(e, "invoice 4471-A"), shown);
  assert.deepEqual(e.local.dump().memoUnsent, []);
  assert.deepEqual(e.local.dump().memoLedger.total, { words: 2 }); // counted when first sent
});

test("a fragment the worker did not look up is never re-drawn: the send is redone with its draw", async () => {
  const e = env();
  const first = await protect(e, "Lovelace");
  const calls = e.state.coreCalls.length;
  // The worker looks up "LovelaceQ52" (a typed unit); the core's k-RR sees the fragment "Lovelace".
  const sent = await protect(e, "LovelaceQ52");
  assert.equal(e.state.coreCalls.length - calls, 2, "the core is called a second time, with the fragment's draw");
  assert.equal(sent.split("Q")[0], first);
  assert.equal(e.local.dump()[MEMO_PREFIX + "Lovelace"].length, 1);
});

test("a core that re-draws a stored word it was given blocks the send (fail closed)", async () => {
  const hide = new Set();
  const e = env(memoCore({ hideFromCore: hide }));
  await protect(e, "Lovelace");
  const stored = e.local.dump()[MEMO_PREFIX + "Lovelace"];
  hide.add("Lovelace");
  const reply = await dispatch(e.ext, message(Msg.PROTECT, Target.BACKGROUND, { text: "Lovelace", url: CHATGPT }), senders.content(CHATGPT));
  assert.equal(reply.data.action, "block");
  assert.match(reply.data.notice, /already released/);
  assert.deepEqual(e.local.dump()[MEMO_PREFIX + "Lovelace"], stored);
});

test("a reset forgets the draws, is logged, and keeps the lifetime ledger", async () => {
  const e = env();
  const first = await protect(e, "Lovelace");
  const refused = await dispatch(e.ext, message(Msg.MEMO_RESET, Target.BACKGROUND, {}), senders.page());
  assert.equal(refused.ok, false);
  const reply = await dispatch(e.ext, message(Msg.MEMO_RESET, Target.BACKGROUND, { confirm: true, reason: "testing" }), senders.page());
  assert.equal(reply.data.forgotten, 1);
  assert.equal(reply.data.events.at(-1).reason, "testing");
  assert.equal(e.local.dump()[MEMO_PREFIX + "Lovelace"], undefined);
  assert.notEqual(await protect(e, "Lovelace"), first);
  assert.deepEqual(e.local.dump().memoLedger.total, { words: 2 }); // both releases counted
});

test("draws only shown in previews are capped; sent draws are never dropped", async () => {
  const e = env();
  await protect(e, "kept");
  const words = Array.from({ length: UNSENT_LIMIT + 3 }, (_, i) => `w${i}`);
  await preview(e, ["kept", ...words].join(" "));
  const dump = e.local.dump();
  assert.equal(dump.memoUnsent.length, UNSENT_LIMIT);
  assert.equal(dump[MEMO_PREFIX + "w0"], undefined);
  assert.ok(dump[MEMO_PREFIX + `w${UNSENT_LIMIT + 2}`]);
  assert.ok(dump[MEMO_PREFIX + "kept"]);
});

test("Veil's own sample text is previewed afresh and never kept in the memo", async () => {
  const e = env();
  const reply = await dispatch(e.ext, message(Msg.PREVIEW, Target.BACKGROUND, { siteId: "chatgpt", text: "Maria Keller", sample: true }), senders.page());
  assert.ok(reply.ok);
  assert.deepEqual(Object.keys(e.local.dump()).filter((k) => k.startsWith(MEMO_PREFIX)), []);
});

async function protectReply(e, text, url = CHATGPT) {
  const reply = await dispatch(e.ext, message(Msg.PROTECT, Target.BACKGROUND, { text, url }), senders.content(url));
  assert.ok(reply.ok, JSON.stringify(reply));
  return reply.data;
}

async function withdrawSend(e, historyId, url = CHATGPT) {
  const reply = await dispatch(e.ext, message(Msg.WITHDRAW, Target.BACKGROUND, { historyId }), senders.content(url));
  assert.ok(reply.ok, JSON.stringify(reply));
  return reply.data;
}

test("a withdrawn send (Enter made a new line): the entry says so and its words stop counting as sent here", async () => {
  const e = env();
  await protect(e, "Ada"); // Ada sent to chatgpt for real
  const first = await protectReply(e, "Ada Lovelace"); // Lovelace drawn now, Ada sent as before
  assert.match(first.notice, /1 word sent as before/);
  assert.equal(typeof first.historyId, "string");
  // The replay turned out to be a new line: withdraw it.
  assert.deepEqual(await withdrawSend(e, first.historyId), { withdrawn: true, words: 1 });
  const entry = e.local.dump()[entryKey(first.historyId)];
  assert.equal(entry.status, "withdrawn");
  assert.match(entry.notice, /Not sent: Enter made a new line/);
  assert.equal(entry.memoSentHere, undefined);
  // Lovelace keeps its draw but is sent to no site; Ada (sent by the earlier send) stays sent.
  assert.deepEqual(e.local.dump()[MEMO_PREFIX + "Lovelace"][0].sites, []);
  assert.deepEqual(e.local.dump()[MEMO_PREFIX + "Ada"][0].sites, ["chatgpt"]);
  assert.ok(e.local.dump().memoUnsent.includes("Lovelace"));
  // The real send: the same draw goes out, and only Ada counts as sent before.
  const second = await protectReply(e, "Ada Lovelace");
  assert.equal(second.text, first.text);
  assert.match(second.notice, /1 word sent as before/);
  assert.deepEqual(e.local.dump()[MEMO_PREFIX + "Lovelace"][0].sites, ["chatgpt"]);
  // Once is enough: a second withdraw of the same entry, another site's, or a made-up id change nothing.
  assert.deepEqual(await withdrawSend(e, first.historyId), { withdrawn: false, words: 0 });
  assert.deepEqual(await withdrawSend(e, second.historyId, CLAUDE), { withdrawn: false, words: 0 });
  assert.deepEqual(await withdrawSend(e, "no-such-id"), { withdrawn: false, words: 0 });
  assert.deepEqual(e.local.dump()[MEMO_PREFIX + "Lovelace"][0].sites, ["chatgpt"]);
});

test("withdraw is taken only from Veil's content script", async () => {
  const e = env();
  const { historyId } = await protectReply(e, "Ada Lovelace");
  const reply = await dispatch(e.ext, message(Msg.WITHDRAW, Target.BACKGROUND, { historyId }), senders.page());
  assert.equal(reply.ok, false);
  assert.equal(reply.error.code, "forbidden");
});

test("the site's reply to a protected send is kept with its entry, for that site's page only", async () => {
  const e = env();
  const { historyId } = await protectReply(e, "Ada Lovelace");
  const save = (data, url = CHATGPT, sender = senders.content(url)) => dispatch(e.ext, message(Msg.SAVE_REPLY, Target.BACKGROUND, data), sender);
  const saved = await save({ historyId, text: "About A#1 L#2: yes." });
  assert.ok(saved.ok && saved.data.saved, JSON.stringify(saved));
  assert.deepEqual(e.local.dump()[entryKey(historyId)].reply.text, "About A#1 L#2: yes.");
  // Another site's page, a made-up entry, an empty text, or a Veil page: nothing kept.
  assert.equal((await save({ historyId, text: "spoofed" }, CLAUDE)).data.saved, false);
  assert.equal((await save({ historyId: "nope", text: "x" })).data.saved, false);
  assert.equal((await save({ historyId, text: "  " })).ok, false);
  assert.equal((await save({ historyId, text: "x" }, CHATGPT, senders.page())).error.code, "forbidden");
  assert.equal(e.local.dump()[entryKey(historyId)].reply.text, "About A#1 L#2: yes.");
  // A withdrawn send keeps no reply.
  const second = await protectReply(e, "Ada again");
  await withdrawSend(e, second.historyId);
  assert.equal((await save({ historyId: second.historyId, text: "late" })).data.saved, false);
});
