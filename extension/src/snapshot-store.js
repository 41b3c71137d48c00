// The memory snapshot of a booted core, kept in IndexedDB (sparse: zero pages dropped).
// Used by core-worker.js (which restores, makes and stores snapshots); the flag
// below is kept by the offscreen page (offscreen-early.js, offscreen.js).

export const BUILD_ID = __VEIL_BUILD_ID__;
export const DB_NAME = "veil-core";
// localStorage (synchronous) says whether IndexedDB holds a snapshot of this
// build, so the snapshot read and the WebAssembly compile can start together.
export const SNAPSHOT_FLAG = "veil-snapshot-build";
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

export const snapshots = {
  get: () => dbOp("readonly", (s) => s.get(BUILD_ID)).catch(() => undefined),
  put: async (bytes) => {
    await dbOp("readwrite", (s) => s.clear());
    await dbOp("readwrite", (s) => s.put(bytes, BUILD_ID));
  },
  drop: () => dbOp("readwrite", (s) => s.clear()).catch(() => undefined),
};

