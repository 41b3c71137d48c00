// The popup: the current site, on/off, ε, mode, what ε means, a preview.

import { ext } from "./chrome-api.js";
import { renderForecast } from "./forecast.js";
import { message, Msg, Target } from "./messages.js";
import { coreStatusText, debounce, el, percent, send } from "./page-api.js";
import { showLifetime } from "./popup-ledger.js";
import { EPSILON_MAX, EPSILON_MIN, EPSILON_STEP, HEADER_LANGUAGES } from "./settings.js";
import { originMatchPattern, protectableUrl } from "./sites.js";

/** The page's element with this id (an input, a button, a table: the id says which). @type {(id: string) => any} */
const $ = (id) => document.getElementById(id);
Object.assign($("epsilon"), { min: EPSILON_MIN, max: EPSILON_MAX, step: EPSILON_STEP });
const LANGUAGE_NAMES = { auto: "follow my prompt", en: "English", ko: "한국어", fr: "Français", de: "Deutsch", es: "Español", ru: "Русский", el: "Ελληνικά" };
$("header-language").replaceChildren(...HEADER_LANGUAGES.map((code) => el("option", { value: code }, LANGUAGE_NAMES[code] || code)));
const SAMPLE = "Patient Maria Keller, 54, reports chest pain since Tuesday; call her at 0176 5551234.";

const params = new URLSearchParams(location.search);
let tab = null;
let siteId = null;

function showError(err) {
  const box = $("error");
  box.hidden = !err;
  box.textContent = err ? String(err.message || err) : "";
}

async function currentTab() {
  if (params.get("url")) return { id: Number(params.get("tab")) || null, url: params.get("url") };
  const [active] = await ext.tabs.query({ active: true, lastFocusedWindow: true });
  return active ? { id: active.id, url: active.url } : { id: null, url: "" };
}

async function draftText() {
  if (!tab?.id) return "";
  try {
    const reply = await ext.tabs.send(tab.id, message(Msg.GET_DRAFT, Target.CONTENT, {}));
    return reply?.ok ? reply.data.text : "";
  } catch {
    return "";
  }
}

const FOUND_BY = {
  adapter: "found by Veil's table for this site",
  typing: "found where you typed (general rules)",
  focus: "found where the cursor is (general rules)",
  page: "the first one on the page (general rules)",
};

function checkLine(text, good) {
  return el("li", { "data-ok": String(good) }, text);
}

/** What the tab's content script found: editor, send control, network guard. */
async function renderCheck(site) {
  const list = $("check");
  const changed = $("check-changed");
  let check = null;
  if (tab?.id) {
    try {
      const reply = await ext.tabs.send(tab.id, message(Msg.SITE_CHECK, Target.CONTENT, {}));
      check = reply?.ok ? reply.data : null;
    } catch {
      check = null;
    }
  }
  list.dataset.state = check ? "ready" : "none";
  if (!check) {
    changed.hidden = true;
    list.replaceChildren(checkLine("Veil is not running in this tab yet: reload the page so it can protect it.", false));
    return;
  }
  const editor = check.editor.foundBy
    ? `Editor: ${check.editor.kind || "an editable field"}, ${FOUND_BY[check.editor.foundBy]}`
    : "Editor: not found yet (click into the chat box and open this again)";
  const send =
    check.send.foundBy === "adapter"
      ? "Send control: found by Veil's table for this site"
      : check.send.foundBy === "composer"
        ? `Send control: found by the composer rule (${check.send.controls} control${check.send.controls === 1 ? "" : "s"} next to the editor are guarded)`
        : "Send control: not found; Enter, form submission and the network guard still protect your prompt";
  const guard = check.guard.running
    ? `Network guard: active${check.guard.blocked ? `, it refused ${check.guard.blocked} request${check.guard.blocked === 1 ? "" : "s"} on this page` : ""}`
    : "Network guard: not running in this page; reload it to start it";
  list.replaceChildren(checkLine(editor, Boolean(check.editor.foundBy)), checkLine(send, Boolean(check.send.foundBy)), checkLine(guard, check.guard.running));
  const generic = check.custom
    ? "A site you added: Veil protects it with its general rules and the network guard."
    : "This site changed its page; Veil protects it with its general rules and the network guard.";
  changed.textContent = generic;
  changed.hidden = !(check.custom || !check.adapterFound) || !site.enabled;
}

let explainRun = 0;

// Why the sensitive-word gap cannot be closed by the choice of alphabet (measured: docs/accents/report.md).
const SENSITIVE_GAP =
  "Names, streets and towns that are in a language's word list come back more often than their chance of arriving unchanged (French at ε 6 per letter: 56.5% against 38.3%), because a reader who knows the language fixes a wrong letter or two whatever the alphabet, so no choice here closes that gap: only a lower ε does (at ε 4: 8.3% against 5.8%).";

