// Veil companion chat page: each document's lifetime privacy budget -- a meter per document
// (GET /v1/budget), a reset with a reason (POST /v1/budget/reset, logged), the log
// (GET /v1/budget/log) -- and asking before an answer spends it (POST /v1/budget/estimate).
// Uses chat.js's $, api(), state, defenses, plural() and openConversation(); loaded after it.
// chat.js's hooks: each #doc-list item's data-doc-id, confirmSpend() before an owner's
// answer is sent, and the "veil:answer" event when an answer's veil object arrives.
"use strict";

const budget = { filter: null, docs: new Map(), timer: null, confirmed: null };

function percent(x) {
  const p = 100 * x;
  return (p > 0 && p < 0.1 ? p.toFixed(2) : p.toFixed(1)) + "%";
}

function dialogBox(id, title) {
  let box = $(id);
  if (box) return box;
  box = document.createElement("dialog");
  box.id = id;
  box.className = "budget-dialog";
  const head = document.createElement("h2");
  head.textContent = title;
  box.append(head);
  document.body.append(box);
  return box;
}

function button(text, className, onclick) {
  const b = document.createElement("button");
  b.type = "button"; b.textContent = text; b.className = className;
  if (onclick) b.onclick = onclick;
  return b;
}

// ------------------------------------------------------------------ the meters

async function refreshBudget() {
  if (state.guest || !state.token || !$("collection").value) return;
  let status;
  try {
    status = await api("/v1/budget?collection=" + encodeURIComponent($("collection").value));
  } catch (err) {
    $("budget-state").textContent = "Budgets not shown: " + err.message;
    return;
  }
  budget.filter = status.filter;
  budget.docs = new Map(status.documents.map((d) => [d.document_id, d]));
  $("budget-state").textContent = "";
  for (const li of $("doc-list").children) decorate(li);
}

// What is left of one document's lifetime budget, in words and a bar.
function meterWords(d, f) {
  const of = `ε ${d.spent_epsilon.toFixed(2)} of ${f.epsilon}`;
  if (d.exhausted) {
    return `Budget spent (${of}, ${plural(d.answers, "answer")}; ${percent(d.spent_fraction)} ` +
      "used): too little is left for another answer, so formal answers and guests no longer use it.";
  }
  if (d.answers === 0 && d.spent_rdp === 0) return `Budget untouched: ${of} spent.`;
  return `Budget ${percent(d.spent_fraction)} spent (${of}, ${plural(d.answers, "answer")}), ` +
    `${percent(d.remaining_fraction)} left: about ${plural(d.answers_left, "more answer")} ` +
    "under the bounded defense's defaults.";
}

function decorate(li) {
  const d = budget.docs.get(Number(li.dataset.docId));
  const old = li.querySelector(".budget-meter");
  if (old) old.remove();
  if (!d || !budget.filter) return;
  const box = document.createElement("div");
  box.className = "budget-meter" + (d.exhausted ? " spent" : "");
  box.dataset.spentFraction = d.spent_fraction;
  box.dataset.exhausted = d.exhausted;
  const bar = document.createElement("div");
  bar.className = "budget-bar";
  bar.setAttribute("role", "meter");
  bar.setAttribute("aria-label", `lifetime budget spent of ${d.document}`);
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", "100");
  bar.setAttribute("aria-valuenow", (100 * d.spent_fraction).toFixed(1));
  const fill = document.createElement("span");
  fill.style.width = Math.min(100, 100 * d.spent_fraction).toFixed(1) + "%";
  bar.append(fill);
  const words = document.createElement("span");
  words.className = "budget-words";
  words.textContent = meterWords(d, budget.filter);
  box.append(bar, words);
  if (d.spent_rdp > 0 || d.answers > 0) {
    box.append(button("Reset…", "budget-reset", () => openReset(d)));
  }
  li.append(box);
}

// chat.js rebuilds the list after every upload, delete and change of collection: the
// meters follow (one request for the whole list, a moment after the last change).
new MutationObserver(() => {
  clearTimeout(budget.timer);
  budget.timer = setTimeout(refreshBudget, 50);
}).observe($("doc-list"), { childList: true });

// ------------------------------------------------------------------ reset, with a reason

