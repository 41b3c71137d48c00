// The page's notice for a protected send (sw/handlers.js protectNotice): the
// total ε of the prompt, what this send newly spent, and "sent as before" only
// for words already sent to this site (sw/memo.js wordsSentBefore).
import assert from "node:assert/strict";
import { test } from "node:test";

import { protectNotice } from "../src/sw/handlers.js";
import { wordsSentBefore } from "../src/sw/memo.js";

const receipt = (extra = {}) => ({ epsilon_per_char: 5, chars_perturbed: 38, epsilon_total_basic: 190, memo: false, ...extra });

test("the notice gives ε per character and the total ε of the send", () => {
  const notice = protectNotice(receipt(), [], 0);
  assert.equal(notice, "Veil protected this prompt: ε = 5.00 per character, 38 characters, total ε 190.0 (basic composition)");
});

test("the notice says sent as before only when words were sent to this site before", () => {
  const notice = protectNotice(receipt({ memo: true, epsilon_fresh_basic: 0 }), [], 2);
  assert.match(notice, /total ε 190\.0 \(basic composition\); 2 words sent as before to this site: nothing new revealed$/);
  assert.doesNotMatch(protectNotice(receipt({ memo: true, epsilon_fresh_basic: 0 }), [], 0), /sent as before/);
  assert.match(protectNotice(receipt(), [{ name: "age" }], 1), /; 1 word sent as before to this site: nothing new revealed; 1 value from RootGuard's cache$/);
  // A receipt without the total (an old core) still gets its notice.
  assert.equal(protectNotice({ epsilon_per_char: 5, chars_perturbed: 1 }, [], 0), "Veil protected this prompt: ε = 5.00 per character, 1 character");
});

test("only draws already sent to this site count as sent before (not a preview's, not another site's)", () => {
  const v = (sites, epsilon = 5) => ({ alphabets: "scripts", marks: false, epsilon, sent: "x", sites });
  const stored = {
    Keller: [v(["chatgpt"])], // sent here
    Maria: [v([])], // only previewed
    admitted: [v(["claude"])], // sent to another site
    chest: [v(["chatgpt"], 2)], // sent here, at another ε
  };
  const seen = [
    { word: "Keller", alphabets: "scripts", marks: false, epsilon: 5.0, first: false },
    { word: "Keller", alphabets: "scripts", marks: false, epsilon: 5.0, first: false },
    { word: "Maria", alphabets: "scripts", marks: false, epsilon: 5.0, first: true },
    { word: "admitted", alphabets: "scripts", marks: false, epsilon: 5.0, first: false },
    { word: "chest", alphabets: "scripts", marks: false, epsilon: 5.0, first: true },
    { word: "pain", alphabets: "scripts", marks: false, epsilon: 5.0, first: true },
  ];
  assert.equal(wordsSentBefore(stored, seen, "chatgpt"), 1);
  assert.equal(wordsSentBefore(stored, seen, "claude"), 1);
  assert.equal(wordsSentBefore(stored, seen, "gemini"), 0);
  assert.equal(wordsSentBefore({}, undefined, "chatgpt"), 0);
});
