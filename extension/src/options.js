// The options page: sites, the restoration header, RootGuard's profile and
// cached values, and the history of originals.

import { ext } from "./chrome-api.js";
import { Msg } from "./messages.js";
import { coreStatusText, el, send } from "./page-api.js";
import { MODES, EPSILON_MAX, EPSILON_MIN, EPSILON_STEP } from "./settings.js";
import { originMatchPattern, parseCustomOrigin } from "./sites.js";

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

// ------------------------------------------------------------------ RootGuard

let rgProfile = null;

function formatNumber(v) {
  return typeof v === "number" ? String(Number(v.toPrecision(6))) : String(v);
}

function noisyFor(noisy, name) {
  const value = noisy?.[name];
  return value === undefined || value === null ? "" : formatNumber(value);
}

function renderLedger(rg) {
  const rows = (rg.ledger || []).map((entry) =>
    el("tr", {},
      el("td", {}, String(entry.seq ?? "")),
      el("td", {}, String(entry.event ?? "")),
      el("td", {}, Object.entries(entry.epsilon || {}).map(([k, v]) => `${k} ${formatNumber(v)}`).join(", ")),
      el("td", {}, formatNumber(entry.spent ?? "")),
      el("td", {}, formatNumber(entry.total_spent ?? "")),
    ));
  const events = (rg.events || []).map((e) => el("li", {}, `${new Date(e.ts).toLocaleString()}: ${e.event} (${e.reason})`));
  $("rg-ledger").replaceChildren(
    rows.length
      ? el("table", {}, el("thead", {}, el("tr", {}, ["#", "event", "ε per root", "ε spent", "ε total"].map((h) => el("th", {}, h)))), el("tbody", {}, rows))
      : el("p", { class: "hint" }, "Nothing drawn yet."),
    events.length ? el("ul", {}, events) : "",
  );
}

function renderRootguard() {
  const rg = state.rootguard || {};
  const locked = rg.hasState;
  rgProfile = structuredClone(rg.profile || rgProfile || rg.defaultProfile || null);
  $("rg-status").textContent = rg.error
    ? `RootGuard is unavailable: ${rg.error}`
    : locked
      ? "Noisy values are drawn and cached. They are never re-drawn unless you reset them."
      : rgProfile
        ? "Not set up yet: fill in your true values and save; the noisy values are drawn once, then."
        : "No profile.";
  $("rg-budget").value = rgProfile?.budget ?? "";
  $("rg-target").value = rgProfile?.target ?? "";
  $("rg-budget").disabled = locked;
  $("rg-target").disabled = locked;
  $("rg-save").disabled = locked || !rgProfile;
  $("rg-reset").disabled = !rgProfile;
  $("rg-json").value = rgProfile ? JSON.stringify(rgProfile, null, 2) : "";
  $("rg-json").disabled = locked;
  const rows = Object.entries(rgProfile?.values || {}).map(([name, spec]) => {
    const isRoot = Array.isArray(spec.domain) && !spec.formula && !spec.expression;
    const kind = isRoot ? "root" : spec.formula ? `formula: ${spec.formula}` : spec.expression ? `= ${spec.expression}` : "derived";
    const trueValue = rg.trueValues?.[name];
    const editable = isRoot && !locked;
    const field = (key, value, width) =>
      el("input", { "data-root": name, "data-field": key, value: value ?? "", style: `width:${width}` });
    return el("tr", { "data-value": name },
      el("td", {}, el("strong", {}, name), spec.title ? el("div", { class: "hint" }, spec.title) : null),
      el("td", {}, kind),
      el("td", {}, editable ? field("unit", spec.unit, "5em") : spec.unit ?? ""),
      el("td", {}, editable
        ? [field("lo", spec.domain[0], "4.5em"), " – ", field("hi", spec.domain[1], "4.5em")]
        : Array.isArray(spec.domain) ? `${spec.domain[0]} – ${spec.domain[1]}` : ""),
      el("td", {}, editable ? field("aliases", (spec.aliases || []).join(", "), "14em") : (spec.aliases || []).join(", ")),
      el("td", {}, isRoot && rg.describe?.roots?.[name]
        ? [formatNumber(rg.describe.roots[name].epsilon),
           el("div", { class: "hint" }, `noise ±${formatNumber(Number(rg.describe.roots[name].noise_scale.toPrecision(2)))} ${spec.unit ?? ""}`)]
        : ""),
      el("td", {}, isRoot ? el("input", { type: "number", step: "any", "data-true": name, value: trueValue ?? "", disabled: locked, style: "width:7em" }) : ""),
      el("td", { class: "noisy", "data-noisy": name }, noisyFor(rg.noisy, name)),
    );
  });
  $("rg-table").tBodies[0].replaceChildren(...rows);
  renderLedger(rg);
}

