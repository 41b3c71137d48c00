// The offscreen document: boots Pyodide with py_core and answers core calls.
//
// Boot, fastest path first:
//   1. a memory snapshot of an already-booted interpreter (py_core imported),
//      made on this machine at the first boot and kept in IndexedDB under this
//      build's id -- restoring it skips CPython's start-up and the imports;
//   2. otherwise a cold boot, after which the snapshot is made for next time.
// A snapshot that fails to restore is deleted and the cold path runs.

import { loadPyodide } from "./pyodide/pyodide.mjs";
import createPyodideModule from "./pyodide/pyodide.asm.mjs";
import { Msg, Target, message } from "./messages.js";

/* global __VEIL_BUILD_ID__ */
const BUILD_ID = __VEIL_BUILD_ID__;
const INDEX_URL = new URL("./pyodide/", import.meta.url).href;
const CORE_ZIP = new URL("./python/veil_core.zip", import.meta.url).href;
const DB_NAME = "veil-core";
const STORE = "snapshots";

function openDb() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function dbOp(mode, fn) {
  const db = await openDb();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode);
      const req = fn(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(req?.result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

const snapshots = {
  get: () => dbOp("readonly", (s) => s.get(BUILD_ID)).catch(() => undefined),
  put: async (bytes) => {
    await dbOp("readwrite", (s) => s.clear());
    await dbOp("readwrite", (s) => s.put(bytes, BUILD_ID));
  },
  drop: () => dbOp("readwrite", (s) => s.clear()).catch(() => undefined),
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
  const bridge = pyodide.pyimport("veil_bridge");
  bridge.reseed();
  // The files are not part of a memory snapshot; put them back for tracebacks
  // and any lazy import, without holding up readiness.
  zipPromise.then((bytes) => unpackCore(pyodide, bytes)).catch(() => {});
  return { pyodide, handle: bridge.handle };
}

async function bootCold(zipPromise) {
  const pyodide = await loadPyodide({
    indexURL: INDEX_URL,
    createPyodideModule,
    _makeSnapshot: true,
    ...quiet,
  });
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
  return { pyodide, handle: bridge.handle, snapshot, snapshotError };
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
  chrome.runtime.sendMessage(message(Msg.CORE_STATUS, Target.BACKGROUND, data)).catch(() => {});
}

const BOOT_TIMEOUT_MS = 60000; // loadPyodide can hang forever (e.g. a CSP problem); never wait on it unbounded

async function boot() {
  const t0 = performance.now();
  report({ state: "booting" });
  const zipPromise = fetchBytes(CORE_ZIP);
  let core = null;
  let fromSnapshot = false;
  const snapshot = await snapshots.get();
  if (snapshot) {
    try {
      core = await withTimeout(bootFromSnapshot(snapshot, zipPromise), BOOT_TIMEOUT_MS, "Pyodide (snapshot)");
      fromSnapshot = true;
    } catch (err) {
      console.warn("snapshot restore failed; booting cold:", err);
      await snapshots.drop();
    }
  }
  if (!core) {
    core = await withTimeout(bootCold(zipPromise), BOOT_TIMEOUT_MS, "Pyodide");
  }
  const ping = JSON.parse(core.handle(JSON.stringify({ op: "ping", args: {} })));
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
  };
  report(status);
  if (core.snapshot) {
    const bytes = core.snapshot;
    core.snapshot = null;
    snapshots
      .put(bytes)
      .then(() => report({ ...status, snapshot: `stored (${(bytes.length / 1e6).toFixed(1)} MB)` }))
      .catch((err) => report({ ...status, snapshot: `not stored: ${err?.message || err}` }));
  }
  return core;
}

const ready = boot();
ready.catch((err) => report({ state: "error", error: String(err?.message || err) }));

chrome.runtime.onMessage.addListener((msg, sender, sendResponse) => {
  if (!msg || msg.target !== Target.OFFSCREEN) return false;
  if (sender.id !== chrome.runtime.id) return false;
  if (msg.type !== Msg.CORE_CALL) {
    sendResponse({ ok: false, error: { code: "unknown-type", message: `offscreen cannot handle ${msg.type}` } });
    return false;
  }
  ready
    .then((core) => {
      const reply = JSON.parse(core.handle(JSON.stringify({ op: msg.data?.op, args: msg.data?.args || {} })));
      sendResponse(reply.ok ? { ok: true, data: reply.result } : { ok: false, error: reply.error });
    })
    .catch((err) => sendResponse({ ok: false, error: { code: "core-unavailable", message: String(err?.message || err) } }));
  return true;
});
