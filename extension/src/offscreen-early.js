// Runs first in the offscreen document (a classic script): starts the core's
// module worker (core-worker.js, which boots Pyodide off this page's main
// thread) and tells it whether IndexedDB holds a memory snapshot of this build
// -- the flag is in localStorage, which a worker cannot read. offscreen.js
// picks the worker up from __veilEarly and relays core calls and status.

import { BUILD_ID, SNAPSHOT_FLAG } from "./snapshot-store.js";

const early = { startedAt: performance.timeOrigin + performance.now() };
early.worker = new Worker("core-worker.js", { type: "module" });
early.worker.postMessage({ type: "boot", hasSnapshot: localStorage.getItem(SNAPSHOT_FLAG) === BUILD_ID, startedAt: early.startedAt });
globalThis.__veilEarly = early;