function openReset(d) {
  const box = dialogBox("budget-reset-dialog", "Reset a document's budget");
  box.querySelectorAll(":scope > :not(h2)").forEach((n) => n.remove());
  const text = document.createElement("p");
  text.textContent = `${d.document}: ${percent(d.spent_fraction)} of its lifetime budget spent ` +
    `(ε ${d.spent_epsilon.toFixed(2)}) by ${plural(d.answers, "answer")}. A reset sets it back to ` +
    "zero. What earlier answers released stays released: over all answers this document's " +
    "privacy loss is then the old spend plus the new one.";
  const label = document.createElement("label");
  label.textContent = "Reason (kept in the budget log)";
  const reason = document.createElement("textarea");
  reason.id = "budget-reason"; reason.rows = 2; reason.maxLength = 500; reason.required = true;
  label.append(reason);
  const problem = document.createElement("p");
  problem.className = "budget-problem"; problem.setAttribute("role", "alert");
  const go = button("Reset the budget", "budget-reset-go", async () => {
    const why = reason.value.trim();
    if (!why) { problem.textContent = "Give a reason: it is kept in the budget log."; reason.focus(); return; }
    go.disabled = true;
    try {
      await api("/v1/budget/reset", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ document_ids: [d.document_id], reason: why }),
      });
      box.close();
      await refreshBudget();
      $("budget-state").textContent = `${d.document}: budget reset (${why}).`;
    } catch (err) {
      problem.textContent = "Not reset: " + err.message;
    } finally {
      go.disabled = false;
    }
  });
  const cancel = button("Cancel", "budget-cancel", () => box.close());
  const bar = document.createElement("div");
  bar.className = "budget-buttons";
  bar.append(go, cancel);
  box.append(text, label, problem, bar);
  box.showModal();
  reason.focus();
}

// ------------------------------------------------------------------ the log

function logWhat(e) {
  const detail = e.detail || {};
  if (e.kind === "reset") {
    return `reset: "${detail.reason}" (was ${plural(detail.answers_before || 0, "answer")}, ` +
      `${Number(detail.spent_before || 0).toFixed(3)} RDP)`;
  }
  if (e.kind === "charge" && detail.digest) {
    return `charged ${Number(e.charge_rdp).toFixed(3)} RDP (the collection's digest, ` +
      `ε ${detail.digest.epsilon}, once)`;
  }
  if (e.kind === "charge") {
    const defense = detail.defense ? detail.defense.name : "?";
    return `charged ${Number(e.charge_rdp).toFixed(3)} RDP (${defense}, ${detail.max_tokens} tokens` +
      (detail.in_context ? "" : ", not in the context") + ")";
  }
  return `${e.kind}: ε ${detail.epsilon}, δ ${detail.delta}, order ${detail.order}`;
}

async function openLog() {
  const box = dialogBox("budget-log-dialog", "Budget log");
  box.querySelectorAll(":scope > :not(h2)").forEach((n) => n.remove());
  const about = document.createElement("p");
  about.className = "hint";
  about.textContent = "Every charge, reset and the budget's setup, newest first (the log cannot be edited).";
  const table = document.createElement("table");
  table.className = "budget-log";
  box.append(about, table, button("Close", "budget-cancel", () => box.close()));
  box.showModal();
  let entries;
  try {
    entries = (await api("/v1/budget/log?limit=200")).entries;
  } catch (err) {
    about.textContent = "The log could not be read: " + err.message;
    return;
  }
  for (const e of entries) {
    const tr = document.createElement("tr");
    tr.className = "budget-log-" + e.kind;
    const cells = [
      new Date(e.ts * 1000).toLocaleString(),
      e.document || (e.document_deleted ? "(deleted document)" : "—"),
      logWhat(e),
      e.spent_after == null ? "" : `${Number(e.spent_after).toFixed(3)} RDP after`,
    ];
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    table.append(tr);
  }
  if (!entries.length) about.textContent = "The log is empty.";
}

// ------------------------------------------------------------------ asking before spending

