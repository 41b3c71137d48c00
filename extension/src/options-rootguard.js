// The options page's RootGuard section: the profile, the true values, each
// root's ε both ways ("ε 1 per 10 kg" and over its domain), the cached noisy
// values, values added later (only they are drawn), the numbers written in
// prompts that differ from the stored ones ("store 83.4 as my weight?"), the
// ledger, reset, export and import. Each problem is shown beside its field.

import { Msg } from "./messages.js";
import { el, send } from "./page-api.js";

/** The page's element with this id (an input, a button, a table: the id says which). @type {(id: string) => any} */
const $ = (id) => document.getElementById(id);

let rg = {}; // what the worker said (state.rootguard of GET_STATE)
let rgProfile = null; // the profile as shown (the stored one, or the one being edited)
/** @type {{act: (fn: () => Promise<unknown>) => Promise<unknown>, showError: (err: unknown) => void}} */
let hooks = { act: async () => {}, showError: () => {} };

export function formatNumber(v) {
  return typeof v === "number" ? String(Number(v.toPrecision(6))) : String(v);
}

function noisyFor(noisy, name) {
  const value = noisy?.[name];
  return value === undefined || value === null ? "" : formatNumber(value);
}

const isRoot = (spec) => Array.isArray(spec?.domain) && !spec.formula && !spec.expression;

// ------------------------------------------------------------------ errors beside their fields

/** A problem the page found or the core named: {name, field ("true" | "lo" | "hi" | ...), message}. */
class FieldErrors extends Error {
  constructor(problems) {
    super(problems.length === 1 ? problems[0].message : `${problems.length} problems, each shown beside its field: ${problems.map((p) => p.message).join("; ")}`);
    this.problems = problems;
  }
}

function clearFieldErrors() {
  for (const node of /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll("#rg-table [data-error-for]"))) {
    node.textContent = "";
    node.hidden = true;
  }
  for (const input of document.querySelectorAll("#rg-table input[aria-invalid]")) input.removeAttribute("aria-invalid");
}

function showFieldErrors(problems) {
  clearFieldErrors();
  for (const p of problems) {
    /** @type {HTMLElement | null} */
    const slot = document.querySelector(`#rg-table [data-error-for="${p.name}:${p.field}"]`) ?? document.querySelector(`#rg-table [data-error-for="${p.name}:true"]`);
    if (!slot) continue;
    slot.textContent = slot.textContent ? `${slot.textContent}; ${p.message}` : p.message;
    slot.hidden = false;
    const input = p.field === "true" ? document.querySelector(`input[data-true="${p.name}"]`) : document.querySelector(`input[data-root="${p.name}"][data-field="${p.field}"]`);
    input?.setAttribute("aria-invalid", "true");
  }
}

/** The core's message split into problems, each placed beside the value it names ('name'). */
function problemsOf(message, names) {
  const parts = String(message).replace(/^[^:]*problems?:\s*|^invalid true values:\s*/i, "").split(/;\s+|\n\s*-\s*/);
  const out = [];
  for (const part of parts) {
    const name = names.find((n) => part.includes(`'${n}'`) || part.includes(`"${n}"`));
    if (!name) {
      // The rest of the previous problem ("...; use one of ['kg', 'lb']").
      if (out.length) out[out.length - 1].message += `; ${part.trim()}`;
      continue;
    }
    const field = /domain/.test(part) && !/true value/.test(part) ? "lo" : /\bunit\b/.test(part) && !/true value/.test(part) ? "unit" : "true";
    out.push({ name, field, message: part.trim() });
  }
  return out;
}

/** Run `fn` (a send to the worker); a problem it names goes beside its field, the rest at the top. */
async function withFieldErrors(fn) {
  clearFieldErrors();
  try {
    return await fn();
  } catch (err) {
    const names = Object.keys(rgProfile?.values || {});
    const problems = err.problems || problemsOf(err.message, names);
    if (problems.length) showFieldErrors(problems);
    throw err;
  }
}

// ------------------------------------------------------------------ ε both ways

function budgetLine(describe, spent) {
  if (!describe) return "";
  const parts = [];
  if (describe.total_label) parts.push(`Budget: ${describe.total_label}.`);
  if (spent?.label) parts.push(`Ledger: ${spent.label}.`);
  return parts.join(" ");
}

function epsilonCell(name, spec) {
  const d = rg.describe?.roots?.[name];
  if (!isRoot(spec) || !d) return "";
  return [
    el("span", { "data-epsilon": name }, d.label ?? `ε ${formatNumber(d.epsilon)} per ${formatNumber(d.privacy_unit)} ${spec.unit ?? ""}`),
    el("div", { class: "hint", "data-domain-epsilon": name }, d.domain_label ?? `ε ${formatNumber(d.domain_epsilon)} over the domain`),
    el("div", { class: "hint" }, `noise ±${formatNumber(Number(d.noise_scale.toPrecision(2)))} ${spec.unit ?? ""}`),
  ];
}