async function explain(epsilon) {
  const alphabets = window.__veilSite?.alphabets || "scripts";
  const run = ++explainRun; // an older answer (another ε or alphabet) must not overwrite a newer one
  $("explain").dataset.state = "pending";
  try {
    const e = await send(Msg.EXPLAIN, { epsilon });
    if (run !== explainRun) return;
    const base =
      `About ${percent(e.changedShare)} of characters are replaced by random ones. ` +
      `A 6-letter name arrives intact with probability ${percent(e.nameIntact6, 1)} (p⁶, p = ${e.keepProbability.toFixed(3)}). ` +
      `Spaces are kept, so word lengths stay visible. ε actually applied: ${e.epsilonPerChar.toFixed(3)} per character.`;
    const korean =
      `A Korean syllable is three letters, each perturbed (ε ${e.scripts.hangul.epsilonPerChar.toFixed(1)} per syllable): a 3-syllable name arrives intact with probability ${percent(e.koreanNameIntact3, 1)}. ` +
      `Characters of other scripts (Chinese, emoji) still become random ASCII ones.`;
    $("explain").textContent =
      alphabets === "ascii"
        ? `${base} Everything is sent as plain ASCII: which script you write in is hidden, and every other character (é, 한, ж) becomes a random ASCII one, so such text reaches the model as noise.`
        : alphabets === "fold"
          ? `${base} Accented Latin letters are sent as their plain letter (é as e, ß as s), then perturbed like any ASCII letter, at the same ε: French, German, Spanish, Portuguese and Italian read best this way at equal ε per letter (docs/accents). Other scripts are replaced only by characters of their own script (한 by another Hangul syllable), so which script each character is in stays visible, like the spaces. ${korean} ${SENSITIVE_GAP}`
          : `${base} Each character is replaced only by characters of its own script (é by è or e, 한 by another Hangul syllable), so which script each character is in stays visible, like the spaces; an accented letter costs two slots (letter and accent). ${korean} ${SENSITIVE_GAP}`;
    $("explain").dataset.state = alphabets;
  } catch (err) {
    if (run !== explainRun) return;
    $("explain").textContent = `Could not compute what ε means: ${err.message}`;
    $("explain").dataset.state = "error";
  }
}

/** The person's words marked likely hidden / likely restored (null words: no forecast, with why). */
function showForecast(text, words, why, isSample) {
  const parts = { box: $("forecast"), legend: $("forecast-legend"), caveat: $("forecast-caveat"), legendRootguard: $("legend-rootguard") };
  renderForecast(parts, text, words, why, isSample ? "A sample (type in the page's editor to see your own words)" : "Your draft");
}

/** Which of the two ways the person is writing here (Veil's panel open for this tab, or the site's box), and what each protects. */
async function renderComposeMode() {
  const panelFor = (contexts) => contexts.some((c) => String(c.documentUrl || "").startsWith(ext.runtime.url("sidepanel.html")) && new URL(c.documentUrl).searchParams.get("tab") === String(tab?.id));
  let panelOpen = false;
  for (const contextTypes of [["SIDE_PANEL", "TAB"], ["TAB"]]) {
    try {
      panelOpen = panelFor(await ext.runtime.contexts({ contextTypes })); // (older Chrome: no SIDE_PANEL type)
      break;
    } catch {
      panelOpen = false;
    }
  }
  $("compose-mode").dataset.mode = panelOpen ? "panel" : "site";
  $("compose-mode").textContent = panelOpen
    ? "You are writing in Veil's panel: this page receives only the protected text, never your keystrokes."
    : "You are typing in the site's own box: Veil protects what is sent, but the page sees every key. Veil's panel keeps your draft from the page.";
}

/** RootGuard's ε for the values in the preview, both ways: per privacy unit with its unit, and over the domain. */
function showRootguardBudget(replacements) {
  const labels = new Map();
  for (const r of replacements || []) for (const [name, g] of Object.entries(r.guarantees || {})) labels.set(name, `${name}: ${g.label} (${g.domain_label})`);
  const drifted = [...new Set((replacements || []).filter((r) => r.drift).map((r) => r.name))];
  $("rootguard-budget").hidden = labels.size === 0;
  $("rootguard-budget").textContent = labels.size
    ? `RootGuard's ε, per privacy unit and between the ends of each domain — ${[...labels.values()].join("; ")}.` +
      (drifted.length ? ` Not your stored value, sent as a new noisy draw: ${drifted.join(", ")} (store it in Veil's options if it is your value now).` : "")
    : "";
}

let previewRun = 0;

async function preview() {
  const site = window.__veilSite;
  if (!site) return;
  const run = ++previewRun; // a slower, older answer must not overwrite a newer one
  if (!site.enabled) {
    $("preview").textContent = "(protection is off: the text is sent as typed)";
    showForecast("", null, "Protection is off: every word is sent as typed.");
    return;
  }
  const draft = await draftText();
  const text = draft || SAMPLE;
  try {
    // The sample is not the person's words: its draw is not kept in the word memo.
    const result = await send(Msg.PREVIEW, { siteId, text, sample: !draft });
    if (run !== previewRun) return;
    if (result.words) showForecast(text, result.words, "", !draft);
    else showForecast("", null, "Numbers mode: only your declared values are replaced; every other word is sent as typed.");
    $("preview").textContent = result.text;
    showRootguardBudget(result.replacements);
  } catch (err) {
    if (run !== previewRun) return;
    showForecast("", null, `(no forecast: ${err.message})`);
    $("preview").textContent = `(no preview: ${err.message})`;
  }
}

