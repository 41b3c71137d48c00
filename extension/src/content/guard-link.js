// The link to the network guard (guard.js, in the page's world): DOM events
// on the document carrying JSON, in the schema of messages.js (GuardMsg,
// GUARD_SCHEMA). This side says whether the site is protected and which texts
// are approved; the guard says it is ready, how it stands, and what it refused.


import { FROM_GUARD, guardMessage, GuardMsg, parseGuardMessage, TO_GUARD } from "../messages.js";
import { adapter, intercepting, state } from "./state.js";

/** @param {string} type a GuardMsg sent to the guard @param {Record<string, unknown>} [data] */
export function toGuard(type, data = {}) {
  document.dispatchEvent(new CustomEvent(TO_GUARD, { detail: JSON.stringify(guardMessage(type, data)) }));
}

export function tellGuardState() {
  // (The benchmark's switch runs without the guard, to measure what it adds.)
  const guardOff = __VEIL_TEST_SWITCHES__ && state.switches.guard === false;
  toGuard(GuardMsg.STATE, { protected: Boolean(adapter()) && intercepting() && !guardOff });
}

/** The guard lets `text` through; `original` is the draft it protects (null for none). */
export function approve(text, original) {
  toGuard(GuardMsg.APPROVE, { text, original: original ?? null });
}

/**
 * Listen to the guard; `onBlocked(msg)` runs (after the site's handler
 * finished: it may clear the box after sending) when it refused a request.
 * @param {(msg: Record<string, any>) => void} onBlocked
 */
export function listenToGuard(onBlocked) {
  document.addEventListener(FROM_GUARD, (event) => {
    const msg = parseGuardMessage(/** @type {CustomEvent} */ (event).detail, "content");
    if (!msg) return;
    if (msg.type === GuardMsg.READY) {
      state.guard.ready = true;
      if (state.settings) tellGuardState();
      else toGuard(GuardMsg.HELLO);
    } else if (msg.type === GuardMsg.STATUS) {
      state.guard = { ready: true, active: msg.active, blocked: msg.blocked, checked: msg.checked };
    } else if (msg.type === GuardMsg.BLOCKED) {
      state.guard.ready = true;
      state.guard.blocked += 1;
      setTimeout(() => onBlocked(msg), 0);
    }
  });
  toGuard(GuardMsg.HELLO);
}
