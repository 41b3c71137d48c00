// A fake of chrome-api.js's `ext` for the worker's unit tests: chrome.storage
// in memory (values cloned, as Chrome serialises them), Web Locks as a real
// mutex, an offscreen document that runs a fake core (`core`: op -> function),
// and records of badges, scripts and messages.

import { Msg, Target } from "../src/messages.js";

export const EXT_ID = "veilfakeid";
export const EXT_ORIGIN = `chrome-extension://${EXT_ID}`;

/** A sender as Chrome describes a tab's content script, or one of Veil's own pages. */
export const senders = {
  content: (url) => ({ id: EXT_ID, url, origin: new URL(url).origin, tab: { id: 7, url } }),
  page: (path = "popup.html") => ({ id: EXT_ID, url: `${EXT_ORIGIN}/${path}`, origin: EXT_ORIGIN }),
  otherExtension: () => ({ id: "someoneelse", url: "chrome-extension://someoneelse/x.html", origin: "chrome-extension://someoneelse" }),
};

function area() {
  const items = new Map();
  const pick = (keys) => {
    if (keys === null || keys === undefined) return [...items.keys()];
    return typeof keys === "string" ? [keys] : Array.isArray(keys) ? keys : Object.keys(keys);
  };
  return {
    items,
    get: async (keys) => Object.fromEntries(pick(keys).filter((k) => items.has(k)).map((k) => [k, structuredClone(items.get(k))])),
    set: async (values) => {
      for (const [k, v] of Object.entries(values)) if (v !== undefined) items.set(k, structuredClone(v));
    },
    remove: async (keys) => {
      for (const k of pick(keys)) items.delete(k);
    },
    dump: () => Object.fromEntries([...items].map(([k, v]) => [k, structuredClone(v)])),
  };
}

/**
 * `core`: {op: (args) => result}; a function that throws {code, message} makes
 * the core answer {ok: false, error}. `offscreen: false` starts without the
 * offscreen document (the first call must create it).
 */
export function fakeExt({ core = {}, tabs = [], granted = [], offscreen = true, answerAfterMs = 0 } = {}) {
  const state = {
    offscreenOpen: offscreen,
    offscreenCreated: 0,
    sent: [],
    badges: new Map(),
    scripts: new Map(),
    injected: [],
    coreCalls: [],
    locksHeld: [],
  };
  const locks = new Map();
  const local = area();
  const session = area();

  async function answerCore(msg) {
    const { op, args } = msg.data;
    state.coreCalls.push({ op, args: structuredClone(args) });
    if (answerAfterMs) await new Promise((resolve) => setTimeout(resolve, answerAfterMs));
    const fn = core[op];
    if (!fn) return { ok: false, error: { code: "unknown-op", message: `unknown op ${op}` }, ms: 0 };
    try {
      return { ok: true, data: structuredClone(await fn(structuredClone(args))), ms: 1 };
    } catch (err) {
      return { ok: false, error: { code: err.code ?? "internal", message: err.message }, ms: 1 };
    }
  }

  const ext = {
    runtime: {
      id: () => EXT_ID,
      url: (path = "") => `${EXT_ORIGIN}/${path}`,
      send: async (msg) => {
        state.sent.push(structuredClone(msg));
        if (msg.target === Target.OFFSCREEN && msg.type === Msg.CORE_CALL) {
          if (!state.offscreenOpen) throw new Error("Could not establish connection. Receiving end does not exist.");
          return answerCore(msg);
        }
        return undefined;
      },
      onMessage: () => {},
      onStartup: () => {},
      onInstalled: () => {},
      contexts: async ({ contextTypes }) => (state.offscreenOpen && contextTypes.includes("OFFSCREEN_DOCUMENT") ? [{ contextType: "OFFSCREEN_DOCUMENT" }] : []),
    },
    storage: { local, session, onChanged: () => {} },
    offscreen: {
      create: async () => {
        if (state.offscreenOpen) throw new Error("Only a single offscreen document may be created.");
        state.offscreenOpen = true;
        state.offscreenCreated += 1;
      },
    },
    action: {
      setBadge: async (tabId, badge) => {
        state.badges.set(tabId, { ...badge });
      },
    },
    tabs: {
      query: async () => tabs.map((t) => ({ ...t })),
      get: async (tabId) => tabs.find((t) => t.id === tabId),
      send: async () => undefined,
      onUpdated: () => {},
      onActivated: () => {},
    },
    permissions: {
      contains: async (origins) => origins.every((o) => granted.includes(o)),
      request: async () => false,
      remove: async () => true,
    },
    scripting: {
      registered: async (ids) => ids.filter((id) => state.scripts.has(id)).map((id) => state.scripts.get(id)),
      register: async (scripts) => {
        for (const s of scripts) state.scripts.set(s.id, s);
      },
      unregister: async (ids) => {
        for (const id of ids) {
          if (!state.scripts.delete(id)) throw new Error(`Nonexistent script ID '${id}'`);
        }
      },
      inject: async (tabId, files, world = "ISOLATED") => {
        state.injected.push({ tabId, files, world });
      },
    },
    withLock(name, fn) {
      const before = locks.get(name) || Promise.resolve();
      const run = before.then(() => {
        state.locksHeld.push(name);
        return fn();
      });
      locks.set(name, run.catch(() => {}));
      return run;
    },
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  };
  return { ext, state, local, session };
}

