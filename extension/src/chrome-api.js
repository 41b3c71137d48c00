// The one module that touches chrome.*. The service worker, the content script,
// the offscreen document and the extension pages all go through `ext`; the
// worker's modules (sw/*.js) take it as their first argument, so the unit tests
// in extension/test/ pass a fake with the same shape (test/fake-ext.mjs) and run
// them under Node without a browser. `chrome` is looked up at call time, so this
// module can be imported where there is none.

const chromeNow = () => globalThis.chrome;

export const ext = {
  runtime: {
    id: () => chromeNow().runtime.id,
    /** The extension's URL for `path` ("" gives its origin with a trailing slash). */
    url: (path = "") => chromeNow().runtime.getURL(path),
    send: (msg) => chromeNow().runtime.sendMessage(msg),
    /** Listen for messages: `fn(msg, sender, sendResponse)`, returning true to answer later. */
    onMessage: (fn) => chromeNow().runtime.onMessage.addListener(fn),
    onStartup: (fn) => chromeNow().runtime.onStartup.addListener(fn),
    onInstalled: (fn) => chromeNow().runtime.onInstalled.addListener(fn),
    contexts: (filter) => chromeNow().runtime.getContexts(filter),
  },
  storage: {
    local: {
      get: (keys) => chromeNow().storage.local.get(keys),
      set: (items) => chromeNow().storage.local.set(items),
      remove: (keys) => chromeNow().storage.local.remove(keys),
    },
    session: {
      get: (keys) => chromeNow().storage.session.get(keys),
      set: (items) => chromeNow().storage.session.set(items),
    },
    /** `fn(changes, areaName)` on every change. */
    onChanged: (fn) => chromeNow().storage.onChanged.addListener(fn),
  },
  offscreen: {
    create: (options) => chromeNow().offscreen.createDocument(options),
  },
  action: {
    /** Set a tab's badge text, colour and title together. */
    setBadge: async (tabId, { text, color, title }) => {
      const action = chromeNow().action;
      await action.setBadgeText({ tabId, text });
      await action.setBadgeBackgroundColor({ tabId, color });
      await action.setTitle({ tabId, title });
    },
  },
  tabs: {
    query: (query) => chromeNow().tabs.query(query),
    get: (tabId) => chromeNow().tabs.get(tabId),
    send: (tabId, msg) => chromeNow().tabs.sendMessage(tabId, msg),
    onUpdated: (fn) => chromeNow().tabs.onUpdated.addListener(fn),
    onActivated: (fn) => chromeNow().tabs.onActivated.addListener(fn),
  },
  permissions: {
    contains: (origins) => chromeNow().permissions.contains({ origins }),
    request: (origins) => chromeNow().permissions.request({ origins }),
    remove: (origins) => chromeNow().permissions.remove({ origins }),
  },
  scripting: {
    registered: (ids) => chromeNow().scripting.getRegisteredContentScripts({ ids }),
    register: (scripts) => chromeNow().scripting.registerContentScripts(scripts),
    unregister: (ids) => chromeNow().scripting.unregisterContentScripts({ ids }),
    /** Run `files` in a tab now, in Veil's isolated world or (world "MAIN") the page's own. */
    inject: (tabId, files, world = "ISOLATED") => chromeNow().scripting.executeScript({ target: { tabId }, files, world }),
  },
  sidePanel: {
    /**
     * Open Veil's side panel on `tabId`, showing sidepanel.html?tab=ID. Chrome
     * allows it only in answer to a user gesture: call this first, before any
     * await (setOptions is not awaited before open for that reason).
     */
    openFor: (tabId) => {
      const panel = chromeNow().sidePanel;
      const set = panel.setOptions({ tabId, path: `sidepanel.html?tab=${tabId}`, enabled: true });
      return Promise.all([set, panel.open({ tabId })]);
    },
  },
  windows: {
    /** A small window of the extension's own `path` (the panel where Chrome refuses sidePanel.open). */
    openPopup: (path, { width, height }) => chromeNow().windows.create({ url: chromeNow().runtime.getURL(path), type: "popup", width, height, focused: true }),
  },
  commands: {
    /** `fn(command, tab)` when the person presses one of the manifest's shortcuts. */
    onCommand: (fn) => chromeNow().commands.onCommand.addListener(fn),
  },
  /** Run `fn` while holding a named Web Lock (serialises read-modify-write of storage). */
  withLock(name, fn) {
    if (globalThis.navigator?.locks) return navigator.locks.request(name, fn);
    return fn();
  },
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};