// ------------------------------------------------------------------ the table

function renderLedger() {
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
      ? el("table", {}, el("thead", {}, el("tr", {}, ["#", "event", "ε per root (per its privacy unit)", "ε spent", "ε total"].map((h) => el("th", {}, h)))), el("tbody", {}, rows))
      : el("p", { class: "hint" }, "Nothing drawn yet."),
    events.length ? el("ul", {}, events) : "",
  );
}

function renderDrifts() {
  const drifts = rg.drifts || [];
  $("rg-drifts").replaceChildren(
    ...drifts.map((d) =>
      el("li", { "data-drift": d.name, "data-drift-value": String(d.value) },
        `${d.title}: you wrote ${formatNumber(d.value)} ${d.unit}` + (d.stored === null || d.stored === undefined ? " (nothing stored)" : ` (stored: ${formatNumber(d.stored)} ${d.unit})`) + `; it was sent as ${formatNumber(d.noisy)}. `,
        el("button", { "data-store": d.name, onclick: () => addValues({ [d.name]: d.value }) }, `Store ${formatNumber(d.value)} as my ${d.title.toLowerCase()}`),
      )),
  );
  $("rg-drifts-section").hidden = drifts.length === 0;
}

export function renderRootguard(view) {
  rg = view || {};
  const locked = rg.hasState;
  rgProfile = structuredClone(rg.profile || rgProfile || rg.defaultProfile || null);
  const missing = Object.entries(rgProfile?.values || {}).filter(([name, spec]) => isRoot(spec) && rg.trueValues?.[name] === undefined);
  $("rg-status").textContent = rg.error
    ? `RootGuard is unavailable: ${rg.error}`
    : locked
      ? "Noisy values are drawn and cached. They are never re-drawn unless you reset them." +
        (missing.length ? " You can add a value you left empty: only it is drawn, every other value stays as it is." : "")
      : rgProfile
        ? "Not set up yet: fill in your true values and save; the noisy values are drawn once, then."
        : "No profile.";
  $("rg-budget").value = rgProfile?.budget ?? "";
  $("rg-target").value = rgProfile?.target ?? "";
  $("rg-budget").disabled = locked;
  $("rg-target").disabled = locked;
  $("rg-budget-line").textContent = budgetLine(rg.describe, rg.spent);
  $("rg-save").disabled = locked || !rgProfile;
  $("rg-save").hidden = Boolean(locked);
  $("rg-add").hidden = !locked;
  $("rg-add").disabled = !locked || missing.length === 0;
  $("rg-reset").disabled = !rgProfile;
  $("rg-json").value = rgProfile ? JSON.stringify(rgProfile, null, 2) : "";
  $("rg-json").disabled = locked;
  const rows = Object.entries(rgProfile?.values || {}).map(([name, spec]) => {
    const root = isRoot(spec);
    const kind = root ? "root" : spec.formula ? `formula: ${spec.formula}` : spec.expression ? `= ${spec.expression}` : "derived";
    const trueValue = rg.trueValues?.[name];
    const editable = root && !locked;
    const errorSlot = (field) => el("div", { class: "field-error", "data-error-for": `${name}:${field}`, role: "alert", hidden: true });
    const field = (key, value, width) => el("input", { "data-root": name, "data-field": key, value: value ?? "", style: `width:${width}`, "aria-label": `${key} of ${name}` });
    return el("tr", { "data-value": name },
      el("td", {}, el("strong", {}, name), spec.title ? el("div", { class: "hint" }, spec.title) : null),
      el("td", {}, kind),
      el("td", {}, editable ? [field("unit", spec.unit, "5em"), errorSlot("unit")] : spec.unit ?? ""),
      el("td", {}, editable
        ? [field("lo", spec.domain[0], "4.5em"), " – ", field("hi", spec.domain[1], "4.5em"), errorSlot("lo"), errorSlot("hi")]
        : Array.isArray(spec.domain) ? `${spec.domain[0]} – ${spec.domain[1]}` : ""),
      el("td", {}, editable ? field("aliases", (spec.aliases || []).join(", "), "14em") : (spec.aliases || []).join(", ")),
      el("td", {}, epsilonCell(name, spec)),
      el("td", {}, root
        ? [el("input", { type: "number", step: "any", "data-true": name, value: trueValue ?? "", disabled: locked && trueValue !== undefined, style: "width:7em", "aria-label": `your true ${name}` }), errorSlot("true")]
        : ""),
      el("td", { class: "noisy", "data-noisy": name }, noisyFor(rg.noisy, name)),
    );
  });
  $("rg-table").tBodies[0].replaceChildren(...rows);
  renderDrifts();
  renderLedger();
}

