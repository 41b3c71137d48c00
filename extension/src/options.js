// The options page: sites, the restoration header, RootGuard's profile and
// cached values, and the history of originals.

import { ext } from "./chrome-api.js";
import { Msg } from "./messages.js";
import { renderMemo, wireMemo } from "./options-memo.js";
import { renderRootguard, wireRootguard } from "./options-rootguard.js";
import { coreStatusText, el, send } from "./page-api.js";
import { replyNodes, replySummary } from "./reply-view.js";
import { EPSILON_MAX, EPSILON_MIN, EPSILON_STEP, MODES } from "./settings.js";
import { originMatchPattern, parseCustomOrigin } from "./sites.js";

/** The page's element with this id (an input, a button, a table: the id says which). @type {(id: string) => any} */
const $ = (id) => document.getElementById(id);
let state = null;
let defaultHeader = null;

function showError(err) {
  $("error").hidden = !err;
  $("error").textContent = err ? String(err.message || err) : "";
  if (err) $("error").scrollIntoView({ block: "nearest" });
}

async function act(fn) {
  try {
    await fn();
    showError(null);
    await load();
  } catch (err) {
    showError(err);
  }
}

// ------------------------------------------------------------------ sites

function siteRow(site) {
  const s = state.settings.sites[site.id];
  const patch = (p) => act(() => send(Msg.SET_SITE, { siteId: site.id, patch: p }));
  const mode = el("select", { "aria-label": `mode for ${site.name}`, onchange: (e) => patch({ mode: e.target.value }) },
    MODES.map((m) => el("option", { value: m, selected: m === s.mode }, m)));
  const headerChoice = s.header === null ? "global" : s.header === "" ? "none" : "custom";
  const header = el("select", {
    "aria-label": `header for ${site.name}`,
    onchange: (e) => {
      const v = e.target.value;
      if (v === "global") patch({ header: null });
      else if (v === "none") patch({ header: "" });
      else {
        const text = prompt(`Header for ${site.name}:`, s.header || state.settings.header || defaultHeader || "");
        if (text !== null) patch({ header: text });
        else load();
      }
    },
  }, [["global", "global"], ["none", "none"], ["custom", "custom…"]].map(([v, label]) => el("option", { value: v, selected: v === headerChoice }, label)));
  return el("tr", { "data-site": site.id },
    el("td", {}, el("strong", {}, site.name), el("div", { class: "hint" }, site.hosts.join(", "))),
    el("td", {}, el("input", { type: "checkbox", checked: s.enabled, "aria-label": `protect ${site.name}`, onchange: (e) => patch({ enabled: e.target.checked }) })),
    el("td", {}, el("input", { type: "number", min: EPSILON_MIN, max: EPSILON_MAX, step: EPSILON_STEP, value: s.epsilon, style: "width:5em", "aria-label": `epsilon for ${site.name}`, onchange: (e) => patch({ epsilon: Number(e.target.value) }) })),
    el("td", {}, mode),
    el("td", {}, el("label", {}, el("input", { type: "checkbox", checked: s.failOpen, onchange: (e) => patch({ failOpen: e.target.checked }) }), " send unprotected")),
    el("td", {}, header),
    el("td", {}, site.custom ? el("button", { onclick: () => act(async () => {
      await send(Msg.REMOVE_SITE, { siteId: site.id });
      await ext.permissions.remove([originMatchPattern(site.origin)]).catch(() => {});
    }) }, "Remove") : ""),
  );
}

function renderSites() {
  $("site-table").tBodies[0].replaceChildren(...state.sites.map(siteRow));
}

$("add-site-form").addEventListener("submit", (e) => {
  e.preventDefault();
  act(async () => {
    const origin = parseCustomOrigin($("add-origin").value);
    showError(null);
    $("add-state").textContent = `Chrome is asking whether Veil may read and change ${origin}: answer its prompt to go on.`;
    const granted = await ext.permissions.request([originMatchPattern(origin)]).finally(() => ($("add-state").textContent = ""));
    if (!granted) throw new Error(`Chrome did not grant access to ${origin}, so Veil cannot protect it`);
    await send(Msg.ADD_SITE, { origin });
    $("add-origin").value = "";
  });
});

