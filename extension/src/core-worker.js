// The core's module worker, started by the offscreen document (offscreen-early.js):
// boots Pyodide with py_core and answers core calls, off the offscreen page's main
// thread -- every page of the extension shares that renderer and its main thread,
// so a cold boot there (seconds of WebAssembly compile and CPython start) froze the
// popup and could not even paint its progress. The page relays: core calls and
// replies, the status the worker reports, and the snapshot flag (localStorage is
// not available in a worker).
//
// Boot, fastest path first:
//   1. a memory snapshot of an already-booted interpreter (py_core imported),
//      made on this machine at the first boot and kept in IndexedDB under this
//      build's id -- restoring it skips CPython's start-up and the imports;
//   2. otherwise a cold boot, after which the snapshot is made for next time.
// A snapshot that fails to restore is deleted and the cold path runs.

import { FILE_OPS, Op } from "./core-ops.js";
// @ts-expect-error -- build.mjs copies Pyodide's runtime here (external to the bundle)
import createPyodideModule from "./pyodide/pyodide.asm.mjs";
// @ts-expect-error -- as above
import { loadPyodide } from "./pyodide/pyodide.mjs";
import { packSnapshot, snapshots, unpackSnapshot } from "./snapshot-store.js";

const INDEX_URL = new URL("./pyodide/", import.meta.url).href;
const CORE_ZIP = new URL("./python/veil_core.zip", import.meta.url).href;
const T0 = performance.now();
// ms since the worker started: when this module ran.
const phases = { workerModuleAt: Math.round(T0) };
const mark = (name) => {
  phases[name] = Math.round(performance.now() - T0);
};

async function unpackCore(pyodide, zipBytes) {
  pyodide.unpackArchive(zipBytes, "zip", { extractDir: "/veil" });
}