/**
 * A stand-in for the Python core, one function per op in core-ops.js, shaped
 * like the bridge's answers. RootGuard's state counts the draws it made, so a
 * test can tell whether a state was read, advanced and stored exactly once.
 */
export function fakeCore(overrides = {}) {
  const receipt = (text, epsilon, words) => ({
    epsilon_requested: epsilon,
    epsilon_per_char: epsilon,
    keep_probability: 0.5,
    chars_perturbed: text.length,
    chars_protected: 0,
    epsilon_total_basic: epsilon * text.length,
    epsilon_total_composed: words ? 1.5 : null,
    delta: 1e-6,
    header_included: true,
    word_count: 1,
    ...(words ? { words: [] } : {}),
  });
  const view = (state) => ({ state, noisy: { age: 50 + state.draws }, ledger: [{ seq: state.draws }], describe: { roots: {} } });
  const sanitize = (args, preview) => {
    if (args.mode !== "text" && !args.rootguard) {
      const err = new Error("numbers mode is on but no RootGuard profile with your values is saved");
      err.code = "setup_required";
      throw err;
    }
    const state = args.rootguard ? { draws: args.rootguard.state.draws + 1 } : null;
    const numbers = args.mode === "numbers";
    const text = `protected(${args.text})`;
    const out = {
      text,
      perturbed: text,
      receipt: numbers ? null : receipt(args.text, args.epsilon, preview),
      replacements: args.rootguard ? [{ name: "age", start: 0, original: "52", replacement: "57" }] : [],
      rootguardState: state,
    };
    if (preview) out.words = numbers ? null : [];
    return out;
  };
  return {
    ping: () => ({ python: "3.13", rootguard: true, defaultHeader: "DEFAULT HEADER" }),
    sanitize: (args) => sanitize(args, false),
    preview: (args) => sanitize(args, true),
    explain: ({ epsilon }) => ({ epsilonRequested: epsilon, epsilonPerChar: epsilon, keepProbability: 0.5, changedShare: 0.5, nameIntact6: 0.015625, k: 94 }),
    composed_epsilon: ({ n, delta }) => ({ epsilon_total_composed: n / 10, delta }),
    rootguard_default: () => ({ profile: { values: { age: { domain: [0, 120] } } } }),
    rootguard_init: () => view({ draws: 0 }),
    rootguard_reset: ({ state }) => view({ draws: state.draws + 100 }),
    rootguard_view: ({ state }) => view(state),
    rootguard_describe: () => ({ describe: { roots: {} } }),
    // The real comparison is py_core's (tests/extension/test_bridge.py); here: by draws.
    rootguard_import_check: ({ record, here }) => {
      const relation = !here ? "new" : here.state.draws === record.state.draws ? "same" : record.state.draws > here.state.draws ? "extends" : "conflict";
      return { relation, reasons: relation === "conflict" ? ["age was drawn differently"] : [], record, ...view(record.state) };
    },
    ...overrides,
  };
}
