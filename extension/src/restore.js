// The reply in the person's words (issue 27, point 1): a chat model answers
// about the protected text, so its reply repeats the draws Veil released
// ("|argl'@=" for "Lovelace") and RootGuard's noisy values ("66" for 52).
// Veil knows every draw it sent to a site (the word memo) and every value it
// replaced (the history), so it can map the reply back -- in Veil's side panel
// only: nothing restored is ever written into the site's page.
//
// restoreReply cuts the reply into segments: plain text, a draw sent back
// exactly ("word"), a close match to a draw -- the model half-restored it
// ("close") -- and a RootGuard value ("value").

const ALNUM = /[\p{L}\p{N}]/u;
const TOKEN = /[\p{L}\p{N}]{4,}/gu;

/**
 * @typedef {{kind: "plain", text: string}
 *   | {kind: "word" | "close", text: string, original: string, sent: string}
 *   | {kind: "value", text: string, original: string, sent: string}} Segment
 * @typedef {{draws: Array<[string, string]>, values: Array<[string, string]>}} Known
 *   draws: [sent, word] for each draw released to the site; values: [noisy, true] for each RootGuard replacement
 */

/** Edit distance of `a` and `b`, or Infinity once it is over `max`. @param {string} a @param {string} b @param {number} max */
export function editDistance(a, b, max) {
  if (Math.abs(a.length - b.length) > max) return Infinity;
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      best = Math.min(best, row[j]);
    }
    if (best > max) return Infinity;
    prev = row;
  }
  return prev[b.length] <= max ? prev[b.length] : Infinity;
}

const DIGIT = /\d/;

/**
 * The occurrence at `at` of `pattern` stands alone: no letter or digit glued to
 * an edge that is one (and a number is not part of a longer one: "6.66", "1,66").
 * @param {string} text @param {number} at @param {string} pattern @param {boolean} number
 */
function standsAlone(text, at, pattern, number) {
  const before = text[at - 1];
  const after = text[at + pattern.length];
  // A long draw (random characters) is itself the evidence; a short one must stand apart.
  if (!number && pattern.length >= 6) return true;
  if (ALNUM.test(pattern[0]) && before !== undefined && ALNUM.test(before)) return false;
  if (ALNUM.test(pattern[pattern.length - 1]) && after !== undefined && ALNUM.test(after)) return false;
  if (number && /[.,]/.test(before ?? "") && DIGIT.test(text[at - 2] ?? "")) return false;
  if (number && /[.,]/.test(after ?? "") && DIGIT.test(text[at + pattern.length + 1] ?? "")) return false;
  return true;
}

/**
 * The reply cut into segments (see the top of this file).
 * @param {string} text the reply as the page shows it
 * @param {Known} known
 * @returns {Segment[]}
 */
export function restoreReply(text, { draws, values }) {
  /** @type {Array<{sent: string, original: string, kind: "word" | "value"}>} */
  const patterns = [];
  for (const [sent, word] of draws) {
    // A draw of one or two characters (punctuation, a short word) would match everywhere.
    if (sent.length >= 3 && sent !== word && ALNUM.test(word)) patterns.push({ sent, original: word, kind: "word" });
  }
  for (const [noisy, original] of values) if (noisy && noisy !== original) patterns.push({ sent: noisy, original, kind: "value" });
  patterns.sort((a, b) => b.sent.length - a.sent.length);
  /** @type {Array<{start: number, end: number, seg: Segment}>} */
  const found = [];
  const taken = new Uint8Array(text.length);
  for (const p of patterns) {
    for (let at = text.indexOf(p.sent); at !== -1; at = text.indexOf(p.sent, at + 1)) {
      const end = at + p.sent.length;
      if (taken.subarray(at, end).some(Boolean) || !standsAlone(text, at, p.sent, p.kind === "value")) continue;
      taken.fill(1, at, end);
      const shown = p.kind === "value" ? `${p.sent} — yours: ${p.original}` : p.original;
      found.push({ start: at, end, seg: { kind: p.kind, text: shown, original: p.original, sent: p.sent } });
    }
  }
  // Half-restored words: a token of four or more letters a step or two from a draw.
  const words = draws.filter(([sent, word]) => sent !== word && /^[\p{L}\p{N}]{4,}$/u.test(word));
  const own = new Set(draws.map(([, word]) => word.toLowerCase()));
  for (const match of text.matchAll(TOKEN)) {
    const at = match.index ?? 0;
    const token = match[0];
    if (taken.subarray(at, at + token.length).some(Boolean) || own.has(token.toLowerCase())) continue;
    let best = null;
    let bestDistance = Infinity;
    for (const [sent, word] of words) {
      const max = word.length >= 7 ? 2 : 1;
      const d = Math.min(editDistance(token.toLowerCase(), sent.toLowerCase(), max), editDistance(token.toLowerCase(), word.toLowerCase(), max));
      if (d < bestDistance) [best, bestDistance] = [[sent, word], d];
    }
    if (!best) continue;
    taken.fill(1, at, at + token.length);
    found.push({ start: at, end: at + token.length, seg: { kind: "close", text: best[1], original: best[1], sent: token } });
  }
  found.sort((a, b) => a.start - b.start);
  /** @type {Segment[]} */
  const out = [];
  let cursor = 0;
  for (const f of found) {
    if (f.start > cursor) out.push({ kind: "plain", text: text.slice(cursor, f.start) });
    out.push(f.seg);
    cursor = f.end;
  }
  if (cursor < text.length) out.push({ kind: "plain", text: text.slice(cursor) });
  return out;
}
