// Veil's side panel (sidepanel.html?tab=ID): the person writes the prompt here,
// in an extension page the chat site cannot read, sees the same preview as the
// popup, and "Send" has the worker protect it (compose-send, sw/compose.js):
// only the protected text is written into the site's editor and sent through
// the site's own path. The tab is the `tab` query parameter (Chrome opens the
// panel per tab with it; the e2e tests open the page in a tab of its own);
// without one, the window's active tab.

import { ext } from "./chrome-api.js";
import { renderForecast } from "./forecast.js";
import { message, Msg, Target } from "./messages.js";
import { coreStatusText, debounce, el, send } from "./page-api.js";
import { replyNodes, replySummary } from "./reply-view.js";

/** The page's element with this id (an input, a button, a table: the id says which). @type {(id: string) => any} */
const $ = (id) => document.getElementById(id);
const FORECAST = { box: $("forecast"), legend: $("forecast-legend"), caveat: $("forecast-caveat"), legendRootguard: $("legend-rootguard") };

let tabId = null;
let siteId = null;
let site = null;
let ready = false; // the tab has a protected site with an editor Veil found
let sending = false;

function showError(err) {
  $("error").hidden = !err;
  $("error").textContent = err ? String(err.message || err) : "";
}

function setPanelState(state, text) {
  $("panel-state").dataset.state = state;
  $("panel-state").textContent = text;
  ready = state === "ready";
  updateSend();
}

function updateSend() {
  $("send").disabled = !ready || sending || !$("compose").value.trim();
}

async function targetTab() {
  const fromUrl = Number(new URLSearchParams(location.search).get("tab"));
  if (Number.isInteger(fromUrl) && fromUrl > 0) return ext.tabs.get(fromUrl);
  const [active] = await ext.tabs.query({ active: true, currentWindow: true });
  return active || null;
}

/** What the tab's content script found (null when Veil is not running there). */
async function siteCheck() {
  try {
    const reply = await ext.tabs.send(tabId, message(Msg.SITE_CHECK, Target.CONTENT, {}));
    return reply?.ok ? reply.data : null;
  } catch {
    return null;
  }
}

async function refreshState() {
  const tab = await targetTab().catch(() => null);
  if (!tab?.url) {
    setPanelState("refused", "No chat tab to write into: open the panel from the chat page (Veil's popup, Alt+Shift+V, or the button in Veil's notice).");
    return;
  }
  tabId = tab.id;
  const state = await send(Msg.GET_STATE, { url: tab.url });
  $("core").textContent = coreStatusText(state.coreStatus);
  $("core").dataset.state = state.coreStatus?.state || "unknown";
  siteId = state.current?.siteId || null;
  const meta = state.sites.find((s) => s.id === siteId);
  $("site-name").textContent = meta ? meta.name : new URL(tab.url).host || tab.url;
  site = siteId ? state.settings.sites[siteId] : null;
  if (!site) {
    setPanelState("refused", "Veil does not protect this site, so the panel writes nothing into it. Add it in Veil's popup first.");
    return;
  }
  if (!site.enabled) {
    setPanelState("refused", "Veil's protection is off for this site, so the panel writes nothing into it. Turn it on in Veil's popup.");
    return;
  }
  const check = await siteCheck();
  if (!check) setPanelState("refused", "Veil is not running in that tab yet: reload the chat page.");
  else if (!check.editor.foundBy) setPanelState("refused", "Veil found no chat box on that page yet: click into it once, then come back.");
  else setPanelState("ready", `Ready: Send writes only the protected text into ${meta?.name || "the page"}'s box and sends it (ε ${Number(site.epsilon).toFixed(1)} per character, mode ${site.mode}).`);
}

let previewRun = 0;

async function preview() {
  const text = $("compose").value;
  const run = ++previewRun; // an older, slower answer must not overwrite a newer one
  if (!site || !site.enabled) {
    renderForecast(FORECAST, "", null, "Nothing to forecast: this site is not protected.", "");
    $("preview").textContent = "";
    $("preview").hidden = true;
    return;
  }
  if (!text.trim()) {
    renderForecast(FORECAST, "", null, "Write your prompt above to see which words a model could read back.", "");
    $("preview").textContent = "";
    $("preview").hidden = true;
    return;
  }
  try {
    const result = await send(Msg.PREVIEW, { siteId, text });
    if (run !== previewRun) return;
    if (result.words) renderForecast(FORECAST, text, result.words, "", "Your prompt");
    else renderForecast(FORECAST, "", null, "Numbers mode: only your declared values are replaced; every other word is sent as written.", "");
    $("preview").textContent = result.text;
    $("preview").hidden = false;
    document.body.dataset.previewed = String(run);
  } catch (err) {
    if (run !== previewRun) return;
    renderForecast(FORECAST, "", null, `(no forecast: ${err.message})`, "");
    $("preview").textContent = `(no preview: ${err.message})`;
  }
}