// ------------------------------------------------------------------ header and core

function renderHeader() {
  const h = state.settings.header;
  $("header-text").value = h === null ? defaultHeader || "" : h;
  $("header-state").textContent = h === null ? "Using the default header." : h === "" ? "No header is sent." : "Using your header.";
  $("timeout").value = state.settings.coreTimeoutMs;
  $("history-limit").value = state.settings.historyLimit;
}

$("header-save").addEventListener("click", () => act(() => send(Msg.SET_GLOBAL, { header: $("header-text").value })));
$("header-default").addEventListener("click", () => act(() => send(Msg.SET_GLOBAL, { header: null })));
$("header-none").addEventListener("click", () => act(() => send(Msg.SET_GLOBAL, { header: "" })));
$("core-save").addEventListener("click", () =>
  act(() => send(Msg.SET_GLOBAL, { coreTimeoutMs: Number($("timeout").value), historyLimit: Number($("history-limit").value) })));

// ------------------------------------------------------------------ RootGuard (options-rootguard.js)

wireRootguard({ act, showError });

// ------------------------------------------------------------------ history

async function renderHistory() {
  const select = $("history-site");
  const chosen = select.value || state.sites[0]?.id;
  select.replaceChildren(...state.sites.map((s) => el("option", { value: s.id, selected: s.id === chosen }, `${s.name} (${state.history[s.id]?.length || 0})`)));
  const { entries } = await send(Msg.GET_HISTORY, { siteId: chosen });
  $("history-table").tBodies[0].replaceChildren(
    ...[...entries].reverse().map((h) =>
      el("tr", { "data-entry": h.id },
        el("td", {}, new Date(h.ts).toLocaleString()),
        el("td", { class: `status-${h.status}` }, h.status),
        el("td", {}, h.mode === "numbers" ? "numbers" : String(h.epsilon)),
        el("td", { class: "text" }, h.original, el("div", {}, el("button", { onclick: () => navigator.clipboard.writeText(h.original) }, "Copy"))),
        el("td", { class: "text" }, h.sent ?? (h.notice || "")),
        el("td", { class: "text reply", "data-reply": h.reply ? "pending" : "none" }, h.reply ? "…" : ""),
      ),
    ),
  );
  // Each kept reply, restored in your words here (Veil's page; the site's page never gets it).
  for (const h of entries) {
    if (!h.reply?.text) continue;
    const cell = $("history-table").querySelector(`tr[data-entry="${CSS.escape(h.id)}"] td.reply`);
    try {
      const restored = await send(Msg.RESTORE_REPLY, { siteId: chosen, text: h.reply.text });
      cell.replaceChildren(el("div", { class: "reply-text" }, ...replyNodes(restored.segments)), el("div", { class: "hint" }, `${replySummary(restored)}.`));
      cell.dataset.reply = "restored";
    } catch (err) {
      cell.textContent = `Could not restore the reply: ${err.message}`;
      cell.dataset.reply = "error";
    }
  }
}

$("history-site").addEventListener("change", () => renderHistory().catch(showError));
$("history-clear").addEventListener("click", () => act(() => send(Msg.CLEAR_HISTORY, { siteId: $("history-site").value })));
$("history-clear-all").addEventListener("click", () => {
  if (confirm("Delete every saved original, on every site?")) act(() => send(Msg.CLEAR_HISTORY, { siteId: null }));
});

// ------------------------------------------------------------------ load

async function load() {
  state = await send(Msg.GET_STATE, { withRootguard: true });
  defaultHeader = state.defaultHeader ?? defaultHeader;
  $("core").textContent = coreStatusText(state.coreStatus);
  $("core").dataset.state = state.coreStatus?.state || "unknown";
  renderSites();
  renderHeader();
  renderRootguard(state.rootguard);
  await renderHistory();
  await renderMemo().catch(showError);
  document.body.dataset.ready = "true";
}

wireMemo(showError);
load().catch(showError);
