// The offscreen document: boots Pyodide with py_core and answers core calls.
//
// Boot, fastest path first:
//   1. a memory snapshot of an already-booted interpreter (py_core imported),
//      made on this machine at the first boot and kept in IndexedDB under this
//      build's id -- restoring it skips CPython's start-up and the imports;
//   2. otherwise a cold boot, after which the snapshot is made for next time.
// A snapshot that fails to restore is deleted and the cold path runs.

import { ext } from "./chrome-api.js";
import { FILE_OPS, Op } from "./core-ops.js";
import { ErrorCode } from "./errors.js";
import { fail, message, Msg, Target } from "./messages.js";
// @ts-expect-error -- build.mjs copies Pyodide's runtime here (external to the bundle)
import createPyodideModule from "./pyodide/pyodide.asm.mjs";
// @ts-expect-error -- as above
import { loadPyodide } from "./pyodide/pyodide.mjs";
import { BUILD_ID, packSnapshot, SNAPSHOT_FLAG, snapshots, unpackSnapshot } from "./snapshot-store.js";

// Started by offscreen-early.js while this module and Pyodide's were loading.
const early = globalThis.__veilEarly || {};
const INDEX_URL = new URL("./pyodide/", import.meta.url).href;
const CORE_ZIP = new URL("./python/veil_core.zip", import.meta.url).href;
const T0 = performance.now();
// ms since the document started: when this module ran, and when the early script did.
const phases = { moduleAt: Math.round(T0), earlyAt: Math.round(globalThis.__veilEarly?.startedAt ?? -1) };
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
  pyodide.runPython("import sys\nif '/veil' not in sys.path: sys.path.insert(0, '/veil')\nimport veil_bridge");
  let snapshot = null;
  let snapshotError = null;
  try {
    snapshot = pyodide.makeMemorySnapshot();
  } catch (err) {
    snapshotError = String(err?.message || err);
  }
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

function report(data) {
  ext.runtime.send(message(Msg.CORE_STATUS, Target.BACKGROUND, data)).catch(() => {});
}

const BOOT_TIMEOUT_MS = 60000; // loadPyodide can hang forever (e.g. a CSP problem); never wait on it unbounded

/** While it boots, the core says what it is doing (the popup shows it, with the time so far). @param {string} step */
function progress(step) {
  report({ state: "booting", step, documentStartedAt: performance.timeOrigin });
}

async function boot() {
  const t0 = T0;
  progress("starting Pyodide");
  const zipPromise = early.zip || fetchBytes(CORE_ZIP);
  let core = null;
  let fromSnapshot = false;
  let snapshotProblem = null;
  if (localStorage.getItem(SNAPSHOT_FLAG) === BUILD_ID) {
    const packedPromise = early.snapshot || snapshots.get();
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
      localStorage.removeItem(SNAPSHOT_FLAG);
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
      .then(() => localStorage.setItem(SNAPSHOT_FLAG, BUILD_ID))
      .then(() => report({ ...status, snapshot: `stored (${(stored / 1e6).toFixed(1)} of ${(bytes.length / 1e6).toFixed(1)} MB)` }))
      .catch((err) => report({ ...status, snapshot: `not stored: ${err?.message || err}` }));
  }
  return core;
}

const ready = boot();
ready.catch((err) => report({ state: "error", error: String(err?.message || err) }));

ext.runtime.onMessage((msg, sender, sendResponse) => {
  if (!msg || msg.target !== Target.OFFSCREEN) return false;
  if (sender.id !== ext.runtime.id()) return false;
  if (msg.type !== Msg.CORE_CALL) {
    sendResponse(fail(ErrorCode.UNKNOWN_TYPE, `offscreen cannot handle ${msg.type}`));
    return false;
  }
  const op = msg.data?.op;
  ready
    .then(async (core) => {
      if (FILE_OPS.has(op)) await withTimeout(core.files, BOOT_TIMEOUT_MS, "unpacking py_core's files");
      return core;
    })
    .then((core) => {
      const started = performance.now();
      const reply = JSON.parse(core.handle(JSON.stringify({ op, args: msg.data?.args || {} })));
      const ms = performance.now() - started;
      sendResponse(reply.ok ? { ok: true, data: reply.result, ms } : { ok: false, error: reply.error, ms });
    })
    .catch((err) => sendResponse(fail(ErrorCode.CORE_UNAVAILABLE, String(err?.message || err))));
  return true;
});
