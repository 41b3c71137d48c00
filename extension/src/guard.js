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
// (isolated world) tells it, through DOM events, whether the site is
// protected and which texts are approved (the protected text Veil wrote; the
// original where the person chose "send unprotected").
//
// What it cannot see: requests from the site's workers and service worker,
// other frames, navigations and resource loads (links, images, location).
// It defends against a site's ordinary send paths after a redesign, not
// against a site that wants the text: the page sees every key typed anyway.

import { editableRoot, readText } from "./editors.js";
import { IndexCache, LeakIndex, bodyText, squeeze } from "./leak-check.js";
import { SITES, siteForUrl } from "./sites.js";

const TO_GUARD = "veil:to-guard";
const FROM_GUARD = "veil:from-guard";
const RECENT_MS = 10 * 60 * 1000; // a draft that left its editor is guarded this long
const PROTECTED_MS = 15 * 1000; // ... or this long once Veil protected it

function install() {
  const builtinHosts = new Set(SITES.flatMap((s) => s.hosts));
  let told = null; // {protected: bool} from the content script; null until it speaks
  const editors = new Set(); // editable roots the person used
  const last = new Map(); // editor -> its last unapproved text
  let recent = []; // [{text, left, until}] drafts that left their editor
  let approved = []; // texts Veil approved, as written, newest last
  let protectedOriginal = null; // the original of the last text Veil protected
  let index = null; // LeakIndex, rebuilt when drafts or approvals change
  let indexKey = []; // the drafts and approvals `index` was built from
  const stats = { checked: 0, blocked: 0, lastBlocked: null };

  function active() {
    if (told) return told.protected;
    // Before the content script speaks: a built-in host is guarded on its
    // protected paths; anywhere else the guard was registered for an added site.
    return builtinHosts.has(location.hostname) ? siteForUrl(location.href) !== null : true;
  }

  function emit(data) {
    document.dispatchEvent(new CustomEvent(FROM_GUARD, { detail: JSON.stringify(data) }));
  }

  // ------------------------------------------------------------ drafts

  // The text one line per block, as the content script reads it (the notice
  // and the text Veil puts back keep the person's line breaks).
  const readEditor = readText;

  const cache = new IndexCache(); // squeezed texts and run indexes, across index rebuilds

  // (Only approved texts are cached: a draft changes with every key.)
  function isApproved(text) {
    if (!approved.length) return false;
    if (approved.includes(text)) return true;
    const s = squeeze(text);
    return approved.some((a) => cache.squeeze(a) === s);
  }

  // (Drafts that left their box and originals are few: their squeezed forms are cached.)
  function sameSqueezed(a, b) {
    return cache.squeeze(a) === cache.squeeze(b);
  }

  function leave(text, now) {
    if (!text.trim() || isApproved(text)) return;
    // A longer version of the same draft covers a shorter one.
    if (recent.some((r) => r.text.includes(text))) return;
    recent = recent.filter((r) => !text.includes(r.text));
    const wasProtected = protectedOriginal !== null && sameSqueezed(text, protectedOriginal);
    recent.push({ text, left: now, until: now + (wasProtected ? PROTECTED_MS : RECENT_MS), protected: wasProtected });
    if (recent.length > 8) recent = recent.slice(-8);
  }

  function observe(el, now = Date.now()) {
    if (!el.isConnected) {
      const gone = last.get(el);
      if (gone) leave(gone, now);
      last.delete(el);
      editors.delete(el);
      return;
    }
    const text = readEditor(el);
    const before = last.get(el);
    const draft = text.trim() && !isApproved(text) ? text : null;
    if (before && before !== draft) {
      // Typing edits the draft in place; a box that was cleared or replaced
      // (by the site after a send, or by Veil's protected text) keeps the old one.
      if (!draft || draft.length < before.length / 2 || !draft.includes(before.slice(0, 12))) leave(before, now);
    }
    if (draft) last.set(el, draft);
    else last.delete(el);
  }

  function track(node) {
    const root = editableRoot(node);
    if (root && !(root instanceof HTMLInputElement && root.type === "password")) editors.add(root);
    return root;
  }

  function drafts() {
    const now = Date.now();
    track(document.activeElement);
    for (const el of [...editors]) observe(el, now);
    recent = recent.filter((r) => r.until > now);
    return [...last.values()].map((text) => ({ text })).concat(recent.map((r) => ({ text: r.text })));
  }

  function currentIndex() {
    const list = drafts();
    // The same strings as last time (compared as strings: cheap when they are the same objects).
    const key = [...list.map((d) => d.text), "\u0000", ...approved];
    const same = key.length === indexKey.length && key.every((t, i) => t === indexKey[i]);
    if (!same) {
      indexKey = key;
      cache.keep([...list.map((d) => d.text), ...approved]);
      index = new LeakIndex(list, approved, cache);
    }
    return index;
  }

  // Build the index for what is about to be sent while Veil is still protecting
  // it (the worker's round trip), so the check on the send path finds it ready.
  let warmTimer = 0;
  function prewarm() {
    clearTimeout(warmTimer);
    warmTimer = setTimeout(() => {
      if (!active()) return;
      const idx = currentIndex();
      if (!idx.empty) idx.find(approved[approved.length - 1] || "");
    }, 0);
  }

  // Snapshot the editors before the site's own handlers run (this listener is
  // registered first, at document_start): a site that reads the box and clears
  // it on click is still checked when it sends later.
  const snapshot = (event) => { const t0 = performance.now(); try { snapshot0(event); } finally { window.__sms = (window.__sms || 0) + performance.now() - t0; } };
  const snapshot0 = (event) => {
    const root = track(event.composedPath?.()[0] ?? event.target);
    if (event.type === "input" || event.type === "paste") {
      if (root) observe(root);
      return;
    }
    if (event.type === "keydown" && event.key !== "Enter") return;
    const now = Date.now();
    for (const el of [...editors]) observe(el, now);
    if (event.type !== "focusin") prewarm();
  };
  for (const type of ["input", "paste", "keydown", "pointerdown", "mousedown", "click", "submit", "focusin"]) {
    window.addEventListener(type, snapshot, true);
  }

  // ------------------------------------------------------------ the check

  const MESSAGE = "Veil blocked this request: it carried your prompt unprotected";

  function refuse(api, url, reason, draft) {
    stats.blocked += 1;
    stats.lastBlocked = { api, at: Date.now() };
    let host = "";
    try {
      host = new URL(url, location.href).host;
    } catch {
      /* not a URL */
    }
    emit({ type: "blocked", api, host, reason, draft: draft ?? null });
  }

  /** {ok: true} | {ok: false} now, or {pending: Promise<boolean>} once the body is read. */
  function check(api, url, body) {
    const t0 = performance.now();
    try { return check0(api, url, body); } finally { window.__gms = (window.__gms || []); window.__gms.push(performance.now() - t0); }
  }
  function check0(api, url, body) {
    if (!active()) return { ok: true };
    const idx = currentIndex();
    if (idx.empty) return { ok: true };
    stats.checked += 1;
    const inUrl = url ? idx.find(String(url)) : null;
    if (inUrl) {
      refuse(api, url, "draft", inUrl.draft.text);
      return { ok: false };
    }
    const judge = (read) => {
      if (read.opaque) {
        refuse(api, url, read.opaque, idx.drafts[0]?.draft.text);
        return false;
      }
      const hit = idx.find(read.text);
      if (hit) {
        refuse(api, url, "draft", hit.draft.text);
        return false;
      }
      return true;
    };
    const read = bodyText(body);
    if (read.pending) return { pending: read.pending.then(judge, () => judge({ opaque: "a body Veil could not read" })) };
    return { ok: judge(read) };
  }

  // ------------------------------------------------------------ the wrappers

  const nativeFetch = window.fetch;
  const wrappedFetch = function fetch(input, init) {
    const args = arguments;
    if (!active()) return Reflect.apply(nativeFetch, globalThis, args);
    let url;
    let body = init && "body" in init ? init.body : undefined;
    if (typeof Request !== "undefined" && input instanceof Request) {
      url = input.url;
      if (body === undefined && input.body) body = input.clone().blob();
    } else {
      url = input instanceof URL ? input.href : String(input);
    }
    let verdict;
    if (body instanceof Promise) {
      const idx = currentIndex();
      verdict = idx.empty ? { ok: true } : { pending: body.then((blob) => check("fetch", url, blob)).then((v) => (v.pending ? v.pending : v.ok)) };
    } else {
      verdict = check("fetch", url, body);
    }
    if (verdict.ok) return Reflect.apply(nativeFetch, globalThis, args);
    if (!verdict.pending) return Promise.reject(new TypeError(`${MESSAGE} (fetch)`));
    return verdict.pending.then((ok) => (ok ? Reflect.apply(nativeFetch, globalThis, args) : Promise.reject(new TypeError(`${MESSAGE} (fetch)`))));
  };
  window.fetch = wrappedFetch;

  const XHR = XMLHttpRequest.prototype;
  const nativeOpen = XHR.open;
  const nativeSend = XHR.send;
  const xhrInfo = new WeakMap();
  XHR.open = function open(method, url, async) {
    xhrInfo.set(this, { url: String(url), sync: arguments.length > 2 && !async });
    return Reflect.apply(nativeOpen, this, arguments);
  };
  XHR.send = function send(body) {
    const info = xhrInfo.get(this) || { url: "", sync: false };
    const verdict = check("XMLHttpRequest", info.url, body);
    if (verdict.ok) return Reflect.apply(nativeSend, this, arguments);
    if (verdict.pending && !info.sync) {
      verdict.pending.then((ok) => (ok ? Reflect.apply(nativeSend, this, [body]) : this.abort()));
      return undefined;
    }
    throw new DOMException(`${MESSAGE} (XMLHttpRequest)`, "NetworkError");
  };

  const NativeWebSocket = window.WebSocket;
  const wsSend = NativeWebSocket.prototype.send;
  const wsQueue = new WeakMap();
  window.WebSocket = new Proxy(NativeWebSocket, {
    construct(target, args, newTarget) {
      if (check("WebSocket", String(args[0] ?? ""), null).ok === false) {
        throw new DOMException(`${MESSAGE} (WebSocket)`, "NetworkError");
      }
      return Reflect.construct(target, args, newTarget);
    },
  });
  NativeWebSocket.prototype.send = function send(data) {
    const queued = wsQueue.get(this);
    if (queued) {
      // Keep the order of messages behind one still being read.
      const next = queued.then(() => {
        const v = check("WebSocket", this.url, data);
        if (v.ok) return Reflect.apply(wsSend, this, [data]);
        return v.pending?.then((ok) => ok && Reflect.apply(wsSend, this, [data]));
      });
      wsQueue.set(this, next);
      next.finally(() => wsQueue.get(this) === next && wsQueue.delete(this));
      return undefined;
    }
    const verdict = check("WebSocket", this.url, data);
    if (verdict.ok) return Reflect.apply(wsSend, this, arguments);
    if (verdict.pending) {
      const next = verdict.pending.then((ok) => ok && Reflect.apply(wsSend, this, [data]));
      wsQueue.set(this, next);
      next.finally(() => wsQueue.get(this) === next && wsQueue.delete(this));
      return undefined;
    }
    throw new DOMException(`${MESSAGE} (WebSocket)`, "NetworkError");
  };

  const nativeBeacon = Navigator.prototype.sendBeacon;
  Navigator.prototype.sendBeacon = function sendBeacon(url, data) {
    const verdict = check("sendBeacon", String(url), data);
    if (verdict.ok) return Reflect.apply(nativeBeacon, this, arguments);
    if (verdict.pending) {
      verdict.pending.then((ok) => ok && Reflect.apply(nativeBeacon, this, [url, data]));
      return true; // queued behind Veil's check
    }
    return false;
  };

  const nativeSubmit = HTMLFormElement.prototype.submit;
  HTMLFormElement.prototype.submit = function submit() {
    if (formLeaks(this, null)) return undefined;
    return Reflect.apply(nativeSubmit, this, arguments);
  };

  function formLeaks(form, submitter) {
    let data;
    try {
      data = new FormData(form, submitter || undefined);
    } catch {
      data = new FormData(form);
    }
    const action = submitter?.formAction || form.action || location.href;
    const verdict = check("form", action, data);
    // A form with a file is read before it may go; it is sent again after.
    if (verdict.pending) {
      verdict.pending.then((ok) => ok && Reflect.apply(nativeSubmit, form, []));
      return true;
    }
    return !verdict.ok;
  }

  window.addEventListener(
    "submit",
    (event) => {
      const form = event.target;
      if (!(form instanceof HTMLFormElement) || !active()) return;
      if (formLeaks(form, event.submitter)) {
        event.preventDefault();
        event.stopImmediatePropagation();
      }
    },
    true,
  );

  // ------------------------------------------------------------ the content script

  document.addEventListener(TO_GUARD, (event) => {
    let msg;
    try {
      msg = JSON.parse(event.detail);
    } catch {
      return;
    }
    const now = Date.now();
    if (msg.type === "state") {
      told = { protected: Boolean(msg.protected) };
    } else if (msg.type === "approve" && typeof msg.text === "string") {
      approved = [...approved.filter((a) => a !== msg.text), msg.text].slice(-16);
      if (typeof msg.original === "string") {
        // The original Veil just protected is guarded PROTECTED_MS more (a site
        // that sends a stale copy late); one protected before it is done with.
        for (const r of recent) {
          if (sameSqueezed(r.text, msg.original)) {
            r.until = Math.min(r.until, now + PROTECTED_MS);
            r.protected = true;
          } else if (r.protected) r.until = Math.min(r.until, now);
        }
        protectedOriginal = msg.original;
      }
      for (const [el, text] of last) {
        if (isApproved(text)) last.delete(el);
      }
      prewarm();
    }
    if (msg.type === "hello" || msg.type === "state" || msg.type === "status") {
      emit({ type: "status", active: active(), checked: stats.checked, blocked: stats.blocked, lastBlocked: stats.lastBlocked });
    }
  });
  document.documentElement?.setAttribute("data-veil-guard", "on");
  emit({ type: "ready" });
}

if (!window.__veilGuard) {
  Object.defineProperty(window, "__veilGuard", { value: true });
  install();
}