// ------------------------------------------------------------------ reading the form

/** A number typed in `input`, or a problem for it. */
function numberIn(input, name, field, what, problems) {
  const raw = input.value.trim();
  const v = Number(raw);
  if (raw === "" || !Number.isFinite(v)) {
    problems.push({ name, field, message: `${what} of ${name} must be a number; got "${raw}"` });
    return null;
  }
  return v;
}

/** The true values typed into enabled fields (inside their domains), or FieldErrors. */
function typedTrueValues(profile, { onlyNew }) {
  const problems = [];
  const values = {};
  for (const input of /** @type {NodeListOf<HTMLInputElement>} */ (document.querySelectorAll("input[data-true]"))) {
    const name = input.dataset.true;
    if (input.value.trim() === "" || (onlyNew && input.disabled)) continue;
    const v = numberIn(input, name, "true", "the true value", problems);
    if (v === null) continue;
    const [lo, hi] = profile.values[name]?.domain || [];
    if (Number.isFinite(lo) && Number.isFinite(hi) && lo < hi && (v < lo || v > hi)) {
      problems.push({ name, field: "true", message: `${v} is outside the public domain of ${name} [${lo}, ${hi}]; widen the domain or check the value` });
      continue;
    }
    values[name] = v;
  }
  return { values, problems };
}

function editedRootguard() {
  const profile = structuredClone(rgProfile);
  if (!profile) throw new Error("there is no RootGuard profile to save");
  const problems = [];
  const budget = $("rg-budget").value;
  if (budget !== "") profile.budget = Number(budget);
  const target = $("rg-target").value.trim();
  if (target) profile.target = target;
  else delete profile.target;
  for (const input of /** @type {NodeListOf<HTMLInputElement>} */ (document.querySelectorAll("input[data-root]"))) {
    const name = input.dataset.root;
    const spec = profile.values[name];
    const raw = input.value.trim();
    if (input.dataset.field === "unit") spec.unit = raw;
    else if (input.dataset.field === "aliases") spec.aliases = raw.split(",").map((a) => a.trim()).filter(Boolean);
    else {
      const v = numberIn(input, name, input.dataset.field, `the domain's ${input.dataset.field === "lo" ? "lower" : "upper"} end`, problems);
      if (v !== null) spec.domain[input.dataset.field === "lo" ? 0 : 1] = v;
    }
  }
  for (const [name, spec] of Object.entries(profile.values)) {
    if (isRoot(spec) && Number.isFinite(spec.domain[0]) && Number.isFinite(spec.domain[1]) && !(spec.domain[0] < spec.domain[1])) {
      problems.push({ name, field: "lo", message: `the domain of ${name} [${spec.domain[0]}, ${spec.domain[1]}] is empty or inverted: the lower end must be below the upper` });
    }
  }
  const typed = typedTrueValues(profile, { onlyNew: false });
  problems.push(...typed.problems);
  if (problems.length) throw new FieldErrors(problems);
  return { profile, trueValues: typed.values };
}

function addValues(values) {
  return hooks.act(() => withFieldErrors(() => send(Msg.ROOTGUARD_ADD, { values })));
}

// ------------------------------------------------------------------ wiring

export function wireRootguard({ act, showError }) {
  hooks = { act, showError };
  $("rg-json-apply").addEventListener("click", () => {
    try {
      rgProfile = JSON.parse($("rg-json").value);
      renderRootguard({ ...rg, profile: rgProfile });
      showError(null);
    } catch (err) {
      showError(new Error(`the profile is not valid JSON: ${err.message}`));
    }
  });
  $("rg-save").addEventListener("click", () =>
    act(() => withFieldErrors(() => {
      const { profile, trueValues } = editedRootguard();
      return send(Msg.ROOTGUARD_SAVE, { profile, trueValues });
    })));
  $("rg-add").addEventListener("click", () =>
    act(() => withFieldErrors(() => {
      const { values, problems } = typedTrueValues(rgProfile, { onlyNew: true });
      if (problems.length) throw new FieldErrors(problems);
      if (!Object.keys(values).length) throw new Error("type a value into an empty field first: only values not stored yet can be added");
      return send(Msg.ROOTGUARD_ADD, { values });
    })));
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
    act(() => withFieldErrors(() => {
      const { trueValues } = rg.hasState ? { trueValues: undefined } : editedRootguard();
      return send(Msg.ROOTGUARD_RESET, { confirm: true, reason: "reset from the options page", trueValues });
    }));
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
        throw new Error(`${file.name} is not JSON: ${err.message}`, { cause: err });
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
}
