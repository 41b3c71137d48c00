// The toolbar badge: what it says for a tab, from the site's settings, the
// core's status and what the tab's content script found on the page.

import { siteIdFor } from "./sites.js";
import { loadCoreStatus, loadSettings } from "./storage.js";

export const CHANGED_PAGE =
  "this site changed its page; Veil protects it with its general rules and the network guard";

/**
 * {text, color, title} of the badge for a site (null: not a protected site).
 * `check`: the page's {adapterFound, editorFound, guard}, or undefined.
 */
export function badgeFor(siteId, settings, coreStatus, check) {
  if (!siteId) return { text: "", color: "#6b7280", title: "Veil" };
  const site = settings.sites[siteId];
  if (!site.enabled) return { text: "off", color: "#6b7280", title: "Veil: protection is off for this site" };
  if (coreStatus?.state === "error") {
    return { text: "!", color: "#b91c1c", title: `Veil: the privacy core failed (${coreStatus.error}); sends are blocked` };
  }
  if (coreStatus?.state !== "ready") return { text: "…", color: "#b45309", title: "Veil: the privacy core is starting" };
  const how = `ε = ${site.epsilon} per character (${site.mode})`;
  if (check && !check.adapterFound) return { text: "on?", color: "#b45309", title: `Veil: protected, ${how}; ${CHANGED_PAGE}` };
  return { text: site.mode === "numbers" ? "#" : "on", color: "#15803d", title: `Veil: protected, ${how}` };
}

const checkKey = (tabId) => `pageCheck:${tabId}`;

/** Keep what a tab's content script found (session storage: gone when the browser closes). */
export function savePageCheck(ext, tabId, check) {
  if (!Number.isInteger(tabId)) return Promise.resolve();
  return ext.storage.session.set({ [checkKey(tabId)]: check });
}

/** Forget it (the tab navigates: its new page reports again). */
export function clearPageCheck(ext, tabId) {
  return ext.storage.session.set({ [checkKey(tabId)]: null });
}

export async function refreshBadge(ext, tabId, url) {
  if (tabId === undefined || tabId < 0) return;
  const key = checkKey(tabId);
  const [coreStatus, settings, checks] = await Promise.all([loadCoreStatus(ext), loadSettings(ext), ext.storage.session.get(key)]);
  const badge = badgeFor(url ? siteIdFor(url, settings) : null, settings, coreStatus, checks[key] || undefined);
  try {
    await ext.action.setBadge(tabId, badge);
  } catch {
    /* the tab went away */
  }
}

export async function refreshAllBadges(ext) {
  const tabs = await ext.tabs.query({});
  await Promise.all(tabs.map((tab) => refreshBadge(ext, tab.id, tab.url)));
}
