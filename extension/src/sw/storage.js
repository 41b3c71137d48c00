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

/** RootGuard's stored record {profile, trueValues, state, events}, or undefined. */
export async function loadRootguard(ext) {
  const { rootguard } = await ext.storage.local.get("rootguard");
  return rootguard;
}

export function saveRootguard(ext, record) {
  return ext.storage.local.set({ rootguard: record });
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