// Called by chat.js before an owner's answer is sent, with the request's body: under a
// formal defense that would charge documents, the cost is shown and the owner confirms.
// True: send it, with the estimate's budget_confirm (the companion charges exactly what was
// shown, or refuses with 409 and charges nothing if the budgets changed meanwhile).
// False: nothing was sent (nor charged), the page is as it was stored and the question is
// back in the box.
async function confirmSpend(body, text) {
  budget.confirmed = null;
  if ($("chat-context").textContent.startsWith("Not sent")) showContext();
  const defense = defenses.byName[body.defense];
  if (body.collection === null || !defense || !defense.guarantee.formal) return true;
  let estimate;
  try {
    estimate = await api("/v1/budget/estimate", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
  } catch (err) { // fail closed: not sent when the cost cannot be known
    await notSent(text, "Not sent: the cost could not be worked out: " + err.message);
    return false;
  }
  if (!estimate.charges) return true;
  if (await askSpend(estimate)) {
    // the answer charges exactly what was shown, or is refused (409) with nothing charged
    body.budget_confirm = estimate.confirm;
    budget.confirmed = estimate;
    return true;
  }
  await notSent(text, "Not sent: nothing was charged.");
  return false;
}

async function notSent(text, why) {
  if (state.conversation) await openConversation(state.conversation);
  else $("messages").textContent = "";
  if (!$("prompt").value.trim()) $("prompt").value = text;
  $("chat-context").textContent = why;
}

function askSpend(estimate) {
  const box = dialogBox("budget-confirm-dialog", "Spend the documents' privacy budget?");
  box.querySelectorAll(":scope > :not(h2)").forEach((n) => n.remove());
  const note = document.createElement("p");
  note.className = "budget-estimate-note";
  note.textContent = estimate.note;
  const table = document.createElement("table");
  table.className = "budget-estimate";
  const head = document.createElement("tr");
  for (const t of ["document", "spent now", "this answer", "left after it"]) {
    const th = document.createElement("th"); th.textContent = t; head.append(th);
  }
  table.append(head);
  for (const d of estimate.documents) {
    const tr = document.createElement("tr");
    tr.dataset.docId = d.document_id;
    const cells = [
      d.document + (d.in_context ? "" : " (charged, not in the context)"),
      percent(d.spent_fraction_before),
      `${percent(d.charge_fraction)} (ε ${estimate.answer_epsilon.toFixed(2)})`,
      `${percent(d.remaining_fraction)} (ε ${d.spent_epsilon.toFixed(2)} spent)`,
    ];
    for (const text of cells) { const td = document.createElement("td"); td.textContent = text; tr.append(td); }
    table.append(tr);
  }
  box.append(note, table);
  if (estimate.excluded.length) {
    const left = document.createElement("p");
    left.className = "hint";
    left.textContent = "Left out, too little budget left: " + estimate.excluded.map((d) => d.document).join(", ") + ".";
    box.append(left);
  }
  return new Promise((resolve) => {
    const bar = document.createElement("div");
    bar.className = "budget-buttons";
    const done = (ok) => { box.onclose = null; box.close(); resolve(ok); };
    bar.append(button("Spend and send", "budget-spend", () => done(true)),
      button("Don't send", "budget-cancel", () => done(false)));
    box.append(bar);
    box.onclose = () => resolve(false); // Escape
    box.showModal();
  });
}

// After an answer: the meters move, and the answer says whether it was charged as estimated.
document.addEventListener("veil:answer", ({ detail }) => {
  const spent = detail.veil && detail.veil.budget;
  if (state.guest || !spent || !spent.formal) return;
  refreshBudget();
  const asked = budget.confirmed;
  budget.confirmed = null;
  if (!asked || !detail.div) return;
  const key = (docs) => JSON.stringify(docs.map((d) => [d.document_id, d.charge_rdp, d.spent_rdp]));
  const same = key(spent.documents || []) === key(asked.documents);
  const line = document.createElement("div");
  line.className = "budget-charged " + (same ? "as-estimated" : "differs");
  line.textContent = same
    ? `Charged as estimated: ${plural(asked.documents.length, "document")}, ` +
      `${percent(asked.charge_fraction)} of each one's lifetime budget.`
    : "Charged differently from the estimate (the documents changed in between): see the " +
      "receipt's details and the budget log.";
  detail.div.append(line);
});

// ------------------------------------------------------------------ wiring

(function addBudgetControls() {
  const state_ = document.createElement("div");
  state_.id = "budget-state"; state_.setAttribute("role", "status");
  const log = button("Budget log", "budget-log-open", openLog);
  log.id = "budget-log-open";
  $("doc-list").after(state_, log);
})();
