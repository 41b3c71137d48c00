// Veil companion chat page: no build step, plain DOM.  The token lives in
// localStorage; every /v1 call sends it as a Bearer token.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { token: localStorage.getItem("veil-token") || "", history: [] };

// The defenses, their knobs and defaults come from the registry (GET /v1/defenses).
const defenses = { list: [], byName: {} };

function headers(extra = {}) {
  return { Authorization: "Bearer " + state.token, ...extra };
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers || {}) });
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try { message = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return response.json();
}

async function loadDefenses() {
  const body = await api("/v1/defenses");
  defenses.list = body.data;
  defenses.byName = Object.fromEntries(body.data.map((d) => [d.name, d]));
  const select = $("defense");
  const current = select.value || body.default;
  select.textContent = "";
  for (const d of body.data) select.append(new Option(d.label, d.name, false, d.name === current));
  renderKnobs();
}

function renderKnobs() {
  const box = $("knobs");
  box.textContent = "";
  const defense = defenses.byName[$("defense").value];
  if (!defense) return;
  const about = document.createElement("p");
  about.className = "defense-summary";
  about.textContent = defense.summary + (defense.guarantee.formal ? "" : " (not a DP guarantee)");
  box.append(about);
  for (const knob of defense.knobs) {
    const label = document.createElement("label");
    label.className = "knob";
    label.title = knob.help;
    label.append(knob.name.replaceAll("_", " "));
    const input = document.createElement("input");
    input.type = "number"; input.step = knob.step; input.value = knob.default;
    input.dataset.knob = knob.name;
    label.append(input);
    box.append(label);
  }
}

function knobValues() {
  const params = {};
  for (const input of $("knobs").querySelectorAll("input")) {
    const value = Number(input.value);
    if (input.value !== "" && Number.isFinite(value)) params[input.dataset.knob] = value;
  }
  return params;
}

async function refreshCollections(select) {
  const collections = await api("/v1/collections");
  const current = select || $("collection").value || "default";
  const names = new Set(collections.map((c) => c.name));
  names.add(current);
  $("collection").textContent = "";
  for (const name of [...names].sort()) {
    const option = new Option(name, name, false, name === current);
    $("collection").append(option);
  }
  await refreshDocuments();
}

async function refreshDocuments() {
  const docs = await api("/v1/documents?collection=" + encodeURIComponent($("collection").value));
  const list = $("doc-list");
  list.textContent = "";
  for (const doc of docs) {
    const li = document.createElement("li");
    li.textContent = `${doc.name} (${doc.chunks} chunks)`;
    const del = document.createElement("button");
    del.textContent = "✕"; del.title = "Delete " + doc.name;
    del.onclick = async () => {
      if (!confirm(`Delete ${doc.name} from the store?`)) return;
      await api("/v1/documents/" + doc.id, { method: "DELETE" });
      await refreshDocuments();
    };
    li.append(del);
    list.append(li);
  }
}

async function upload() {
  const files = $("files").files;
  if (!files.length) { $("upload-state").textContent = "Choose files first."; return; }
  const name = $("new-collection").value.trim() || $("collection").value || "default";
  const form = new FormData();
  for (const file of files) form.append("files", file);
  form.append("collection", name);
  $("upload-state").textContent = "Ingesting…";
  try {
    const result = await api("/v1/documents", { method: "POST", body: form });
    const added = result.documents.filter((d) => d.created).length;
    $("upload-state").textContent = `${added} added, ${result.documents.length - added} already there.`;
    $("files").value = ""; $("new-collection").value = "";
    await refreshCollections(name);
  } catch (err) {
    $("upload-state").textContent = "Upload failed: " + err.message;
  }
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("messages").append(div);
  $("messages").scrollTop = $("messages").scrollHeight;
  return div;
}

function receiptKind(r) {
  if (!r.noise_added) return "unprotected";
  if (!r.formal) return "heuristic";
  return r.meaningful ? "meaningful" : "weak";
}

