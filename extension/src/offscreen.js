// The offscreen document: the page that holds the core. The core itself runs in
// a module worker (core-worker.js, started by offscreen-early.js), so its boot
// never blocks this page's main thread -- which every page of the extension
// (the popup, the options page, the side panel) shares. This page relays:
//   - core calls from the service worker to the worker, and their replies;
//   - the worker's status (booting steps, ready, error) as core-status;
//   - the memory snapshot's flag in localStorage (set once the worker stored a
//     snapshot of this build in IndexedDB, removed when one failed to restore).

import { ext } from "./chrome-api.js";
import { ErrorCode } from "./errors.js";
import { fail, message, Msg, Target } from "./messages.js";
import { BUILD_ID, SNAPSHOT_FLAG } from "./snapshot-store.js";

const early = globalThis.__veilEarly || {};
/** @type {Worker} */
const worker = early.worker || new Worker("core-worker.js", { type: "module" });
if (!early.worker) worker.postMessage({ type: "boot", hasSnapshot: localStorage.getItem(SNAPSHOT_FLAG) === BUILD_ID, startedAt: performance.timeOrigin });

let nextId = 0;
/** @type {Map<number, (reply: unknown) => void>} */
const pending = new Map();
let failure = null; // why the worker died, once it has

function report(data) {
  ext.runtime.send(message(Msg.CORE_STATUS, Target.BACKGROUND, data)).catch(() => {});
}

worker.addEventListener("message", (event) => {
  const msg = event.data || {};
  if (msg.type === "status") {
    const status = { ...msg.status, documentStartedAt: performance.timeOrigin };
    // From this document's start (the worker's own `ms` starts with its module).
    if (status.state === "ready") status.msSinceDocument = Math.round(status.readyAt - performance.timeOrigin);
    report(status);
  } else if (msg.type === "snapshot-flag") {
    if (msg.set) localStorage.setItem(SNAPSHOT_FLAG, BUILD_ID);
    else localStorage.removeItem(SNAPSHOT_FLAG);
  } else if (msg.type === "reply") {
    const answer = pending.get(msg.id);
    pending.delete(msg.id);
    answer?.(msg.unavailable ? fail(ErrorCode.CORE_UNAVAILABLE, msg.unavailable) : msg.reply);
  }
});

// A worker that cannot load (a missing file, a CSP problem) or crashes: every call fails closed.
worker.addEventListener("error", (event) => {
  failure = `the core's worker failed: ${event.message || "it could not be loaded"}`;
  report({ state: "error", error: failure });
  for (const answer of pending.values()) answer(fail(ErrorCode.CORE_UNAVAILABLE, failure));
  pending.clear();
});

ext.runtime.onMessage((msg, sender, sendResponse) => {
  if (!msg || msg.target !== Target.OFFSCREEN) return false;
  if (sender.id !== ext.runtime.id()) return false;
  if (msg.type !== Msg.CORE_CALL) {
    sendResponse(fail(ErrorCode.UNKNOWN_TYPE, `offscreen cannot handle ${msg.type}`));
    return false;
  }
  if (failure) {
    sendResponse(fail(ErrorCode.CORE_UNAVAILABLE, failure));
    return false;
  }
  const id = ++nextId;
  pending.set(id, sendResponse);
  worker.postMessage({ type: "call", id, op: msg.data?.op, args: msg.data?.args || {} });
  return true;
});
