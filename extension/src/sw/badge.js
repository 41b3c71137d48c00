// The toolbar badge: what it says for a tab, from the site's settings and the
// core's status.

import { loadCoreStatus, loadSettings } from "./storage.js";
import { siteIdFor } from "./sites.js";

/** {text, color, title} of the badge for a site (null: not a protected site). */
export function badgeFor(siteId, settings, coreStatus) {
  if (!siteId) return { text: "", color: "#6b7280", title: "Veil" };
  const site = settings.sites[siteId];
  if (!site.enabled) return { text: "off", color: "#6b7280", title: "Veil: protection is off for this site" };
  if (coreStatus?.state === "error") {
    return { text: "!", color: "#b91c1c", title: `Veil: the privacy core failed (${coreStatus.error}); sends are blocked` };
  }
  if (coreStatus?.state !== "ready") return { text: "…", color: "#b45309", title: "Veil: the privacy core is starting" };
  return { text: site.mode === "numbers" ? "#" : "on", color: "#15803d", title: `Veil: protected, ε = ${site.epsilon} per character (${site.mode})` };
}

export async function refreshBadge(ext, tabId, url) {
  if (tabId === undefined || tabId < 0) return;
  const [coreStatus, settings] = await Promise.all([loadCoreStatus(ext), loadSettings(ext)]);
  const badge = badgeFor(url ? siteIdFor(url, settings) : null, settings, coreStatus);
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