function receiptRows(r) {
  const eps = (text) => (text == null ? "—" : text);
  const rows = [["defense", r.label || r.mechanism]];
  if (r.formal) {
    rows.push(["guarantee", `ε ${eps(r.epsilon_text)}, δ ${r.delta} (calibrated for ${r.max_tokens} tokens)`]);
    rows.push(["this answer", `ε ${eps(r.epsilon_spent_text)} over ${r.total_tokens} tokens (after the fact)`]);
    rows.push(["neighbouring relation", r.relation]);
  } else {
    rows.push(["guarantee", "none: not differential privacy"]);
    if (r.nominal_epsilon_text) rows.push(["nominal ε (not a guarantee)", r.nominal_epsilon_text]);
  }
  rows.push(["tokens with noise", `${r.protected_tokens} of ${r.total_tokens} (γ ${Number(r.gamma || 0).toFixed(2)})`]);
  const screened = Object.entries(r.screened || {}).map(([k, v]) => `${k} ${v}`).join(", ");
  if (screened) rows.push(["screened because", screened]);
  const params = Object.entries(r.params || {}).map(([k, v]) => `${k}=${v}`).join(", ");
  if (params) rows.push(["parameters", params]);
  for (const note of r.notes || []) rows.push(["note", note]);
  const ctx = r.context;
  if (ctx) {
    const cut = [];
    if (ctx.partial.length) cut.push(`cut short: #${ctx.partial.join(", #")}`);
    if (ctx.cut.length) cut.push(`left out: #${ctx.cut.join(", #")}`);
    rows.push(["retrieved context", `${ctx.tokens} of ${ctx.retrieved_tokens} tokens ` +
      `(budget ${ctx.budget_tokens})` + (cut.length ? `; ${cut.join("; ")}` : "")]);
  }
  return rows;
}

function renderReceipt(div, veil) {
  const r = veil.receipt || {};
  const box = document.createElement("div");
  box.className = "receipt " + receiptKind(r);
  box.dataset.kind = receiptKind(r);
  const headline = document.createElement("strong");
  headline.className = "receipt-headline";
  headline.textContent = r.headline || "no receipt";
  const statement = document.createElement("div");
  statement.className = "receipt-statement";
  statement.textContent = r.statement || "";
  box.append(headline, statement);
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  summary.textContent = "details";
  const table = document.createElement("table");
  table.className = "receipt-table";
  for (const [key, value] of receiptRows(r)) {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.textContent = key;
    const td = document.createElement("td");
    td.textContent = value;
    tr.append(th, td);
    table.append(tr);
  }
  details.append(summary, table);
  box.append(details);
  div.append(box);
  if (veil.citations && veil.citations.length) {
    const cites = document.createElement("ol");
    cites.className = "citations";
    for (const c of veil.citations) {
      const li = document.createElement("li");
      const kept = c.included === "cut" ? ", not in the prompt: over the context budget"
        : c.included === "partial" ? `, first ${c.included_chars} characters in the prompt` : "";
      li.append(`${c.document} #${c.chunk_index} (score ${c.score.toFixed(2)}${kept}) `);
      const q = document.createElement("q");
      q.textContent = c.text.length > 220 ? c.text.slice(0, 220) + "…" : c.text;
      li.append(q);
      cites.append(li);
    }
    div.append(cites);
  }
}

async function ask(event) {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text) return;
  $("prompt").value = "";
  addMessage("user", text);
  state.history.push({ role: "user", content: text });
  const div = addMessage("assistant", "");
  const body = {
    model: "veil", messages: state.history, stream: true,
    max_tokens: Number($("max-tokens").value) || 200,
    defense: $("defense").value, defense_params: knobValues(),
  };
  if ($("use-rag").checked && $("collection").value) body.collection = $("collection").value;
  $("send").disabled = true;
  let answer = "";
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body),
    });
    if (!response.ok) {
      let message = response.status + "";
      try { message = (await response.json()).error.message; } catch (_) { /* ignore */ }
      throw new Error(message);
    }
    await readServerSentEvents(response, ({ data }) => {
      data = data.trim();
      if (!data || data === "[DONE]") return;
      const event = JSON.parse(data);
      if (event.error) throw new Error(event.error.message);
      const delta = event.choices[0].delta.content;
      if (delta) { answer += delta; div.textContent = answer; }
      if (event.veil) renderReceipt(div, event.veil);
    });
    state.history.push({ role: "assistant", content: answer });
  } catch (err) {
    div.className = "msg error";
    div.textContent = (answer ? answer + "\n\n" : "") + "Error: " + err.message;
    state.history.pop();
  } finally {
    $("send").disabled = false;
  }
}

async function checkToken() {
  if (!state.token) { $("token-state").textContent = "No token yet."; return false; }
  try {
    await api("/v1/models");
    $("token-state").textContent = "Connected.";
    await loadDefenses();
    return true;
  } catch (err) {
    $("token-state").textContent = err.message;
    return false;
  }
}

$("save-token").onclick = async () => {
  state.token = $("token").value.trim();
  localStorage.setItem("veil-token", state.token);
  if (await checkToken()) await refreshCollections();
};
$("defense").onchange = renderKnobs;
$("collection").onchange = refreshDocuments;
$("upload").onclick = upload;
$("ask").onsubmit = ask;
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("ask").requestSubmit(); }
});
$("token").value = state.token;
checkToken().then((ok) => ok && refreshCollections());
