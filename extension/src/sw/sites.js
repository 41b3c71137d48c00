// The site registry as the worker sees it: the built-in sites (../sites.js)
// plus the sites the person added, whose content script is registered here.

import { badRequest } from "../errors.js";
import { SITES, customSiteId, originMatchPattern, siteForUrl } from "../sites.js";

/** The site id for a page URL: a built-in site, an added origin, or null. */
export function siteIdFor(url, settings) {
  const builtin = siteForUrl(url);
  if (builtin) return builtin.id;
  try {
    const id = customSiteId(new URL(url).origin);
    if (settings.custom[id]) return id;
  } catch {
    /* not a URL */
  }
  return null;
}

/** Every site, built-in first, as the pages list them. */
export function siteList(settings) {
  return [
    ...SITES.map((s) => ({ id: s.id, name: s.name, hosts: s.hosts, custom: false })),
    ...Object.entries(settings.custom).map(([id, c]) => ({ id, name: c.name, hosts: [new URL(c.origin).host], origin: c.origin, custom: true })),
  ];
}

/** {url, siteId, origin} of a page. */
export function pageSite(url, settings) {
  let origin = null;
  try {
    origin = new URL(url).origin;
  } catch {
    /* not a URL */
  }
  return { url, siteId: siteIdFor(url, settings), origin };
}

/** Register the content script for an added origin (Chrome must have granted it). */
export async function registerSite(ext, id, origin) {
  const pattern = originMatchPattern(origin);
  if (!(await ext.permissions.contains([pattern]))) {
    throw badRequest(`Chrome has not granted access to ${origin}; accept the permission prompt to add it`);
  }
  const existing = await ext.scripting.registered([id]);
  if (existing.length === 0) {
    await ext.scripting.register([{ id, matches: [pattern], js: ["content.js"], runAt: "document_start", allFrames: false, persistAcrossSessions: true }]);
  }
}

export async function unregisterSite(ext, id) {
  await ext.scripting.unregister([id]).catch(() => {});
}
