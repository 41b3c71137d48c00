// Thin adapters around chrome.* so the logic above them reads plainly and can
// be swapped in tests without a browser.

export const local = {
  get: (keys) => chrome.storage.local.get(keys),
  set: (items) => chrome.storage.local.set(items),
  remove: (keys) => chrome.storage.local.remove(keys),
};

export const session = {
  get: (keys) => chrome.storage.session.get(keys),
  set: (items) => chrome.storage.session.set(items),
};

/** Run `fn` while holding a named Web Lock (serialises read-modify-write of storage). */
export function withLock(name, fn) {
  if (globalThis.navigator?.locks) return navigator.locks.request(name, fn);
  return fn();
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