async function fetchBytes(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`could not read ${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

const quiet = { stdout: () => {}, stderr: (line) => console.warn("[pyodide]", line) };

async function bootFromSnapshot(snapshot, zipPromise) {
  const pyodide = await loadPyodide({
    indexURL: INDEX_URL,
    createPyodideModule,
    _loadSnapshot: snapshot,
    ...quiet,
  });
  mark("pyodideLoaded");
  const bridge = pyodide.pyimport("veil_bridge");
  bridge.reseed();
  // The files are not part of a memory snapshot; put them back for tracebacks,
  // any lazy import and the data files read on first use (the word-frequency
  // table and calibration of py_core.preview), without holding up readiness:
  // the ops that read files wait for them (FILE_OPS).
  const files = zipPromise.then((bytes) => unpackCore(pyodide, bytes));
  files.catch(() => {});
  return { pyodide, handle: bridge.handle, files };
}

async function bootCold(zipPromise) {
  const pyodide = await loadPyodide({
    indexURL: INDEX_URL,
    createPyodideModule,
    _makeSnapshot: true,
    ...quiet,
  });
  mark("pyodideLoaded");
  await unpackCore(pyodide, await zipPromise);
  mark("coreUnpacked");
  pyodide.runPython("import sys\nif '/veil' not in sys.path: sys.path.insert(0, '/veil')\nimport veil_bridge");
  mark("coreImported");
  let snapshot = null;
  let snapshotError = null;
  try {
    snapshot = pyodide.makeMemorySnapshot();
  } catch (err) {
    snapshotError = String(err?.message || err);
  }
  mark("snapshotMade");
  const bridge = pyodide.pyimport("veil_bridge");
  return { pyodide, handle: bridge.handle, snapshot, snapshotError, files: Promise.resolve() };
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** To the page, which sends it on as core-status. */
function report(data) {
  postMessage({ type: "status", status: { worker: true, ...data } });
}

const BOOT_TIMEOUT_MS = 60000; // loadPyodide can hang forever (e.g. a CSP problem); never wait on it unbounded

/** While it boots, the core says what it is doing (the popup shows it, with the time so far). @param {string} step */
function progress(step) {
  report({ state: "booting", step, documentStartedAt: performance.timeOrigin });
}

/** @param {{hasSnapshot: boolean, startedAt: number}} start */
async function boot(start) {
  const t0 = T0;
  phases.workerStartedAfter = Math.round(performance.timeOrigin - start.startedAt);
  progress("starting Pyodide");
  const zipPromise = fetchBytes(CORE_ZIP);
  let core = null;
  let fromSnapshot = false;
  let snapshotProblem = null;
  if (start.hasSnapshot) {
    const packedPromise = snapshots.get();
    const snapshot = packedPromise.then((packed) => {
      mark("snapshotRead");
      if (!packed) throw new Error("the snapshot is missing from IndexedDB");
      const bytes = unpackSnapshot(packed);
      mark("snapshotUnpacked");
      return bytes;
    });
    try {
      progress("restoring its snapshot");
      core = await withTimeout(bootFromSnapshot(snapshot, zipPromise), BOOT_TIMEOUT_MS, "Pyodide (snapshot)");
      fromSnapshot = true;
    } catch (err) {
      snapshotProblem = String(err?.message || err);
      postMessage({ type: "snapshot-flag", set: false });
      await snapshots.drop();
    }
  }
  if (!core) {
    progress("loading Pyodide and Veil's Python code (first start: a snapshot is kept for the next)");
    core = await withTimeout(bootCold(zipPromise), BOOT_TIMEOUT_MS, "Pyodide");
  }
  const ping = JSON.parse(core.handle(JSON.stringify({ op: Op.PING, args: {} })));
  mark("selfCheck");
  if (!ping.ok) throw new Error(`core self-check failed: ${ping.error.message}`);
  const ms = performance.now() - t0;
  const status = {
    state: "ready",
    ms,
    readyAt: performance.timeOrigin + performance.now(),
    documentStartedAt: performance.timeOrigin,
    fromSnapshot,
    python: ping.result.python,
    rootguard: ping.result.rootguard,
    snapshot: fromSnapshot ? "restored" : core.snapshotError ? `not made: ${core.snapshotError}` : "pending",
    snapshotProblem,
    phases,
  };
  report(status);
  if (core.snapshot) {
    const bytes = core.snapshot;
    core.snapshot = null;
    const packed = packSnapshot(bytes);
    const stored = packed.chunks.reduce((n, c) => n + c.bytes.length, 0);
    snapshots
      .put(packed)
      .then(() => postMessage({ type: "snapshot-flag", set: true }))
      .then(() => report({ ...status, snapshot: `stored (${(stored / 1e6).toFixed(1)} of ${(bytes.length / 1e6).toFixed(1)} MB)` }))
      .catch((err) => report({ ...status, snapshot: `not stored: ${err?.message || err}` }));
  }
  return core;
}

let ready = null;

/** A core call from the page: the op's envelope back, with its time inside Python. */
async function call(id, op, args) {
  try {
    const core = await ready;
    if (FILE_OPS.has(op)) await withTimeout(core.files, BOOT_TIMEOUT_MS, "unpacking py_core's files");
    const started = performance.now();
    const reply = JSON.parse(core.handle(JSON.stringify({ op, args: args || {} })));
    const ms = performance.now() - started;
    postMessage({ type: "reply", id, reply: reply.ok ? { ok: true, data: reply.result, ms } : { ok: false, error: reply.error, ms } });
  } catch (err) {
    postMessage({ type: "reply", id, unavailable: String(err?.message || err) });
  }
}

addEventListener("message", (event) => {
  const msg = event.data || {};
  if (msg.type === "boot" && !ready) {
    ready = boot(msg);
    ready.catch((err) => report({ state: "error", error: String(err?.message || err) }));
  } else if (msg.type === "call") {
    if (!ready) postMessage({ type: "reply", id: msg.id, unavailable: "the core was asked before it was started" });
    else call(msg.id, msg.op, msg.args);
  }
});