const refreshPreview = debounce(preview, 150);

function showReceipt(result) {
  $("receipt-box").hidden = false;
  $("sent").textContent = result.text;
  const r = result.receipt;
  const lines = r
    ? [
        `ε ${r.epsilon_per_char.toFixed(2)} per character, ${r.chars_perturbed} characters perturbed`,
        `Total ε ${r.epsilon_total_basic.toFixed(1)} (basic composition)` +
          (r.epsilon_total_composed === null || r.epsilon_total_composed === undefined
            ? "; the tight composed bound is added to Veil's history"
            : `, ${r.epsilon_total_composed.toFixed(1)} composed (δ ${r.delta})`),
        // The word memo (py_core.memo): a word already released goes out as its earlier draw.
        ...(Number.isInteger(r.words_reused) && Number.isInteger(r.words_fresh)
          ? [`${r.words_fresh} words drawn now, ${r.words_reused} as drawn before (for the preview or an earlier send): the same form each time`]
          : []),
      ]
    : ["Numbers mode: RootGuard's cached noisy values replaced your declared values (no k-RR receipt)"];
  $("receipt").replaceChildren(...lines.map((line) => el("li", {}, line)));
}

async function sendPrompt() {
  const text = $("compose").value;
  if (!ready || sending || !text.trim()) return;
  sending = true;
  updateSend();
  showError(null);
  $("result").hidden = false;
  $("result").dataset.state = "working";
  $("result").textContent = "Veil is protecting your prompt…";
  try {
    const result = await send(Msg.COMPOSE_SEND, { tabId, text });
    $("result").dataset.state = result.sent ? "sent" : "refused";
    $("result").textContent = result.notice;
    if (result.text !== null) showReceipt(result);
    if (result.sent) {
      $("compose").value = "";
      preview();
    }
    document.body.dataset.sent = result.sent ? "sent" : "refused";
  } catch (err) {
    $("result").dataset.state = "refused";
    $("result").textContent = `Veil sent nothing: ${err.message}`;
    document.body.dataset.sent = "refused";
  } finally {
    sending = false;
    updateSend();
  }
}

// ---------------------------------------------------------------- the reply in the person's words

let replyShown = null; // the reply text last restored (the page is asked again every 2 s)

/** The tab's latest reply (read by the content script; nothing is written into the page). */
async function pageReply() {
  try {
    const reply = await ext.tabs.send(tabId, message(Msg.GET_REPLY, Target.CONTENT, {}));
    return reply?.ok ? reply.data : null;
  } catch {
    return null;
  }
}


async function showReply() {
  if (!tabId || !siteId) return;
  const found = await pageReply();
  if (!found) {
    $("reply-which").textContent = "Veil cannot read this page's replies (is it running in that tab?).";
    return;
  }
  if (!found.text) {
    $("reply-which").textContent = "No reply on the page yet.";
    $("reply").hidden = true;
    replyShown = null;
    return;
  }
  if (found.text === replyShown) return;
  const restored = await send(Msg.RESTORE_REPLY, { siteId, text: found.text });
  replyShown = found.text;
  const which = found.count > 1 ? `reply ${found.index} of ${found.count} on the page (the latest)` : "the page's only reply";
  $("reply-which").textContent = `Showing ${which}: ${replySummary(restored)}.`;
  $("reply").replaceChildren(...replyNodes(restored.segments));
  $("reply").hidden = false;
  document.body.dataset.reply = String(found.index);
}

$("reply-refresh").addEventListener("click", () => {
  replyShown = null;
  showReply().catch(showError);
});
setInterval(() => showReply().catch(() => {}), 2000);

$("compose").addEventListener("input", () => {
  updateSend();
  refreshPreview();
});
$("compose").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    sendPrompt();
  }
});
$("send").addEventListener("click", sendPrompt);
ext.storage.onChanged((changes, area) => {
  if (area === "local" && changes.settings) refreshState().then(preview, showError);
});

refreshState()
  .then(preview)
  .then(() => showReply().catch(() => {}))
  .catch(showError)
  .finally(() => {
    document.body.dataset.ready = "true";
  });
