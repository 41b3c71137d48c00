// The worker's state in chrome.storage (the layout is in settings.js): the
// settings and RootGuard's record. Nothing is kept in memory between messages.

import { normalizeSettings } from "../settings.js";

// Web Lock names: one for settings and history, one for RootGuard's cache.
export const STORAGE_LOCK = "veil-storage";
export const ROOTGUARD_LOCK = "veil-rootguard";

export async function loadSettings(ext) {
  const { settings } = await ext.storage.local.get("settings");
  return normalizeSettings(settings);
}

/** Read, change (`mutate` may throw to refuse) and store the settings under the lock. */
export function updateSettings(ext, mutate) {
  return ext.withLock(STORAGE_LOCK, async () => {
    const settings = await loadSettings(ext);
    mutate(settings);
    await ext.storage.local.set({ settings });
    return settings;
  });
}

/** `obj` with its keys in `order` first (any others after, as they come). */
function inOrder(obj, order) {
  if (!obj || typeof obj !== "object" || Array.isArray(obj)) return obj;
  const out = {};
  for (const key of order) if (Object.hasOwn(obj, key)) out[key] = obj[key];
  for (const key of Object.keys(obj)) if (!Object.hasOwn(out, key)) out[key] = obj[key];
  return out;
}

/**
 * RootGuard's stored record {profile, trueValues, state, events}, or undefined.
 * chrome.storage hands an object's keys back sorted, so the record also keeps
 * `order`, the profile's values in the order the person entered them; the
 * profile and the true values are read back in that order (without `order`).
 */
export async function loadRootguard(ext) {
  const { rootguard } = await ext.storage.local.get("rootguard");
  if (!rootguard || !Array.isArray(rootguard.order)) return rootguard;
  const { order, ...record } = rootguard;
  const profile = record.profile ? { ...record.profile, values: inOrder(record.profile.values, order) } : record.profile;
  return { ...record, profile, trueValues: inOrder(record.trueValues, order) };
}

export function saveRootguard(ext, record) {
  return ext.storage.local.set({ rootguard: { ...record, order: Object.keys(record?.profile?.values || {}) } });
}

/** The `rootguard` argument of the core's sanitize and preview ops. */
export function rootguardArgs(stored) {
  return stored ? { profile: stored.profile, trueValues: stored.trueValues, state: stored.state } : null;
}

export async function loadCoreStatus(ext) {
  const { coreStatus } = await ext.storage.session.get("coreStatus");
  return coreStatus;
}

export function saveCoreStatus(ext, status) {
  return ext.storage.session.set({ coreStatus: { ...status, at: Date.now() } });
}
