// Does an outgoing request carry the person's unprotected draft? The network
// guard (guard.js) asks this of every request body and URL while a draft that
// Veil has not protected is in the page. Pure: no DOM, no chrome.*; the unit
// tests run it under Node.
//
// The test. Both the draft and the body are "squeezed": every whitespace and
// zero-width character removed (editors, JSON and form encodings reshape
// whitespace, a paragraph break may be "\n", "\n\n" or nothing), Unicode in
// NFC. The body is decoded first in every usual way (percent-encoding with
// "+" for space -- in text without literal spaces, or where three escapes
// come close together --, JSON string escapes and \uXXXX, HTML entities,
// nested, at most ten versions). A body leaks when it contains a run of RUN squeezed
// characters of a draft that is not also a run of a text Veil approved (the
// protected text it wrote, or an original the person chose to send
// unprotected): what a body may carry is what the approved text already
// reveals, and nothing of the draft beyond it. A draft shorter than RUN
// (but at least MIN_WHOLE) leaks only whole.
//
// Why RUN = 20: 20 non-space characters are about four English words. Shorter
// runs are shared by unrelated prose far too often: on 300 news articles of
// overlapping topics (gensim's Lee corpus; bench/extension_bench.py), 80 % of
// article pairs share an 8-character run, 22 % a 12-, 5 % a 16-, 2.2 % a 20-,
// 1.1 % a 24- and 0.3 % a 32-character one -- at 20 what is shared is mostly
// names ("PrimeMinisterJohnHoward"). A site's ordinary traffic is not prose
// (ids, telemetry, JSON keys: "application/json" is 16), and a part of a
// prompt as short as four words -- a title made of its first words, one
// clause -- is still caught; a longer run would let such parts through.

export const RUN = 20;
export const MIN_WHOLE = 8;

const SPACE = /[\s\u00a0\u1680\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]+/g;
// eslint-disable-next-line no-control-regex -- the ASCII range starts at U+0000 on purpose
const NON_ASCII = /[^\x00-\x7f]/;

/** The text without whitespace, NFC. */
export function squeeze(text) {
  let s = String(text ?? "");
  if (NON_ASCII.test(s)) s = s.normalize("NFC");
  return s.replace(SPACE, "");
}

// ---------------------------------------------------------------- decoding

function percentDecode(s) {
  return s.replace(/\+/g, " ").replace(/(?:%[0-9a-fA-F]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run.replace(/%([0-9a-fA-F]{2})/g, (_, hex) => String.fromCharCode(parseInt(hex, 16)));
    }
  });
}

const JSON_ESC = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

