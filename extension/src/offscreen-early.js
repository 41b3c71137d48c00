// Runs first in the offscreen document (a classic script, before the module
// graph with Pyodide's 1.2 MB of JavaScript is loaded): starts reading the
// memory snapshot from IndexedDB and the py_core bundle, so that I/O overlaps
// the module loading. offscreen.js picks the promises up from __veilEarly.

import { BUILD_ID, SNAPSHOT_FLAG, snapshots } from "./snapshot-store.js";

const early = { startedAt: performance.now() };
early.zip = fetch("python/veil_core.zip").then((response) => {
  if (!response.ok) throw new Error(`could not read python/veil_core.zip: HTTP ${response.status}`);
  return response.arrayBuffer().then((buf) => new Uint8Array(buf));
});
early.zip.catch(() => {}); // handled where it is awaited
if (localStorage.getItem(SNAPSHOT_FLAG) === BUILD_ID) {
  early.snapshot = snapshots.get();
  early.snapshot.catch(() => {});
}
globalThis.__veilEarly = early;
