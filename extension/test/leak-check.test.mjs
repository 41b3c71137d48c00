// The network guard's test of a request body: does it carry the unprotected draft?
import assert from "node:assert/strict";
import { test } from "node:test";

import { bodyText, decodings, LeakIndex, MIN_WHOLE, RUN, squeeze } from "../src/leak-check.js";

const DRAFT = "Patient Maria Keller was admitted on Tuesday with chest pain.\nPlease summarise her discharge letter.";
const PROTECTED = "Restore this text: Pbtiqnt Mzria Keler was admi+ted oX Tuesdby with chesS pain. Plxase sumUarise hur discharge lettAr.";

function leaks(body, { drafts = [DRAFT], approved = [] } = {}) {
  return new LeakIndex(drafts.map((text) => ({ text })), approved).find(body);
}

test("the draft is found however the body encodes it", () => {
  const bodies = [
    DRAFT,
    JSON.stringify({ prompt: DRAFT }),
    JSON.stringify({ outer: JSON.stringify({ prompt: DRAFT }) }), // JSON inside JSON
    JSON.stringify({ prompt: DRAFT }).replace(/[a-z]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`),
    new URLSearchParams({ q: DRAFT }).toString(), // + for space
    `q=${encodeURIComponent(DRAFT)}`,
    `f.req=${encodeURIComponent(JSON.stringify([[JSON.stringify([DRAFT])]]))}`, // Gemini-style
    DRAFT.replace(/\s+/g, "   \n\t"),
    `<p>${DRAFT.replace(/ /g, "&nbsp;").replace(/\n/g, "</p><p>")}</p>`,
  ];
  for (const body of bodies) assert.ok(leaks(body), `not found in ${body.slice(0, 80)}`);
  // A percent-encoded field inside a body that has spaces elsewhere.
  const mixed = JSON.stringify({ note: "an ordinary sentence with spaces", link: `https://x.example/?q=${encodeURIComponent(DRAFT)}` });
  assert.ok(leaks(mixed));
  const long = "internationalization of hospitalisation records for the counterrevolutionaries";
  assert.ok(leaks(`{"a": "b c", "q": "${encodeURIComponent(long)}"}`, { drafts: [long] }));
});

test("a protected prompt's random characters do not make the body look percent-encoded", () => {
  const body = JSON.stringify({ text: "Pat%4Ant Mar!a Kel+er wa% a&mitted on Tu%2sday" });
  assert.deepEqual(decodings(body).filter((d) => d.includes("Pat") && !d.includes("%4A")), []);
});

test("a run of RUN characters of the draft is enough; shorter common runs are not", () => {
  const part = squeeze(DRAFT).slice(30, 30 + RUN);
  assert.ok(leaks(`{"title": "${part}"}`));
  assert.equal(leaks(`{"title": "${part.slice(1)}"}`), null);
  const ordinary = [
    '{"event":"typing","length":97,"ts":1700000000}',
    "content-type=application/json&locale=en-US",
    '{"text":"the patient was admitted"}',
    "",
  ];
  for (const body of ordinary) assert.equal(leaks(body), null, body);
});

test("what Veil approved may go out; the draft beyond it may not", () => {
  assert.equal(leaks(JSON.stringify({ prompt: PROTECTED }), { approved: [PROTECTED] }), null);
  assert.ok(leaks(JSON.stringify({ prompt: DRAFT }), { approved: [PROTECTED] }));
  // Numbers mode: the approved text keeps most of the draft; the original value still leaks.
  const draft = "My account number is 4412 9981 and my PIN is 3321, please help me with the bank.";
  const sent = "My account number is 5230 1177 and my PIN is 3321, please help me with the bank.";
  assert.equal(leaks(sent, { drafts: [draft], approved: [sent] }), null);
  assert.ok(leaks(draft, { drafts: [draft], approved: [sent] }));
  // "Send unprotected", chosen by the person, approves the original itself.
  assert.equal(leaks(DRAFT, { approved: [DRAFT] }), null);
});

test("a short draft leaks only whole; a very short one is not guarded", () => {
  assert.ok(leaks("q=hello%20there", { drafts: ["hello there"] }));
  assert.equal(leaks("q=hello", { drafts: ["hello there"] }), null);
  assert.equal(leaks("ok", { drafts: ["ok"] }), null);
  assert.equal(new LeakIndex([{ text: "x".repeat(MIN_WHOLE - 1) }], []).empty, true);
});

test("decodings stop at ten versions and keep the raw text first", () => {
  const d = decodings("a%20b\\n&amp;+");
  assert.equal(d[0], "a%20b\\n&amp;+");
  assert.ok(d.length <= 10);
  assert.ok(d.includes("a b\\n&amp; "));
});

test("bodies: strings, params, FormData and bytes now; blobs and files after reading; streams are opaque", async () => {
  assert.equal(bodyText("x").text, "x");
  assert.equal(bodyText(new URLSearchParams({ a: "b c" })).text, "a=b+c");
  const form = new FormData();
  form.append("prompt", DRAFT);
  assert.ok(bodyText(form).text.includes(DRAFT));
  assert.equal(bodyText(new TextEncoder().encode(DRAFT)).text, DRAFT);
  assert.equal(bodyText(new TextEncoder().encode(DRAFT).buffer).text, DRAFT);
  assert.equal((await bodyText(new Blob([DRAFT])).pending).text, DRAFT);
  const withFile = new FormData();
  withFile.append("file", new Blob([DRAFT]), "note.txt");
  assert.ok((await bodyText(withFile).pending).text.includes(DRAFT));
  const gz = new Uint8Array(await new Response(new Blob([DRAFT]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer());
  assert.equal((await bodyText(gz).pending).text, DRAFT);
  assert.equal(bodyText(new ReadableStream()).opaque, "a streamed body");
  assert.equal(bodyText(null).text, "");
});

test("a 100 KB body is checked against a 20,000-character draft", () => {
  const words = "the patient reported mild pain in the left knee after walking for about twenty minutes".split(" ");
  let draft = "";
  for (let i = 0; draft.length < 20000; i++) draft += words[(i * 7) % words.length] + (i % 5 ? " " : ". ");
  const index = new LeakIndex([{ text: draft }], []);
  const body = JSON.stringify({ items: Array.from({ length: 3500 }, (_, i) => ({ id: i, v: "ordinary value " + i })) });
  assert.ok(body.length > 90000);
  assert.equal(index.find(body), null);
  assert.ok(index.find(body + JSON.stringify(draft.slice(5000, 5100))));
});
