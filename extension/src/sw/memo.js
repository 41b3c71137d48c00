// The word memo and the lifetime ledger in chrome.storage.local (py_core/memo.py
// says what they are and decides everything; this module only stores).
//
//   memo:<word>   -> [variant]: each {alphabets, marks, epsilon, sent, slots,
//                    sites: [siteId...], ts}; one per setting the word was drawn at
//   memoUnsent    -> [word...]: words with a variant only shown in a preview, oldest first
//   memoLedger    -> {total: ledger, sites: {siteId: ledger}} (py_core.memo.ledger_add)
//   memoEvents    -> [{ts, event, reason, words}]: every reset, with why
//
// Every read-call-store runs under MEMO_LOCK, so two tabs can never draw one
// word twice. The ledger is never cleared: a reset of the memo forgets the
// draws, not that they were released.

export const MEMO_LOCK = "veil-memo";
export const MEMO_PREFIX = "memo:";
/** Draws shown in previews and never sent are kept up to this many words (oldest dropped). */
export const UNSENT_LIMIT = 5000;

// py_core.krr.WORD: runs of anything but the six ASCII whitespace characters;
// py_core.memo.UNIT: inside a word, runs of letters and digits or of anything else.
const WORD = /[^ \t\n\r\v\f]+/g;
const UNIT = /[\p{L}\p{N}]+|[^\p{L}\p{N}]+/gu;

/**
 * The memo units of `text` ("Lovelace," gives "Lovelace" and ","), as py_core
 * cuts them. Where the two Unicode tables differ, or RootGuard's replacements
 * cut a word, the worker's retry (withMemo) looks the missed unit up.
 */
export function wordsOf(text) {
  const units = new Set();
  for (const word of String(text).match(WORD) || []) for (const unit of word.match(UNIT)) units.add(unit);
  return [...units];
}

const keyOf = (word) => MEMO_PREFIX + word;
// One variant per (alphabets, Latin mark slot, ε); ε compared as a number (Python writes 5.0).
const variantKey = (v) => `${v.alphabets}|${v.marks ? 1 : 0}|${Number(v.epsilon)}`;

/**
 * How many distinct words of a send (`seen`: the core's memoSeen) went out as a
 * draw already sent to `siteId` -- in `stored` ({word: [variant]}, as loaded
 * before the send). A draw only shown in a preview, or sent to other sites
 * only, is new to this site and does not count.
 */
export function wordsSentBefore(stored, seen, siteId) {
  const words = new Set();
  for (const s of seen || []) {
    const variant = (stored[s.word] || []).find((v) => variantKey(v) === variantKey(s));
    if (variant && (variant.sites || []).includes(siteId)) words.add(s.word);
  }
  return words.size;
}

/** [sent, word] for every draw the memo holds that was sent to `siteId` (not a preview's). */
export async function drawsSentTo(ext, siteId) {
  const all = await ext.storage.local.get(null);
  const out = [];
  for (const [key, variants] of Object.entries(all)) {
    if (!key.startsWith(MEMO_PREFIX) || !Array.isArray(variants)) continue;
    for (const v of variants) if (typeof v.sent === "string" && (v.sites || []).includes(siteId)) out.push([v.sent, key.slice(MEMO_PREFIX.length)]);
  }
  return out;
}

/** {word: [variant]} stored for `words`. */
export async function loadVariants(ext, words) {
  if (!words.length) return {};
  const stored = await ext.storage.local.get(words.map(keyOf));
  const out = {};
  for (const word of words) {
    const variants = stored[keyOf(word)];
    if (variants) out[word] = variants;
  }
  return out;
}

export async function loadLedger(ext) {
  const { memoLedger } = await ext.storage.local.get("memoLedger");
  return memoLedger || { total: null, sites: {} };
}

/**
 * Run `call(memo)` (a core op given the stored variants of `text`'s words) under
 * the memo lock and store what it drew. A word the core drew although a variant
 * was stored (a fragment left by RootGuard's replacements that is not a whole
 * typed word) makes it run once more with those variants: the first draw is
 * discarded unseen, so a stored word is never re-drawn.
 */
export function withMemo(ext, text, call, { siteId = null, save = null } = {}) {
  return ext.withLock(MEMO_LOCK, async () => {
    const memo = await loadVariants(ext, wordsOf(text));
    const ledger = await loadLedger(ext);
    let result = await call(memo, ledger);
    let clashes = await redrawn(ext, memo, result);
    if (clashes.length) {
      result = await call(memo, ledger);
      clashes = await redrawn(ext, memo, result);
      // Given every stored variant, a core that still draws one is broken: fail closed.
      if (clashes.length) throw new Error(`the core drew ${clashes.length} word(s) again that were already released; nothing was sent`);
    }
    // A caller's own stores (RootGuard's state) happen before the memo is written.
    if (save) await save(result);
    const sentHere = await storeReleases(ext, memo, ledger, result, siteId);
    return siteId ? Object.assign(result, { memoSentHere: sentHere }) : result;
  });
}

/** The words `result` drew although a variant at that setting is stored; adds them to `memo`. */
async function redrawn(ext, memo, result) {
  const added = result.memoAdded || [];
  Object.assign(memo, await loadVariants(ext, added.map((r) => r.word).filter((w) => !(w in memo))));
  return added.filter((r) => (memo[r.word] || []).some((v) => variantKey(v) === variantKey(r.variant)));
}

