// The reply in the person's words (restore.js, and the worker's restore-reply):
// draws sent to the site map back to the words, a close match is marked, a
// RootGuard value is shown as sent and as true; only Veil's pages may ask.
import assert from "node:assert/strict";
import { test } from "node:test";

import { message, Msg, Target } from "../src/messages.js";
import { editDistance, restoreReply } from "../src/restore.js";
import { dispatch } from "../src/sw/handlers.js";
import { fakeExt, senders } from "./fake-ext.mjs";

const DRAWS = [
  ["|argl'@=", "Lovelace"],
  ["Kellqr", "Keller"],
  ["?", ","], // a one-character draw of punctuation: never matched
  ["Okafxr", "Okafor"],
  ["is", "is"], // sent unchanged: nothing to restore
];

const plain = (segments) => segments.map((s) => s.text).join("");

test("draws in the reply become the person's words; short and unchanged ones are left alone", () => {
  const reply = "Dear |argl'@=, Dr. Kellqr says: is it done? Kellqrs and Bxqs are other words, Bxq is Bob.";
  const segments = restoreReply(reply, { draws: [...DRAWS, ["Bxq", "Bob"]], values: [] });
  // A long draw is found even glued to a letter ("Kellqrs": the model's plural); a short one must stand apart.
  assert.equal(plain(segments), "Dear Lovelace, Dr. Keller says: is it done? Kellers and Bxqs are other words, Bob is Bob.");
  assert.deepEqual(
    segments.filter((s) => s.kind !== "plain").map((s) => [s.kind, s.sent, s.original]),
    [
      ["word", "|argl'@=", "Lovelace"],
      ["word", "Kellqr", "Keller"],
      ["word", "Kellqr", "Keller"],
      ["word", "Bxq", "Bob"],
    ],
  );
});

test("a half-restored word (a step from the draw or the word) is marked close; far words are not", () => {
  const segments = restoreReply("Okafer and Okaxyz and Ocean and okafor", { draws: DRAWS, values: [] });
  const close = segments.filter((s) => s.kind === "close").map((s) => [s.sent, s.original]);
  assert.deepEqual(close, [["Okafer", "Okafor"]]);
  assert.equal(editDistance("kitten", "sitting", 3), 3);
  assert.equal(editDistance("kitten", "sitting", 2), Infinity);
});

test("RootGuard's values are shown as sent and as true, only where the number stands alone", () => {
  const segments = restoreReply("Your age 66 is fine; 166 and 6.66 are other numbers.", { draws: [], values: [["66", "52"]] });
  assert.equal(plain(segments), "Your age 66 — yours: 52 is fine; 166 and 6.66 are other numbers.");
  assert.equal(segments.filter((s) => s.kind === "value").length, 1);
  assert.equal(plain(restoreReply("66.", { draws: [], values: [["66", "52"]] })), "66 — yours: 52.");
});

test("restore-reply maps only this site's sent draws and its history's values, for Veil's pages only", async () => {
  const e = fakeExt();
  await e.ext.storage.local.set({
    "memo:Lovelace": [{ alphabets: "scripts", marks: false, epsilon: 5, sent: "|argl'@=", sites: ["chatgpt"] }],
    "memo:Keller": [{ alphabets: "scripts", marks: false, epsilon: 5, sent: "Kellqr", sites: [] }], // a preview's draw
    "memo:Okafor": [{ alphabets: "scripts", marks: false, epsilon: 5, sent: "Okafxr", sites: ["claude"] }],
    "history:chatgpt": [{ id: "h1" }],
    "entry:h1": { id: "h1", status: "protected", replacements: [{ name: "age", original: "52", replacement: "66", start: 0, end: 2 }] },
  });
  const msg = message(Msg.RESTORE_REPLY, Target.BACKGROUND, { siteId: "chatgpt", text: "|argl'@= is 66; Kellqr and Okafxr" });
  const reply = await dispatch(e.ext, msg, senders.page("sidepanel.html"));
  assert.ok(reply.ok, JSON.stringify(reply));
  assert.equal(plain(reply.data.segments), "Lovelace is 66 — yours: 52; Kellqr and Okafxr");
  assert.deepEqual([reply.data.words, reply.data.close, reply.data.values], [1, 0, 1]);
  const refused = await dispatch(e.ext, msg, senders.content("https://chatgpt.com/c/1"));
  assert.equal(refused.ok, false, "a content script (the page's side) may not ask for originals");
});
