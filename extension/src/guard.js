// The network guard: runs in the page's own world (MV3 content script with
// world "MAIN", at document_start, before any script of the site) on every
// protected site, and wraps what a page sends with: fetch,
// XMLHttpRequest.send, WebSocket (its URL and send), navigator.sendBeacon,
// HTMLFormElement.submit and form submission. Before a request leaves, its URL
// and body are checked (leak-check.js) against the text the person typed into
// the page's editors that Veil has not protected; a request that carries it
// is refused -- fetch rejects with a TypeError, XHR.send, WebSocket and
// WebSocket.send throw a NetworkError, sendBeacon returns false, a form is not
// submitted -- and the content script is told, which protects the prompt and
// shows a notice. A streamed body, or one too large to read, is refused while
// an unprotected draft exists: it cannot be checked before it leaves.
//
// The guard reads the editors itself (whatever the person typed into: no
// selectors), and remembers a draft after it leaves the editor, so a site
// that clears the box and sends later is still checked. The content script
// (isolated world) tells it, through DOM events (messages.js GUARD_SCHEMA),
// whether the site is protected and which texts are approved (the protected
// text Veil wrote; the original where the person chose "send unprotected").
//
// What it cannot see: requests from the site's workers and service worker,
// other frames, navigations and resource loads (links, images, location).
// It defends against a site's ordinary send paths after a redesign, not
// against a site that wants the text: the page sees every key typed anyway.

import { editableRoot, readText } from "./editors.js";
import { bodyText, IndexCache, LeakIndex, squeeze } from "./leak-check.js";
import { FROM_GUARD, guardMessage, GuardMsg, parseGuardMessage, TO_GUARD } from "./messages.js";
import { siteForUrl, SITES } from "./sites.js";

const RECENT_MS = 10 * 60 * 1000; // a draft that left its editor is guarded this long
const PROTECTED_MS = 15 * 1000; // ... or this long once Veil protected it
const MESSAGE = "Veil blocked this request: it carried your prompt unprotected";

/**
 * What the guard knows: the drafts in the page's editors and those that left
 * them, the texts Veil approved, and the index the send path checks against.
 * @typedef {{text: string, left: number, until: number, protected: boolean}} Recent
 * @typedef {{ok: boolean} | {pending: Promise<boolean>}} Verdict
 * @typedef {(api: string, url: string, body: unknown) => Verdict} Check
 */
class Drafts {
  constructor() {
    /** @type {Set<Element>} editable roots the person used */
    this.editors = new Set();
    /** @type {Map<Element, string>} editor -> its last unapproved text */
    this.last = new Map();
    /** @type {Recent[]} drafts that left their editor */
    this.recent = [];
    /** @type {string[]} texts Veil approved, as written, newest last */
    this.approved = [];
    /** @type {string | null} the original of the last text Veil protected */
    this.protectedOriginal = null;
    /** @type {LeakIndex | null} rebuilt when drafts or approvals change */
    this.index = null;
    /** @type {string[]} the drafts and approvals `index` was built from */
    this.indexKey = [];
    /** squeezed texts and run indexes, across index rebuilds */
    this.cache = new IndexCache();
  }

  /** (Only approved texts are cached: a draft changes with every key.) @param {string} text */
  isApproved(text) {
    if (!this.approved.length) return false;
    if (this.approved.includes(text)) return true;
    const s = squeeze(text);
    return this.approved.some((a) => this.cache.squeeze(a) === s);
  }

  /** (Drafts that left their box and originals are few: their squeezed forms are cached.) @param {string} a @param {string} b */
  sameSqueezed(a, b) {
    return this.cache.squeeze(a) === this.cache.squeeze(b);
  }

  /** @param {string} text @param {number} now */
  leave(text, now) {
    if (!text.trim() || this.isApproved(text)) return;
    // A longer version of the same draft covers a shorter one.
    if (this.recent.some((r) => r.text.includes(text))) return;
    this.recent = this.recent.filter((r) => !text.includes(r.text));
    const wasProtected = this.protectedOriginal !== null && this.sameSqueezed(text, this.protectedOriginal);
    this.recent.push({ text, left: now, until: now + (wasProtected ? PROTECTED_MS : RECENT_MS), protected: wasProtected });
    if (this.recent.length > 8) this.recent = this.recent.slice(-8);
  }

