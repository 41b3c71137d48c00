// The history store: one small index per site and one key per send (the
// layout is in settings.js), so a send never rewrites the whole history.

import { Op } from "../core-ops.js";
import { entryKey, historyKey } from "../settings.js";
import { callCore } from "./core-client.js";
import { STORAGE_LOCK } from "./storage.js";

/** Store one send; drops the oldest beyond `limit`. Returns the entry's id. */
export function appendHistory(ext, siteId, entry, limit) {
  return ext.withLock(STORAGE_LOCK, async () => {
    const key = historyKey(siteId);
    const { [key]: index = [] } = await ext.storage.local.get(key);
    const full = { id: crypto.randomUUID(), ts: Date.now(), siteId, ...entry };
    index.push({ id: full.id, ts: full.ts, status: full.status, epsilon: full.epsilon, mode: full.mode, length: full.original.length });
    const dropped = index.length > limit ? index.splice(0, index.length - limit) : [];
    await ext.storage.local.set({ [key]: index, [entryKey(full.id)]: full });
    if (dropped.length) await ext.storage.local.remove(dropped.map((e) => entryKey(e.id)));
    return full.id;
  });
}

/**
 * Finish a receipt after the send: the tight composed ε is exact but slow
 * (most of a sanitization's time), so it is computed once the prompt is gone.
 */
export async function finishReceipt(ext, id, receipt, timeoutMs) {
  if (!receipt || receipt.epsilon_total_composed !== null) return;
  const { epsilon_total_composed } = await callCore(
    ext,
    Op.COMPOSED_EPSILON,
    { n: receipt.chars_perturbed, epsilon: receipt.epsilon_per_char, delta: receipt.delta, slots: receipt.slots },
    timeoutMs,
  );
  await ext.withLock(STORAGE_LOCK, async () => {
    const key = entryKey(id);
    const { [key]: entry } = await ext.storage.local.get(key);
    if (!entry?.receipt) return;
    entry.receipt.epsilon_total_composed = epsilon_total_composed;
    await ext.storage.local.set({ [key]: entry });
  });
}

/**
 * Mark entry `id` of `siteId` withdrawn (a send that did not happen) and
 * return it as it was, or null when it is not a protected send of that site
 * made in the last `maxAgeMs`.
 */
export function withdrawEntry(ext, siteId, id, notice, maxAgeMs = 120000) {
  return ext.withLock(STORAGE_LOCK, async () => {
    const key = entryKey(id);
    const { [key]: entry, [historyKey(siteId)]: index = [] } = await ext.storage.local.get([key, historyKey(siteId)]);
    if (!entry || entry.siteId !== siteId || entry.status !== "protected" || Date.now() - entry.ts > maxAgeMs) return null;
    const row = index.find((e) => e.id === id);
    if (row) row.status = "withdrawn";
    const { memoSentHere: _dropped, ...kept } = entry;
    await ext.storage.local.set({ [key]: { ...kept, status: "withdrawn", notice, withdrawnAt: Date.now() }, [historyKey(siteId)]: index });
    return entry;
  });
}

/** Keep the site's reply with entry `id` (a protected send of `siteId` in the last `maxAgeMs`). */
export function saveReply(ext, siteId, id, text, maxAgeMs = 600000) {
  return ext.withLock(STORAGE_LOCK, async () => {
    const key = entryKey(id);
    const { [key]: entry } = await ext.storage.local.get(key);
    if (!entry || entry.siteId !== siteId || entry.status !== "protected" || Date.now() - entry.ts > maxAgeMs) return false;
    await ext.storage.local.set({ [key]: { ...entry, reply: { text: text.slice(0, 50000), ts: Date.now() } } });
    return true;
  });
}

/** A site's full entries, oldest first. */
export async function readHistory(ext, siteId) {
  const key = historyKey(siteId);
  const { [key]: index = [] } = await ext.storage.local.get(key);
  const entries = await ext.storage.local.get(index.map((e) => entryKey(e.id)));
  return index.map((e) => entries[entryKey(e.id)] || { ...e, original: "(missing)", sent: null });
}

/** {siteId: index} for each of `siteIds` (an empty index for a site without history). */
export async function readIndexes(ext, siteIds) {
  const stored = await ext.storage.local.get(siteIds.map(historyKey));
  return Object.fromEntries(siteIds.map((id) => [id, stored[historyKey(id)] || []]));
}

/** Delete the history of `siteIds`: their indexes and every entry. */
export function clearHistory(ext, siteIds) {
  return ext.withLock(STORAGE_LOCK, async () => {
    const indexes = await ext.storage.local.get(siteIds.map(historyKey));
    const entries = Object.values(indexes).flatMap((index) => index.map((e) => entryKey(e.id)));
    await ext.storage.local.remove([...siteIds.map(historyKey), ...entries]);
  });
}
