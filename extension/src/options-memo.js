// The options page's word memo section: what was sent once and is reused, the
// lifetime ledger per site and in total, the reset (logged) and the export of
// the history with the ledger.

import { Msg } from "./messages.js";
import { el, send } from "./page-api.js";

/** The page's element with this id (an input, a button, a table: the id says which). @type {(id: string) => any} */
const $ = (id) => document.getElementById(id);
const fixed = (x, digits = 1) => (x === null || x === undefined ? "—" : Number(x).toFixed(digits));

function ledgerRow(name, figures) {
  return el("tr", { "data-ledger": name },
    el("td", {}, name),
    el("td", {}, String(figures.words)),
    el("td", {}, String(figures.chars)),
    el("td", {}, fixed(figures.epsilon_basic)),
    el("td", {}, `${fixed(figures.epsilon_composed)} (δ ${figures.delta})`));
}

export async function renderMemo() {
  const memo = await send(Msg.MEMO_STATE);
  const summary = $("memo-summary");
  summary.dataset.state = "ready";
  summary.dataset.words = String(memo.words);
  summary.textContent =
    `${memo.words} distinct word${memo.words === 1 ? "" : "s"} kept with the form each was sent as` +
    (memo.unsent ? ` (${memo.unsent} only shown in a preview so far)` : "") + ".";
  const { total, sites } = memo.ledger;
  $("memo-ledger").tBodies[0].replaceChildren(
    ledgerRow("all sites", total),
    ...Object.entries(sites).map(([id, figures]) => ledgerRow(id, figures)),
  );
  $("memo-table").tBodies[0].replaceChildren(
    ...memo.entries.map((e) =>
      el("tr", {}, el("td", {}, e.word), el("td", {}, el("code", {}, e.sent)), el("td", {}, String(e.epsilon)), el("td", {}, e.sites.join(", ") || "preview only"))),
  );
  $("memo-events").textContent = memo.events.length
    ? "Resets: " + memo.events.map((e) => `${new Date(e.ts).toLocaleString()} (${e.words} words; ${e.reason})`).join("; ")
    : "Never reset.";
  return memo;
}

async function exportAll() {
  const state = await send(Msg.GET_STATE, {});
  const history = {};
  for (const site of state.sites) history[site.id] = (await send(Msg.GET_HISTORY, { siteId: site.id })).entries;
  const memo = await send(Msg.MEMO_STATE);
  const blob = new Blob([JSON.stringify({ format: "veil.history", version: 1, exportedAt: new Date().toISOString(), history, ledger: memo.ledger, memoResets: memo.events }, null, 2)], { type: "application/json" });
  const a = el("a", { href: URL.createObjectURL(blob), download: "veil-history.json" });
  document.body.append(a);
  a.click();
  a.remove();
}

export function wireMemo(onError) {
  const guard = (fn) => async () => {
    try {
      await fn();
      onError(null);
    } catch (err) {
      onError(err);
    }
  };
  $("memo-export").addEventListener("click", guard(exportAll));
  $("memo-reset").addEventListener("click", guard(async () => {
    const reason = prompt("Forget every word's draw? The next send of each word is a new release (counted again in the ledger). Why?", "");
    if (reason === null) return;
    await send(Msg.MEMO_RESET, { confirm: true, reason: reason || "reset by the person" });
    await renderMemo();
  }));
}