  /** @param {Element} el @param {number} [now] */
  observe(el, now = Date.now()) {
    if (!el.isConnected) {
      const gone = this.last.get(el);
      if (gone) this.leave(gone, now);
      this.last.delete(el);
      this.editors.delete(el);
      return;
    }
    // The text one line per block, as the content script reads it.
    const text = readText(el);
    const before = this.last.get(el);
    const draft = text.trim() && !this.isApproved(text) ? text : null;
    if (before && before !== draft) {
      // Typing edits the draft in place; a box that was cleared or replaced
      // (by the site after a send, or by Veil's protected text) keeps the old one.
      if (!draft || draft.length < before.length / 2 || !draft.includes(before.slice(0, 12))) this.leave(before, now);
    }
    if (draft) this.last.set(el, draft);
    else this.last.delete(el);
  }

  /** @param {unknown} node */
  track(node) {
    const root = editableRoot(node);
    if (root && !(root instanceof HTMLInputElement && root.type === "password")) this.editors.add(root);
    return root;
  }

  /** Every draft to check against: those in the editors, and those that left them lately. */
  drafts() {
    const now = Date.now();
    this.track(document.activeElement);
    for (const el of [...this.editors]) this.observe(el, now);
    this.recent = this.recent.filter((r) => r.until > now);
    return [...this.last.values()].map((text) => ({ text })).concat(this.recent.map((r) => ({ text: r.text })));
  }

  /** @returns {LeakIndex} */
  currentIndex() {
    const list = this.drafts();
    // The same strings as last time (compared as strings: cheap when they are the same objects).
    const key = [...list.map((d) => d.text), "\u0000", ...this.approved];
    const same = key.length === this.indexKey.length && key.every((t, i) => t === this.indexKey[i]);
    if (!same || !this.index) {
      this.indexKey = key;
      this.cache.keep([...list.map((d) => d.text), ...this.approved]);
      this.index = new LeakIndex(list, this.approved, this.cache);
    }
    return this.index;
  }

  /** Veil approved `text`, the protected form of `original` (null: no draft of its own). @param {string} text @param {string | null} original */
  approve(text, original) {
    const now = Date.now();
    this.approved = [...this.approved.filter((a) => a !== text), text].slice(-16);
    if (typeof original === "string") {
      // The original Veil just protected is guarded PROTECTED_MS more (a site
      // that sends a stale copy late); one protected before it is done with.
      for (const r of this.recent) {
        if (this.sameSqueezed(r.text, original)) {
          r.until = Math.min(r.until, now + PROTECTED_MS);
          r.protected = true;
        } else if (r.protected) r.until = Math.min(r.until, now);
      }
      this.protectedOriginal = original;
    }
    for (const [el, draft] of this.last) {
      if (this.isApproved(draft)) this.last.delete(el);
    }
  }
}

/**
 * The check every wrapper calls before a request leaves.
 * @param {Drafts} drafts @param {() => boolean} active
 * @param {(api: string, url: string, reason: string, draft: string | null | undefined) => void} refuse
 * @returns {Check}
 */
function makeCheck(drafts, active, refuse) {
  return function check(api, url, body) {
    if (!active()) return { ok: true };
    const idx = drafts.currentIndex();
    if (idx.empty) return { ok: true };
    stats.checked += 1;
    const inUrl = url ? idx.find(String(url)) : null;
    if (inUrl) {
      refuse(api, url, "draft", inUrl.draft.text);
      return { ok: false };
    }
    const judge = (/** @type {{text?: string, opaque?: string}} */ read) => {
      if (read.opaque) {
        refuse(api, url, read.opaque, idx.drafts[0]?.draft.text);
        return false;
      }
      const hit = idx.find(read.text ?? "");
      if (hit) {
        refuse(api, url, "draft", hit.draft.text);
        return false;
      }
      return true;
    };
    const read = bodyText(body);
    if (read.pending) return { pending: read.pending.then(judge, () => judge({ opaque: "a body Veil could not read" })) };
    return { ok: judge(read) };
  };
}

/** @param {Check} check @param {Drafts} drafts @param {() => boolean} active */
function wrapFetch(check, drafts, active) {
  const nativeFetch = window.fetch;
  window.fetch = /** @type {typeof fetch} */ (
    function fetch(/** @type {RequestInfo | URL} */ input, /** @type {RequestInit | undefined} */ init) {
      const args = arguments;
      if (!active()) return Reflect.apply(nativeFetch, globalThis, args);
      let url;
      /** @type {unknown} */
      let body = init && "body" in init ? init.body : undefined;
      if (typeof Request !== "undefined" && input instanceof Request) {
        url = input.url;
        if (body === undefined && input.body) body = input.clone().blob();
      } else {
        url = input instanceof URL ? input.href : String(input);
      }
      /** @type {Verdict} */
      let verdict;
      if (body instanceof Promise) {
        const idx = drafts.currentIndex();
        verdict = idx.empty ? { ok: true } : { pending: body.then((blob) => check("fetch", url, blob)).then((v) => ("pending" in v ? v.pending : v.ok)) };
      } else {
        verdict = check("fetch", url, body);
      }
      if ("ok" in verdict && verdict.ok) return Reflect.apply(nativeFetch, globalThis, args);
      if (!("pending" in verdict)) return Promise.reject(new TypeError(`${MESSAGE} (fetch)`));
      return verdict.pending.then((ok) => (ok ? Reflect.apply(nativeFetch, globalThis, args) : Promise.reject(new TypeError(`${MESSAGE} (fetch)`))));
    }
  );
}

