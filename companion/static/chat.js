// Veil companion chat page: no build step, plain DOM.  The token lives in
// localStorage; every /v1 call sends it as a Bearer token.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { token: localStorage.getItem("veil-token") || "", history: [] };

const KNOBS = {
  copy_aware: [["max_copy_run", 3, 1], ["sigma", 1.0, 0.05], ["top_k", 8, 1], ["first_tokens", 1, 1]],
  bounded: [["epsilon", 8, 0.5], ["clip", 4, 0.5], ["top_k", 20, 1]],
  pad: [["lambda_amp", 1.0, 0.5], ["sigma_base", 0.04, 0.01], ["tau_conf", 0.6, 0.05], ["clip", 100, 10]],
  static: [["sigma", 0.05, 0.01], ["clip", 100, 10]],
  none: [],
};

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

function renderKnobs() {
  const box = $("knobs");
  box.textContent = "";
  for (const [name, value, step] of KNOBS[$("defense").value]) {
    const label = document.createElement("label");
    label.className = "knob";
    label.append(name.replaceAll("_", " "));
    const input = document.createElement("input");
    input.type = "number"; input.step = step; input.value = value; input.dataset.knob = name;
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

function renderReceipt(div, veil) {
  const r = veil.receipt || {};
  const box = document.createElement("div");
  box.className = "receipt " + (r.meaningful ? "meaningful" : (r.mechanism === "none" ? "" : "vacuous"));
  const strong = document.createElement("strong");
  strong.textContent = "Receipt: ";
  box.append(strong, r.statement || "no receipt");
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  summary.textContent = "details";
  const pre = document.createElement("pre");
  pre.textContent = JSON.stringify({
    mechanism: r.mechanism, epsilon: r.epsilon_text, delta: r.delta, gamma: r.gamma,
    protected_tokens: r.protected_tokens, total_tokens: r.total_tokens, screened: r.screened,
    sensitivity: r.sensitivity, best_order: r.best_order, params: r.params, notes: r.notes,
  }, null, 1);
  details.append(summary, pre);
  box.append(details);
  div.append(box);
  if (veil.citations && veil.citations.length) {
    const cites = document.createElement("ol");
    cites.className = "citations";
    for (const c of veil.citations) {
      const li = document.createElement("li");
      li.append(`${c.document} #${c.chunk_index} (score ${c.score.toFixed(2)}) `);
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
renderKnobs();
checkToken().then((ok) => ok && refreshCollections());
