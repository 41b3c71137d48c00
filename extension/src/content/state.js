// The content script's shared state, in one place: what was read from
// storage, what Veil is doing right now on this page, and what it learned
// about the page's editors and controls. Every module of content/ reads and
// writes these fields; nothing else keeps mutable state between events.


import { customSiteId, GENERIC_ADAPTER, siteForUrl } from "../sites.js";

/**
 * @typedef {{ready: boolean, active: boolean, blocked: number, checked: number}} GuardStatus
 * @typedef {{target: EventTarget | null, control: Element | null, startedWith: string, x: number, y: number,
 *            ended: boolean, over: Promise<void>, end: () => void}} Gesture
 */

/** The built-in site of this page (sites.js), or null on a site the person added. */
export const builtin = siteForUrl(location.href);

export const state = {
  /** @type {any} the normalized settings (settings.js); null until read, and until then every send is intercepted */
  settings: null,
  /** @type {Record<string, any>} the e2e tests' switches (test builds only) */
  switches: {},
  /** a send (or a panel insert) is being protected: another waits */
  busy: false,
  /** > 0 while Veil replays an activation: its own events pass */
  bypass: 0,
  /** @type {Gesture | null} an intercepted click whose events are still arriving */
  gesture: null,
  /** @type {Element | null} the editable root the person last used */
  lastEditor: null,
  /** @type {GuardStatus} what the network guard last said */
  guard: { ready: false, active: false, blocked: 0, checked: 0 },
  /** the page check last reported to the worker (to report only changes) */
  lastReported: "",
  /** Veil is putting back a prompt the guard refused */
  recovering: false,
  /** when the person last pressed Enter or clicked a control (a send is near) */
  lastActivation: 0,
};

/** @type {WeakMap<Element, string>} editor -> the protected text Veil wrote into it */
export const written = new WeakMap();
/** @type {WeakSet<Element>} editors where a plain Enter turned out to be a line break */
export const enterIsNewline = new WeakSet();
/** @type {WeakSet<Element>} controls that took the text out of the editor */
export const learned = new WeakSet();

export function siteId() {
  if (builtin) return builtin.id;
  return customSiteId(location.origin);
}

/** The page's adapter: the built-in one, the generic one on an added site, null on a site that was removed. */
export function adapter() {
  if (builtin) return builtin;
  if (state.settings && !state.settings.custom[siteId()]) return null;
  return GENERIC_ADAPTER;
}

export function siteSettings() {
  return state.settings ? state.settings.sites[siteId()] : null;
}

export function intercepting() {
  const site = siteSettings();
  return site === null || site === undefined ? state.settings === null : site.enabled;
}

/** The DOM interception (the test build can turn it off to test the network guard alone). */
export function domInterception() {
  return !(__VEIL_TEST_SWITCHES__ && state.switches.domInterception === false);
}