/** @param {Check} check */
function wrapXhr(check) {
  const XHR = XMLHttpRequest.prototype;
  const nativeOpen = XHR.open;
  const nativeSend = XHR.send;
  /** @type {WeakMap<XMLHttpRequest, {url: string, sync: boolean}>} */
  const xhrInfo = new WeakMap();
  XHR.open = /** @type {typeof XHR.open} */ (
    /** @this {XMLHttpRequest} */
    function open(/** @type {string} */ _method, /** @type {string | URL} */ url, /** @type {boolean} */ async) {
      xhrInfo.set(this, { url: String(url), sync: arguments.length > 2 && !async });
      return Reflect.apply(nativeOpen, this, arguments);
    }
  );
  XHR.send = function send(body) {
    const info = xhrInfo.get(this) || { url: "", sync: false };
    const verdict = check("XMLHttpRequest", info.url, body);
    if ("ok" in verdict && verdict.ok) return Reflect.apply(nativeSend, this, arguments);
    if ("pending" in verdict && !info.sync) {
      verdict.pending.then((ok) => (ok ? Reflect.apply(nativeSend, this, [body]) : this.abort()));
      return undefined;
    }
    throw new DOMException(`${MESSAGE} (XMLHttpRequest)`, "NetworkError");
  };
}

/** @param {Check} check */
function wrapWebSocket(check) {
  const NativeWebSocket = window.WebSocket;
  const wsSend = NativeWebSocket.prototype.send;
  /** @type {WeakMap<WebSocket, Promise<unknown>>} */
  const wsQueue = new WeakMap();
  window.WebSocket = new Proxy(NativeWebSocket, {
    construct(target, args, newTarget) {
      const verdict = check("WebSocket", String(args[0] ?? ""), null);
      if ("ok" in verdict && verdict.ok === false) throw new DOMException(`${MESSAGE} (WebSocket)`, "NetworkError");
      return Reflect.construct(target, args, newTarget);
    },
  });
  /** @param {WebSocket} ws @param {Promise<unknown>} next */
  const queue = (ws, next) => {
    wsQueue.set(ws, next);
    next.finally(() => wsQueue.get(ws) === next && wsQueue.delete(ws));
  };
  NativeWebSocket.prototype.send = function send(data) {
    const queued = wsQueue.get(this);
    if (queued) {
      // Keep the order of messages behind one still being read.
      queue(
        this,
        queued.then(() => {
          const v = check("WebSocket", this.url, data);
          if ("ok" in v && v.ok) return Reflect.apply(wsSend, this, [data]);
          return "pending" in v ? v.pending.then((ok) => ok && Reflect.apply(wsSend, this, [data])) : undefined;
        }),
      );
      return undefined;
    }
    const verdict = check("WebSocket", this.url, data);
    if ("ok" in verdict && verdict.ok) return Reflect.apply(wsSend, this, arguments);
    if ("pending" in verdict) {
      queue(
        this,
        verdict.pending.then((ok) => ok && Reflect.apply(wsSend, this, [data])),
      );
      return undefined;
    }
    throw new DOMException(`${MESSAGE} (WebSocket)`, "NetworkError");
  };
}

/** @param {Check} check */
function wrapBeacon(check) {
  const nativeBeacon = Navigator.prototype.sendBeacon;
  Navigator.prototype.sendBeacon = function sendBeacon(url, data) {
    const verdict = check("sendBeacon", String(url), data);
    if ("ok" in verdict && verdict.ok) return Reflect.apply(nativeBeacon, this, arguments);
    if ("pending" in verdict) {
      verdict.pending.then((ok) => ok && Reflect.apply(nativeBeacon, this, [url, data]));
      return true; // queued behind Veil's check
    }
    return false;
  };
}

