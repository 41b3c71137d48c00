// The site registry as the worker sees it: the built-in sites (../sites.js)
// plus the sites the person added, whose content script is registered here.

import { badRequest } from "../errors.js";
import { customSiteId, originMatchPattern, siteForUrl, SITES } from "../sites.js";

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

/** The id of an added site's network guard script (its content script's id is the site id). */
export function guardScriptId(id) {
  return `guard:${id}`;
}

/** The two scripts an added site gets, as the built-in sites do in the manifest. */
function siteScripts(id, pattern) {
  const common = { matches: [pattern], runAt: "document_start", allFrames: false, persistAcrossSessions: true };
  return [
    { id, js: ["content.js"], ...common },
    { id: guardScriptId(id), js: ["guard.js"], world: "MAIN", ...common },
  ];
}

async function registerMissing(ext, id, pattern) {
  const wanted = siteScripts(id, pattern);
  const existing = new Set((await ext.scripting.registered(wanted.map((s) => s.id))).map((s) => s.id));
  const missing = wanted.filter((s) => !existing.has(s.id));
  if (missing.length) await ext.scripting.register(missing);
}

/** Register the content script and the network guard for an added origin (Chrome must have granted it). */
export async function registerSite(ext, id, origin) {
  const pattern = originMatchPattern(origin);
  if (!(await ext.permissions.contains([pattern]))) {
    throw badRequest(`Chrome has not granted access to ${origin}; accept the permission prompt to add it`);
  }
  await registerMissing(ext, id, pattern);
}

/** Every added site has both scripts (sites added by an older Veil had no guard). */
export async function ensureSiteScripts(ext) {
  const { settings } = await ext.storage.local.get("settings");
  for (const [id, site] of Object.entries(settings?.custom || {})) {
    const pattern = originMatchPattern(site.origin);
    if (await ext.permissions.contains([pattern])) await registerMissing(ext, id, pattern);
  }
}

export async function unregisterSite(ext, id) {
  // One at a time: Chrome refuses the whole call when one id is not registered.
  for (const scriptId of [id, guardScriptId(id)]) await ext.scripting.unregister([scriptId]).catch(() => {});
}
