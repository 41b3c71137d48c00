// Settings: defaults, validation and the storage layout (pure functions).
//
// chrome.storage.local holds:
//   settings          {schema, header, coreTimeoutMs, historyLimit, sites: {id: SiteSettings},
//                      custom: {id: {origin, name}}}
//   history:<siteId>  [{id, ts, status, epsilon, mode, length}] newest last (a small index)
//   entry:<id>        {id, ts, siteId, status, original, sent, epsilon, mode, notice, receipt, ...}
//                     (one key per send, so a send never rewrites the whole history)
//   rootguard         {profile, trueValues, state, events: [{ts, event, reason}]}
//                     (state: RootGuard's cache, with its ledger inside; events: set-up and resets)
// chrome.storage.session holds core status: {state, ms, fromSnapshot, error, at}.

// The modes, the ε limits and the header's meanings are py_core's (py_core/protect.py
// reads the same file); esbuild inlines it into the bundle.
import CORE from "../../py_core/site_settings.json" with { type: "json" };
import { SITES } from "./sites.js";

export const SCHEMA = 1;
export const MODES = Object.freeze(Object.keys(CORE.modes));
export const DEFAULT_MODE = CORE.default_mode;
export const EPSILON_MIN = CORE.epsilon.min;
export const EPSILON_MAX = CORE.epsilon.max;
export const EPSILON_STEP = CORE.epsilon.step;
export const DEFAULT_EPSILON = CORE.epsilon.default;
/** Header settings with a meaning of their own; any other text is sent as given. */
export const HEADER_DEFAULT = CORE.header.default; // py_core's DEFAULT_HEADER
export const HEADER_NONE = CORE.header.none; // no header
/** Per-site alphabets: "scripts" (each script in its own alphabet) or "ascii" (everything into ASCII). */
export const ALPHABETS = Object.freeze(Object.keys(CORE.alphabets.choices));
export const DEFAULT_ALPHABETS = CORE.alphabets.default;
/** The restoration header's language: "auto" (the prompt's) or a fixed one. */
export const HEADER_LANGUAGES = Object.freeze([...CORE.header_language.choices]);
export const DEFAULT_HEADER_LANGUAGE = CORE.header_language.default;

export const DEFAULT_SITE = Object.freeze({
  enabled: true,
  epsilon: DEFAULT_EPSILON,
  mode: DEFAULT_MODE,
  failOpen: false, // "send unprotected" when the core is unavailable
  header: null, // null: the global header
  alphabets: DEFAULT_ALPHABETS, // "fold" (accents into ASCII), "scripts" or "ascii" (everything, script hidden)
  headerLanguage: DEFAULT_HEADER_LANGUAGE, // "auto": the prompt's language
});

export function defaultSettings() {
  const sites = {};
  for (const site of SITES) sites[site.id] = { ...DEFAULT_SITE };
  return {
    schema: SCHEMA,
    header: HEADER_DEFAULT, // HEADER_DEFAULT: py_core's DEFAULT_HEADER; HEADER_NONE: none; else custom
    coreTimeoutMs: 6000,
    historyLimit: 200,
    sites,
    custom: {},
  };
}

/** Fill in anything missing (new built-in sites, new fields) without touching what is set. */
export function normalizeSettings(stored) {
  const base = defaultSettings();
  if (!stored || typeof stored !== "object") return base;
  const out = { ...base, ...stored, sites: { ...base.sites }, custom: { ...(stored.custom || {}) } };
  for (const [id, value] of Object.entries(stored.sites || {})) {
    out.sites[id] = { ...DEFAULT_SITE, ...value };
  }
  for (const id of Object.keys(out.custom)) {
    out.sites[id] = { ...DEFAULT_SITE, ...(out.sites[id] || {}) };
  }
  return out;
}

export function validateEpsilon(value) {
  const eps = Number(value);
  if (typeof value !== "number" || !Number.isFinite(eps) || eps < EPSILON_MIN || eps > EPSILON_MAX) {
    throw new Error(`epsilon must be a number from ${EPSILON_MIN} to ${EPSILON_MAX}; got ${JSON.stringify(value)}`);
  }
  return eps;
}

/** Apply a validated patch to one site's settings; throws with the bad value named. */
export function patchSite(current, patch) {
  const next = { ...DEFAULT_SITE, ...current };
  for (const [key, value] of Object.entries(patch || {})) {
    switch (key) {
      case "enabled":
      case "failOpen":
        if (typeof value !== "boolean") throw new Error(`${key} must be true or false; got ${JSON.stringify(value)}`);
        next[key] = value;
        break;
      case "epsilon":
        next.epsilon = validateEpsilon(value);
        break;
      case "mode":
        if (!MODES.includes(value)) throw new Error(`mode must be one of ${MODES.join(", ")}; got ${JSON.stringify(value)}`);
        next.mode = value;
        break;
      case "header":
        if (value !== null && typeof value !== "string") throw new Error("header must be text or null (use the global header)");
        next.header = value;
        break;
      case "alphabets":
        if (!ALPHABETS.includes(value)) throw new Error(`alphabets must be one of ${ALPHABETS.join(", ")}; got ${JSON.stringify(value)}`);
        next.alphabets = value;
        break;
      case "headerLanguage":
        if (!HEADER_LANGUAGES.includes(value)) throw new Error(`headerLanguage must be one of ${HEADER_LANGUAGES.join(", ")}; got ${JSON.stringify(value)}`);
        next.headerLanguage = value;
        break;
      default:
        throw new Error(`unknown site setting ${JSON.stringify(key)}`);
    }
  }
  return next;
}

export function historyKey(siteId) {
  return `history:${siteId}`;
}

export function entryKey(id) {
  return `entry:${id}`;
}

/** The header setting a site sends: its own, else the global one (py_core resolves it). */
export function effectiveHeader(settings, siteId) {
  const own = settings.sites[siteId]?.header;
  if (own !== null && own !== undefined) return own;
  return settings.header;
}
