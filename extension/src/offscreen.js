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
// localStorage (synchronous) says whether IndexedDB holds a snapshot of this
// build, so the snapshot read and the WebAssembly compile can start together.
const SNAPSHOT_FLAG = "veil-snapshot-build";
const T0 = performance.now();
const phases = {};
const mark = (name) => {
  phases[name] = Math.round(performance.now() - T0);
};
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

// A memory snapshot is mostly zero pages (about half of 31 MB); store only the
// pages that are not, so reading it back from IndexedDB costs half as much.
const PAGE = 65536;

export function packSnapshot(bytes) {
  const words = new BigUint64Array(bytes.buffer, bytes.byteOffset, Math.floor(bytes.length / 8));
  const wordsPerPage = PAGE / 8;
  const chunks = [];
  let start = -1;
  const pages = Math.ceil(bytes.length / PAGE);
  for (let page = 0; page <= pages; page++) {
    let zero = true;
    if (page < pages) {
      const end = Math.min((page + 1) * wordsPerPage, words.length);
      for (let i = page * wordsPerPage; i < end; i++) {
        if (words[i] !== 0n) {
          zero = false;
          break;
        }
      }
      // The tail that is not a whole word is always kept.
      if (zero && (page + 1) * PAGE > words.length * 8) zero = false;
    }
    if (!zero && start < 0) start = page;
    if ((zero || page === pages) && start >= 0) {
      const from = start * PAGE;
      const to = Math.min(page * PAGE, bytes.length);
      chunks.push({ offset: from, bytes: bytes.slice(from, to) });
      start = -1;
    }
  }
  return { format: "veil.sparse-snapshot", version: 1, length: bytes.length, chunks };
}

export function unpackSnapshot(packed) {
  if (!packed || packed.format !== "veil.sparse-snapshot") throw new Error("not a Veil snapshot");
  const bytes = new Uint8Array(packed.length);
  for (const { offset, bytes: chunk } of packed.chunks) bytes.set(chunk, offset);
  return bytes;
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
  mark("pyodideLoaded");
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
  const t0 = T0;
  report({ state: "booting" });
  const zipPromise = fetchBytes(CORE_ZIP);
  let core = null;
  let fromSnapshot = false;
  let snapshotProblem = null;
  if (localStorage.getItem(SNAPSHOT_FLAG) === BUILD_ID) {
    const snapshot = snapshots.get().then((packed) => {
      mark("snapshotRead");
      if (!packed) throw new Error("the snapshot is missing from IndexedDB");
      const bytes = unpackSnapshot(packed);
      mark("snapshotUnpacked");
      return bytes;
    });
    try {
      core = await withTimeout(bootFromSnapshot(snapshot, zipPromise), BOOT_TIMEOUT_MS, "Pyodide (snapshot)");
      fromSnapshot = true;
    } catch (err) {
      snapshotProblem = String(err?.message || err);
      localStorage.removeItem(SNAPSHOT_FLAG);
      await snapshots.drop();
    }
  }
  if (!core) {
    core = await withTimeout(bootCold(zipPromise), BOOT_TIMEOUT_MS, "Pyodide");
  }
  const ping = JSON.parse(core.handle(JSON.stringify({ op: "ping", args: {} })));
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

chrome.runtime.onMessage.addListener((msg, sender, sendResponse) => {
  if (!msg || msg.target !== Target.OFFSCREEN) return false;
  if (sender.id !== chrome.runtime.id) return false;
  if (msg.type !== Msg.CORE_CALL) {
    sendResponse({ ok: false, error: { code: "unknown-type", message: `offscreen cannot handle ${msg.type}` } });
    return false;
  }
  ready
    .then((core) => {
      const started = performance.now();
      const reply = JSON.parse(core.handle(JSON.stringify({ op: msg.data?.op, args: msg.data?.args || {} })));
      const ms = performance.now() - started;
      sendResponse(reply.ok ? { ok: true, data: reply.result, ms } : { ok: false, error: reply.error, ms });
    })
    .catch((err) => sendResponse({ ok: false, error: { code: "core-unavailable", message: String(err?.message || err) } }));
  return true;
});