function jsonUnescape(s) {
  return s.replace(/\\(u[0-9a-fA-F]{4}|["\\/bfnrt])/g, (_, e) => (e.length === 5 ? String.fromCharCode(parseInt(e.slice(1), 16)) : JSON_ESC[e]));
}

const ENTITIES = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'", nbsp: " " };

function htmlUnescape(s) {
  return s.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|amp|lt|gt|quot|apos|nbsp);/gi, (m, e) => {
    const lower = e.toLowerCase();
    if (lower[0] !== "#") return ENTITIES[lower] ?? m;
    const code = lower[1] === "x" ? parseInt(lower.slice(2), 16) : parseInt(lower.slice(1), 10);
    return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : m;
  });
}

/** The text and its decodings (at most 10 versions). */
export function decodings(text) {
  const out = [text];
  const seen = new Set(out);
  for (let i = 0; i < out.length && out.length < 10; i++) {
    const s = out[i];
    const next = [];
    // A URL or a form body has no literal spaces ("+" is a space there); inside
    // other text, percent-encoding has its escapes close together (a protected
    // prompt's random characters make a lone "%4a" now and then).
    const spaced = / /.test(s);
    if (spaced ? /(?:%[0-9a-fA-F]{2}[^%\s]{0,24}){3}/.test(s) : /%[0-9a-fA-F]{2}|\+/.test(s)) next.push(percentDecode(s));
    if (/\\[u"\\/bfnrt]/.test(s)) next.push(jsonUnescape(s));
    if (/&(#x?[0-9a-fA-F]+|amp|lt|gt|quot|apos|nbsp);/i.test(s)) next.push(htmlUnescape(s));
    for (const n of next) {
      if (!seen.has(n)) {
        seen.add(n);
        out.push(n);
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- runs

const BASE = 0x01000193;
const KEY = 0x7ffffffe; // the hash's keys are never -1 (an empty slot)
const powCache = new Map();

function power(L) {
  let p = powCache.get(L);
  if (p === undefined) {
    p = 1;
    for (let i = 1; i < L; i++) p = Math.imul(p, BASE);
    powCache.set(L, p);
  }
  return p;
}

// A rolling hash of every window of length L (written out in each loop below:
// a callback per window costs several times the lookup itself).
//   h(s[i, i+L)) = sum s[i+k] * BASE^(L-1-k)  (mod 2^32)

/**
 * hash -> first start, open addressing in typed arrays (a Map costs ~40 ns a
 * lookup; this ~5: a 100 KB body is 100,000 lookups per decoding).
 */
class WindowTable {
  constructor(expected) {
    let size = 16;
    while (size < expected * 2) size *= 2;
    this.mask = size - 1;
    this.keys = new Int32Array(size).fill(-1);
    this.values = new Int32Array(size);
    this.count = 0;
  }

  _slot(k) {
    let i = Math.imul(k, 0x9e3779b1) & this.mask;
    while (this.keys[i] !== -1 && this.keys[i] !== k) i = (i + 1) & this.mask;
    return i;
  }

  has(k) {
    return this.keys[this._slot(k)] === k;
  }

  /** The first start stored for `k`, or undefined. */
  get(k) {
    const i = this._slot(k);
    return this.keys[i] === k ? this.values[i] : undefined;
  }

  /** Store `v` for `k` unless `k` is there already. */
  add(k, v) {
    const i = this._slot(k);
    if (this.keys[i] === k) return;
    this.keys[i] = k;
    this.values[i] = v;
    this.count += 1;
  }

}

/** A text indexed by its windows: hash -> first start. */
class Runs {
  constructor(squeezed, L) {
    this.s = squeezed;
    this.L = L;
    const at = new WindowTable(Math.max(1, squeezed.length - L + 1));
    this.at = at;
    if (squeezed.length < L) return;
    const top = power(L);
    let h = 0;
    for (let i = 0; i < L; i++) h = (Math.imul(h, BASE) + squeezed.charCodeAt(i)) | 0;
    at.add(h & KEY, 0);
    for (let i = L; i < squeezed.length; i++) {
      h = (Math.imul(h - Math.imul(squeezed.charCodeAt(i - L), top), BASE) + squeezed.charCodeAt(i)) | 0;
      at.add(h & KEY, i - L + 1);
    }
  }

  /** True when s[i, i+L) is one of this text's windows (hash `h`). */
  has(h, s, i) {
    const j = this.at.get(h);
    if (j === undefined) return false;
    if (s.startsWith(this.s.slice(j, j + this.L), i)) return true;
    return this.s.includes(s.slice(i, i + this.L)); // a hash collision: look it up for real
  }
}

/** The first window of `s` that is a run of a draft of `group` and of no approved text. */
function scan(s, { L, entries, tables, approved }) {
  if (s.length < L) return null;
  const top = power(L);
  const n = tables.length;
  let h = 0;
  for (let i = 0; i < L; i++) h = (Math.imul(h, BASE) + s.charCodeAt(i)) | 0;
  for (let i = L; ; i++) {
    const start = i - L;
    const k = h & KEY;
    for (let t = 0; t < n; t++) {
      if (!tables[t].has(k) || !entries[t].runs.has(k, s, start)) continue;
      if (!approved.some((a) => a.has(k, s, start))) return { draft: entries[t].draft, run: s.slice(start, i) };
      break;
    }
    if (i === s.length) return null;
    h = (Math.imul(h - Math.imul(s.charCodeAt(start), top), BASE) + s.charCodeAt(i)) | 0;
  }
}

/** The run length a draft is matched with (0: too short to be told apart from ordinary traffic). */
export function runLength(squeezed) {
  if (squeezed.length >= RUN) return RUN;
  return squeezed.length >= MIN_WHOLE ? squeezed.length : 0;
}

/**
 * What a LeakIndex computed, kept for the next one (the guard rebuilds its
 * index whenever a draft changes; the texts mostly stay the same).
 */
export class IndexCache {
  constructor() {
    this.squeezed = new Map(); // text -> squeezed
    this.runs = new Map(); // L -> (squeezed -> Runs); the same string objects, so their hashes are cached
  }

  squeeze(text) {
    let s = this.squeezed.get(text);
    if (s === undefined) {
      s = squeeze(text);
      this.squeezed.set(text, s);
    }
    return s;
  }

  runsOf(s, L) {
    let byText = this.runs.get(L);
    if (!byText) {
      byText = new Map();
      this.runs.set(L, byText);
    }
    let r = byText.get(s);
    if (!r) {
      r = new Runs(s, L);
      byText.set(s, r);
    }
    return r;
  }

  /** Forget what the texts in use no longer need. */
  keep(texts) {
    const live = new Set(texts.map((t) => this.squeeze(t)));
    for (const [text, s] of this.squeezed) if (!live.has(s)) this.squeezed.delete(text);
    for (const byText of this.runs.values()) for (const s of byText.keys()) if (!live.has(s)) byText.delete(s);
  }
}

/**
 * The drafts and approved texts a body is checked against, indexed once.
 * `drafts`: [{text, ...any}], `approved`: [text].
 */
export class LeakIndex {
  constructor(drafts, approved, cache = new IndexCache()) {
    this.cache = cache;
    this.drafts = [];
    for (const draft of drafts) {
      const s = cache.squeeze(draft.text);
      const L = runLength(s);
      if (L) this.drafts.push({ draft, s, L, runs: null });
    }
    this.approved = approved.map((a) => cache.squeeze(a)).filter(Boolean);
    this.approvedRuns = new Map(); // L -> [Runs]
  }

  get empty() {
    return this.drafts.length === 0;
  }

  _approvedAt(L) {
    let list = this.approvedRuns.get(L);
    if (!list) {
      list = this.approved.filter((a) => a.length >= L).map((a) => this.cache.runsOf(a, L));
      this.approvedRuns.set(L, list);
    }
    return list;
  }

  /** The drafts, grouped by run length (one rolling hash per length and decoding). */
  _groups() {
    if (!this.groups) {
      this.groups = [];
      const byL = new Map();
      for (const entry of this.drafts) {
        entry.runs = this.cache.runsOf(entry.s, entry.L);
        if (!byL.has(entry.L)) byL.set(entry.L, []);
        byL.get(entry.L).push(entry);
      }
      for (const [L, entries] of byL) {
        // One table per draft, looked up in turn: cheaper than building their
        // union for every new index (a guard holds a handful of drafts).
        this.groups.push({ L, entries, tables: entries.map((e) => e.runs.at), approved: this._approvedAt(L) });
      }
    }
    return this.groups;
  }

  /**
   * The first draft `text` leaks, as {draft, run}, or null. `text` is a body or
   * a URL as it would go out; it is decoded here.
   */
  find(text) {
    if (this.empty || !text) return null;
    const groups = this._groups();
    let previous = null;
    for (const version of decodings(String(text))) {
      const s = squeeze(version);
      if (s === previous) continue;
      previous = s;
      for (const group of groups) {
        const hit = scan(s, group);
        if (hit) return hit;
      }
    }
    return null;
  }
}

// ---------------------------------------------------------------- bodies

/** Bodies larger than this are not read: refused while a draft exists. */
export const MAX_READ = 16 * 1024 * 1024;

function isGzip(bytes) {
  return bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b;
}

function utf8(bytes) {
  return new TextDecoder("utf-8", { fatal: false }).decode(bytes);
}

async function readBytes(bytes) {
  if (!isGzip(bytes)) return { text: utf8(bytes) };
  if (typeof DecompressionStream === "undefined") return { opaque: "a compressed body" };
  try {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return { text: utf8(new Uint8Array(await new Response(stream).arrayBuffer())) };
  } catch {
    return { opaque: "a compressed body Veil could not read" };
  }
}

async function readBlob(blob) {
  if (blob.size > MAX_READ) return { opaque: `a ${Math.round(blob.size / 1e6)} MB body` };
  return readBytes(new Uint8Array(await blob.arrayBuffer()));
}

function viewBytes(body) {
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
}

/**
 * What a request body says, as the guard can check it:
 * {text} now, {pending: Promise<{text}|{opaque}>} after reading, or {opaque: why}
 * (a stream: it cannot be read before it leaves).
 */
export function bodyText(body) {
  if (body === null || body === undefined) return { text: "" };
  if (typeof body === "string") return { text: body };
  if (typeof URLSearchParams !== "undefined" && body instanceof URLSearchParams) return { text: body.toString() };
  if (typeof ReadableStream !== "undefined" && body instanceof ReadableStream) return { opaque: "a streamed body" };
  if (typeof Blob !== "undefined" && body instanceof Blob) return { pending: readBlob(body) };
  if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) {
    const bytes = viewBytes(body);
    return isGzip(bytes) ? { pending: readBytes(bytes.slice()) } : { text: utf8(bytes) };
  }
  if (typeof FormData !== "undefined" && body instanceof FormData) {
    const parts = [];
    const files = [];
    for (const [name, value] of body.entries()) {
      parts.push(name);
      if (typeof value === "string") parts.push(value);
      else files.push(value);
    }
    const text = parts.join("\n");
    if (!files.length) return { text };
    return {
      pending: Promise.all(files.map(readBlob)).then((read) => {
        const opaque = read.find((r) => r.opaque);
        return opaque || { text: [text, ...read.map((r) => r.text)].join("\n") };
      }),
    };
  }
  if (typeof Document !== "undefined" && body instanceof Document) return { text: new XMLSerializer().serializeToString(body) };
  return { text: String(body) };
}
