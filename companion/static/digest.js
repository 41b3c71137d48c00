// Veil companion chat page: the collection's one-time DP digest (companion/rag/digest.py).
// The owner sees what building it costs (POST .../digest/estimate) and is asked before it
// charges every document once (POST .../digest); the dialog lists the released statements
// (GET .../digest) and can forget them (DELETE). Uses chat.js's $, api(), state, plural()
// and budget.js's dialogBox(), button(), percent(), refreshBudget(); loaded after both.
"use strict";

function digestPath(suffix = "") {
  return "/v1/collections/" + encodeURIComponent($("collection").value) + "/digest" + suffix;
}

function para(text, className) {
  const p = document.createElement("p");
  p.textContent = text;
  if (className) p.className = className;
  return p;
}

function listStatements(digest) {
  const list = document.createElement("ul");
  list.className = "digest-statements";
  for (const s of digest.statements) {
    const li = document.createElement("li");
    li.textContent = `${s.text} (about ${plural(s.documents, "document")})`;
    list.append(li);
  }
  return list;
}

async function openDigest() {
  const box = dialogBox("digest-dialog", "Guest digest");
  box.querySelectorAll(":scope > :not(h2)").forEach((n) => n.remove());
  const about = para(
    "A digest releases, once and with differential privacy, the sentences that many " +
    "documents of this collection write the same way. Guests' questions about what it " +
    "holds are answered from it at no further cost; it cannot answer what only a few " +
    "documents say.", "hint");
  const problem = para("", "budget-problem");
  problem.setAttribute("role", "alert");
  const bar = document.createElement("div");
  bar.className = "budget-buttons";
  box.append(about, problem, bar);
  box.showModal();
  let current = null;
  try {
    current = await api(digestPath());
  } catch (_) { /* none yet */ }
  if (current) {
    box.insertBefore(para(
      `Released ${new Date(current.created * 1000).toLocaleString()} at ε ` +
      `${current.config.epsilon} per document: ${plural(current.statements.length, "statement")} ` +
      `from ${plural(current.contributors, "document")}.`, "digest-current"), problem);
    box.insertBefore(listStatements(current), problem);
    bar.append(button("Forget the digest", "digest-forget", async () => {
      try {
        await api(digestPath(), { method: "DELETE" });
        box.close();
      } catch (err) { problem.textContent = "Not forgotten: " + err.message; }
    }));
  }
  let estimate;
  try {
    estimate = await api(digestPath("/estimate"), {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({}),
    });
  } catch (err) {
    problem.textContent = "The cost could not be estimated: " + err.message;
  }
  if (estimate) {
    box.insertBefore(para(estimate.note, "digest-cost"), problem);
    const go = button(current ? "Build it again" : "Build the digest", "digest-build", async () => {
      go.disabled = true;
      try {
        const made = await api(digestPath(), {
          method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({}),
        });
        box.close();
        await refreshBudget();
        $("budget-state").textContent =
          `Digest built: ${plural(made.statements.length, "statement")} released ` +
          `(${percent(estimate.charge_fraction)} of each document's lifetime budget, once).`;
      } catch (err) {
        problem.textContent = "Not built: " + err.message;
      } finally {
        go.disabled = false;
      }
    });
    go.disabled = estimate.documents_that_can_pay === 0;
    bar.prepend(go);
  }
  bar.append(button("Close", "budget-cancel", () => box.close()));
}

(function addDigestControl() {
  const open = button("Guest digest…", "digest-open", openDigest);
  open.id = "digest-open";
  $("budget-log-open").after(open);
})();