const refreshPreview = debounce(preview, 150);

async function patch(p) {
  try {
    const { settings } = await send(Msg.SET_SITE, { siteId, patch: p });
    window.__veilSite = settings.sites[siteId];
    document.body.dataset.saved = String(Date.now());
    showError(null);
  } catch (err) {
    showError(err);
  }
}

function renderCore(status) {
  $("core").textContent = coreStatusText(status);
  $("core").dataset.state = status?.state || "unknown";
}

// While the core starts, its progress (and the time so far) as the offscreen page reports it.
let coreShown = null;
ext.storage.onChanged((changes, area) => {
  if (area === "session" && changes.coreStatus) renderCore((coreShown = changes.coreStatus.newValue));
});
setInterval(() => coreShown?.state === "booting" && renderCore(coreShown), 500);

function render(state) {
  coreShown = state.coreStatus;
  renderCore(state.coreStatus);
  const current = state.current;
  siteId = current?.siteId || null;
  const meta = state.sites.find((s) => s.id === siteId);
  const protectable = protectableUrl(current?.url || "");
  $("site-name").textContent = meta ? meta.name : protectable ? current.origin : "(not a web page)";
  $("unknown-site").hidden = Boolean(siteId) || !protectable;
  $("unprotectable").hidden = Boolean(siteId) || protectable;
  $("site-controls").hidden = !siteId;
  if (!siteId) return;
  const site = state.settings.sites[siteId];
  window.__veilSite = site;
  $("enabled").checked = site.enabled;
  $("epsilon").value = String(site.epsilon);
  $("epsilon-value").textContent = Number(site.epsilon).toFixed(1);
  for (const radio of /** @type {NodeListOf<HTMLInputElement>} */ (document.querySelectorAll("input[name=mode]"))) radio.checked = radio.value === site.mode;
  $("fail-open").checked = site.failOpen;
  for (const input of /** @type {NodeListOf<HTMLInputElement>} */ (document.querySelectorAll("input[name=alphabets]"))) input.checked = input.value === site.alphabets;
  $("header-language").value = site.headerLanguage || "auto";
  explain(site.epsilon);
  preview();
  showLifetime($("lifetime"), siteId);
  renderCheck(site);
  renderComposeMode();
}

async function load() {
  tab = await currentTab();
  const state = await send(Msg.GET_STATE, { url: tab.url });
  render(state);
  document.body.dataset.ready = "true";
}

$("enabled").addEventListener("change", async (e) => {
  await patch({ enabled: e.target.checked });
  preview();
});
$("epsilon").addEventListener("input", (e) => {
  const eps = Number(e.target.value);
  $("epsilon-value").textContent = eps.toFixed(1);
  explain(eps);
});
$("epsilon").addEventListener("change", async (e) => {
  await patch({ epsilon: Number(e.target.value) });
  refreshPreview();
});
for (const radio of /** @type {NodeListOf<HTMLInputElement>} */ (document.querySelectorAll("input[name=mode]"))) {
  radio.addEventListener("change", async () => {
    if (radio.checked) await patch({ mode: radio.value });
    refreshPreview();
  });
}
$("fail-open").addEventListener("change", (e) => patch({ failOpen: e.target.checked }));
$("alphabets").addEventListener("change", async (e) => {
  await patch({ alphabets: e.target.value });
  explain(Number($("epsilon").value));
  refreshPreview();
});
$("header-language").addEventListener("change", async (e) => {
  await patch({ headerLanguage: e.target.value });
  refreshPreview();
});
function addState(text) {
  $("add-site-state").hidden = !text;
  $("add-site-state").textContent = text || "";
}

$("add-site").addEventListener("click", async () => {
  showError(null);
  $("add-site").disabled = true;
  try {
    const origin = new URL(tab.url).origin;
    // Chrome asks the person here, at the moment they add the site.
    addState(`Chrome is asking whether Veil may read and change ${origin}: answer its prompt to go on.`);
    const granted = await ext.permissions.request([originMatchPattern(origin)]);
    if (!granted) throw new Error("Chrome did not grant access to this site, so Veil cannot protect it");
    addState("Adding the site…");
    await send(Msg.ADD_SITE, { origin, tabId: tab.id });
    addState("");
    await load();
  } catch (err) {
    addState("");
    showError(err);
  } finally {
    $("add-site").disabled = false;
  }
});

$("open-panel").addEventListener("click", () => {
  // Opened first, inside this click's user gesture (Chrome requires one).
  if (!tab?.id) return showError(new Error("no tab to open Veil's panel for"));
  ext.sidePanel.openFor(tab.id).then(
    () => window.close(),
    (err) => showError(new Error(`Chrome did not open Veil's panel (${err.message}); press Alt+Shift+V on the chat page instead`)),
  );
});

load().catch(showError);