function editedRootguard() {
  const profile = structuredClone(rgProfile);
  if (!profile) throw new Error("there is no RootGuard profile to save");
  const budget = $("rg-budget").value;
  if (budget !== "") profile.budget = Number(budget);
  const target = $("rg-target").value.trim();
  if (target) profile.target = target;
  else delete profile.target;
  for (const input of document.querySelectorAll("input[data-root]")) {
    const spec = profile.values[input.dataset.root];
    const raw = input.value.trim();
    if (input.dataset.field === "unit") spec.unit = raw;
    else if (input.dataset.field === "aliases") spec.aliases = raw.split(",").map((a) => a.trim()).filter(Boolean);
    else {
      const v = Number(raw);
      if (raw === "" || !Number.isFinite(v)) throw new Error(`the domain of ${input.dataset.root} needs two numbers; got "${raw}"`);
      spec.domain[input.dataset.field === "lo" ? 0 : 1] = v;
    }
  }
  const trueValues = {};
  for (const input of document.querySelectorAll("input[data-true]")) {
    if (input.value === "") continue;
    const v = Number(input.value);
    if (!Number.isFinite(v)) throw new Error(`the true value of ${input.dataset.true} is not a number`);
    trueValues[input.dataset.true] = v;
  }
  return { profile, trueValues };
}

$("rg-json-apply").addEventListener("click", () => {
  try {
    rgProfile = JSON.parse($("rg-json").value);
    state.rootguard = { ...state.rootguard, profile: rgProfile };
    renderRootguard();
    showError(null);
  } catch (err) {
    showError(new Error(`the profile is not valid JSON: ${err.message}`));
  }
});
$("rg-save").addEventListener("click", () =>
  act(() => {
    const { profile, trueValues } = editedRootguard();
    return send(Msg.ROOTGUARD_SAVE, { profile, trueValues });
  }));
$("rg-reset").addEventListener("click", () => {
  const sure = confirm(
    "Reset RootGuard's cached values?\n\nEvery noisy value is drawn again. Anyone who saw prompts from before and after the reset " +
      "can combine the two draws, so this spends privacy budget a second time. It is recorded in the ledger.",
  );
  if (!sure) {
    // A positive signal for tests that nothing was asked of the worker.
    document.body.dataset.resetDeclined = String(Number(document.body.dataset.resetDeclined || 0) + 1);
    return;
  }
  act(() => {
    const { trueValues } = state.rootguard?.hasState ? { trueValues: undefined } : editedRootguard();
    return send(Msg.ROOTGUARD_RESET, { confirm: true, reason: "reset from the options page", trueValues });
  });
});

$("rg-export").addEventListener("click", () =>
  act(async () => {
    const { record } = await send(Msg.ROOTGUARD_EXPORT, {});
    const blob = new Blob([JSON.stringify(record, null, 2)], { type: "application/json" });
    const link = el("a", { href: URL.createObjectURL(blob), download: "veil-rootguard.json" });
    document.body.append(link);
    link.click();
    link.remove();
    $("rg-import-status").textContent = "Exported. The file holds your true values: keep it private.";
  }));
$("rg-import").addEventListener("change", () => {
  const file = $("rg-import").files[0];
  if (!file) return;
  $("rg-import-status").textContent = "";
  act(async () => {
    let record;
    try {
      record = JSON.parse(await file.text());
    } catch (err) {
      throw new Error(`${file.name} is not JSON: ${err.message}`);
    }
    try {
      const result = await send(Msg.ROOTGUARD_IMPORT, { record });
      $("rg-import-status").textContent = {
        new: `Imported ${file.name}: these noisy values are now used here.`,
        same: `${file.name} is the record already here: nothing changed.`,
        extends: `Imported ${file.name}: it adds values drawn elsewhere; every value drawn here is unchanged.`,
      }[result.relation];
      return result;
    } catch (err) {
      $("rg-import-status").textContent = `Not imported: ${err.message}`;
      throw err;
    } finally {
      $("rg-import").value = "";
    }
  });
});

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
      ),
    ),
  );
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
  renderRootguard();
  await renderHistory();
  document.body.dataset.ready = "true";
}

load().catch(showError);