/** Store the send's draws; returns [word, variantKey] of every draw newly marked sent to `siteId`. */
async function storeReleases(ext, memo, ledger, result, siteId) {
  /** @type {[string, string][]} */
  const sentHere = [];
  if (!result.memoAdded?.length && !result.memoSeen?.length && !result.ledgerTotal) return sentHere;
  const now = Date.now();
  const changed = {};
  const variantsOf = (word) => (changed[word] ??= (memo[word] || []).map((v) => ({ ...v, sites: [...(v.sites || [])] })));
  for (const { word, variant } of result.memoAdded || []) {
    variantsOf(word).push({ ...variant, sites: siteId ? [siteId] : [], ts: now });
    if (siteId) sentHere.push([word, variantKey(variant)]);
  }
  for (const seen of result.memoSeen || []) {
    const variant = variantsOf(seen.word).find((v) => variantKey(v) === variantKey(seen));
    if (variant && siteId && !variant.sites.includes(siteId)) {
      variant.sites.push(siteId);
      sentHere.push([seen.word, variantKey(seen)]);
    }
  }
  const items = Object.fromEntries(Object.entries(changed).map(([word, variants]) => [keyOf(word), variants]));
  const { memoUnsent = [] } = await ext.storage.local.get("memoUnsent");
  const unsent = new Set(memoUnsent);
  for (const [word, variants] of Object.entries(changed)) {
    if (variants.some((v) => !v.sites.length)) unsent.add(word);
    else unsent.delete(word);
  }
  const order = [...unsent];
  const dropped = order.length > UNSENT_LIMIT ? order.splice(0, order.length - UNSENT_LIMIT) : [];
  items.memoUnsent = order;
  if (result.ledgerTotal && siteId) {
    items.memoLedger = { total: result.ledgerTotal, sites: { ...ledger.sites, [siteId]: result.ledgerSite } };
  }
  await ext.storage.local.set(items);
  if (dropped.length) await dropUnsent(ext, dropped);
  return sentHere;
}

/**
 * A send that did not happen (the replayed Enter made a new line): its draws
 * stop counting as sent to `siteId` -- each keeps its draw (the next send of
 * the word sends it, so nothing is drawn twice) but loses the site, as a
 * preview's draw. The lifetime ledger keeps the release: the protected text
 * was written into the page's box, where the page's own scripts could read it.
 * @param {[string, string][]} sentHere what storeReleases returned for that send
 * @returns {Promise<number>} how many words no longer count as sent there
 */
export function unsendDraws(ext, siteId, sentHere) {
  return ext.withLock(MEMO_LOCK, async () => {
    const words = [...new Set((sentHere || []).map(([word]) => word))];
    if (!words.length) return 0;
    const stored = await ext.storage.local.get(words.map(keyOf));
    const items = {};
    const unsent = [];
    const touched = new Set();
    for (const [word, key] of sentHere) {
      const variants = (items[keyOf(word)] ??= (stored[keyOf(word)] || []).map((v) => ({ ...v, sites: [...(v.sites || [])] })));
      const variant = variants.find((v) => variantKey(v) === key);
      if (!variant || !variant.sites.includes(siteId)) continue;
      variant.sites = variant.sites.filter((s) => s !== siteId);
      touched.add(word);
      if (!variant.sites.length) unsent.push(word);
    }
    if (!touched.size) return 0;
    const { memoUnsent = [] } = await ext.storage.local.get("memoUnsent");
    items.memoUnsent = [...new Set([...memoUnsent, ...unsent])];
    await ext.storage.local.set(items);
    return touched.size;
  });
}

/** Forget the never-sent variants of `words` (previews only; sent draws stay). */
async function dropUnsent(ext, words) {
  const stored = await ext.storage.local.get(words.map(keyOf));
  const keep = {};
  const remove = [];
  for (const word of words) {
    const sent = (stored[keyOf(word)] || []).filter((v) => v.sites?.length);
    if (sent.length) keep[keyOf(word)] = sent;
    else remove.push(keyOf(word));
  }
  if (Object.keys(keep).length) await ext.storage.local.set(keep);
  if (remove.length) await ext.storage.local.remove(remove);
}

/** What the options page shows: counts, the newest entries, the resets. */
export async function memoView(ext, { limit = 200 } = {}) {
  const all = await ext.storage.local.get(null);
  const entries = [];
  for (const [key, variants] of Object.entries(all)) {
    if (!key.startsWith(MEMO_PREFIX)) continue;
    for (const v of variants) entries.push({ word: key.slice(MEMO_PREFIX.length), sent: v.sent, epsilon: v.epsilon, alphabets: v.alphabets, sites: v.sites || [], ts: v.ts || 0 });
  }
  entries.sort((a, b) => b.ts - a.ts);
  const words = new Set(entries.map((e) => e.word));
  return {
    words: words.size,
    variants: entries.length,
    unsent: entries.filter((e) => !e.sites.length).length,
    entries: entries.slice(0, limit),
    events: all.memoEvents || [],
    ledger: all.memoLedger || { total: null, sites: {} },
  };
}

/** Forget every draw (the next send of each word is a new release); logged. The ledger stays. */
export function resetMemo(ext, reason) {
  return ext.withLock(MEMO_LOCK, async () => {
    const all = await ext.storage.local.get(null);
    const keys = Object.keys(all).filter((k) => k.startsWith(MEMO_PREFIX));
    const events = [...(all.memoEvents || []), { ts: Date.now(), event: "reset", reason: String(reason || "reset by the person"), words: keys.length }];
    await ext.storage.local.remove([...keys, "memoUnsent"]);
    await ext.storage.local.set({ memoEvents: events });
    return { forgotten: keys.length, events };
  });
}