/** @param {Check} check @param {() => boolean} active */
function wrapForms(check, active) {
  const nativeSubmit = HTMLFormElement.prototype.submit;
  /** @param {HTMLFormElement} form @param {HTMLElement | null} submitter */
  const formLeaks = (form, submitter) => {
    let data;
    try {
      data = new FormData(form, submitter || undefined);
    } catch {
      data = new FormData(form);
    }
    const action = /** @type {any} */ (submitter)?.formAction || form.action || location.href;
    const verdict = check("form", action, data);
    // A form with a file is read before it may go; it is sent again after.
    if ("pending" in verdict) {
      verdict.pending.then((ok) => ok && Reflect.apply(nativeSubmit, form, []));
      return true;
    }
    return !verdict.ok;
  };
  HTMLFormElement.prototype.submit = function submit() {
    if (formLeaks(this, null)) return undefined;
    return Reflect.apply(nativeSubmit, this, arguments);
  };
  window.addEventListener(
    "submit",
    (event) => {
      const form = event.target;
      if (!(form instanceof HTMLFormElement) || !active()) return;
      if (formLeaks(form, /** @type {SubmitEvent} */ (event).submitter)) {
        event.preventDefault();
        event.stopImmediatePropagation();
      }
    },
    true,
  );
}

const stats = { checked: 0, blocked: 0, /** @type {{api: string, at: number} | null} */ lastBlocked: null };

function install() {
  const builtinHosts = new Set(SITES.flatMap((s) => s.hosts));
  /** @type {{protected: boolean} | null} from the content script; null until it speaks */
  let told = null;
  const drafts = new Drafts();

  const active = () => {
    if (told) return told.protected;
    // Before the content script speaks: a built-in host is guarded on its
    // protected paths; anywhere else the guard was registered for an added site.
    return builtinHosts.has(location.hostname) ? siteForUrl(location.href) !== null : true;
  };
  const emit = (/** @type {string} */ type, /** @type {Record<string, unknown>} */ data = {}) => {
    document.dispatchEvent(new CustomEvent(FROM_GUARD, { detail: JSON.stringify(guardMessage(type, data)) }));
  };

  // Build the index for what is about to be sent while Veil is still protecting
  // it (the worker's round trip), so the check on the send path finds it ready.
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let warmTimer;
  const prewarm = () => {
    clearTimeout(warmTimer);
    warmTimer = setTimeout(() => {
      if (!active()) return;
      const idx = drafts.currentIndex();
      if (!idx.empty) idx.find(drafts.approved[drafts.approved.length - 1] || "");
    }, 0);
  };

  // Snapshot the editors before the site's own handlers run (this listener is
  // registered first, at document_start): a site that reads the box and clears
  // it on click is still checked when it sends later.
  const snapshot = (/** @type {Event} */ event) => {
    const root = drafts.track(event.composedPath?.()[0] ?? event.target);
    if (event.type === "input" || event.type === "paste") {
      if (root) drafts.observe(root);
      return;
    }
    if (event.type === "keydown" && /** @type {KeyboardEvent} */ (event).key !== "Enter") return;
    const now = Date.now();
    for (const el of [...drafts.editors]) drafts.observe(el, now);
    if (event.type !== "focusin") prewarm();
  };
  for (const type of ["input", "paste", "keydown", "pointerdown", "mousedown", "click", "submit", "focusin"]) {
    window.addEventListener(type, snapshot, true);
  }

  const refuse = (/** @type {string} */ api, /** @type {string} */ url, /** @type {string} */ reason, /** @type {string | null | undefined} */ draft) => {
    stats.blocked += 1;
    stats.lastBlocked = { api, at: Date.now() };
    let host = "";
    try {
      host = new URL(url, location.href).host;
    } catch {
      /* not a URL */
    }
    emit(GuardMsg.BLOCKED, { api, host, reason, draft: draft ?? null });
  };
  const check = makeCheck(drafts, active, refuse);
  wrapFetch(check, drafts, active);
  wrapXhr(check);
  wrapWebSocket(check);
  wrapBeacon(check);
  wrapForms(check, active);

  document.addEventListener(TO_GUARD, (event) => {
    const msg = parseGuardMessage(/** @type {CustomEvent} */ (event).detail, "guard");
    if (!msg) return;
    if (msg.type === GuardMsg.STATE) {
      told = { protected: msg.protected };
    } else if (msg.type === GuardMsg.APPROVE) {
      drafts.approve(msg.text, msg.original);
      prewarm();
    }
    if (msg.type === GuardMsg.HELLO || msg.type === GuardMsg.STATE) {
      emit(GuardMsg.STATUS, { active: active(), checked: stats.checked, blocked: stats.blocked, lastBlocked: stats.lastBlocked });
    }
  });
  document.documentElement?.setAttribute("data-veil-guard", "on");
  emit(GuardMsg.READY);
}

if (!(/** @type {any} */ (window).__veilGuard)) {
  Object.defineProperty(window, "__veilGuard", { value: true });
  install();
}
