// The service worker: only wiring. Its jobs live in sw/: handlers.js (one
// handler per message type, and the sender checks), core-client.js (the
// offscreen document and calls into the Python core), history.js (the history
// store), storage.js (settings and RootGuard's record), badge.js (the toolbar
// badge) and sites.js (which site a page is; registering added sites).
//
// It keeps no state in globals (Chrome may stop it at any moment): everything
// is read from chrome.storage on every message. Listeners are registered at
// top level so a restarted worker receives them.

import { ext } from "./chrome-api.js";
import { clearPageCheck, refreshAllBadges, refreshBadge } from "./sw/badge.js";
import { COMPOSE_COMMAND } from "./sw/compose.js";
import { ensureOffscreen } from "./sw/core-client.js";
import { dispatch } from "./sw/handlers.js";
import { ensureSiteScripts } from "./sw/sites.js";

ext.runtime.onMessage((msg, sender, sendResponse) => {
  const reply = dispatch(ext, msg, sender);
  if (!reply) return false;
  reply.then(sendResponse);
  return true;
});

// The keyboard shortcut (manifest "commands"): Veil's side panel on this tab.
// Opened at once, inside the key press's user gesture.
ext.commands.onCommand((command, tab) => {
  if (command === COMPOSE_COMMAND && Number.isInteger(tab?.id)) ext.sidePanel.openFor(tab.id).catch(() => {});
});

ext.runtime.onStartup(() => {
  ensureOffscreen(ext).catch(() => {});
});

ext.runtime.onInstalled(() => {
  ensureOffscreen(ext).catch(() => {});
  refreshAllBadges(ext).catch(() => {});
  // Sites added before the network guard existed get it now.
  ensureSiteScripts(ext).catch(() => {});
});

ext.tabs.onUpdated((tabId, info, tab) => {
  if (info.status === "loading") {
    // A new page: what the old one's content script found no longer holds.
    clearPageCheck(ext, tabId)
      .then(() => refreshBadge(ext, tabId, tab.url))
      .catch(() => {});
  } else if (info.url) refreshBadge(ext, tabId, tab.url).catch(() => {});
});

ext.tabs.onActivated(({ tabId }) => {
  ext.tabs
    .get(tabId)
    .then((tab) => refreshBadge(ext, tabId, tab.url))
    .catch(() => {});
});

// Every time the worker starts (browser start, a message, an event), make sure
// the core is up: it is cheap when the offscreen document already exists.
ensureOffscreen(ext).catch(() => {});
