// Veil companion chat page: no build step, plain DOM.  The token lives in
// localStorage; every /v1 call sends it as a Bearer token.  Conversations are
// kept by the companion (/v1/conversations); the page remembers which one is open.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  token: localStorage.getItem("veil-token") || "",
  conversation: localStorage.getItem("veil-conversation") || null,
  settings: null, // GET /v1/chat/settings: the API's defaults, the page's too
  collections: new Set(),
  models: [],
  loadingModel: null,
  busy: false,
};

// The defenses, their knobs and defaults come from the registry (GET /v1/defenses).
const defenses = { list: [], byName: {}, default: null };

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

function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many || one + "s"}`;
}

// ------------------------------------------------------------------ the token

async function explainToken() {
  // No token needed: the page says where this server keeps it before it has it.
  try {
    const response = await fetch("/chat/setup");
    if (response.ok) $("token-where").textContent = (await response.json()).explanation;
  } catch (_) { /* keep the general sentence */ }
}

async function checkToken() {
  if (!state.token) { $("token-state").textContent = "No token yet."; return false; }
  try {
    state.settings = await api("/v1/chat/settings");
    $("token-state").textContent = "Connected.";
    applySettings();
    await loadDefenses();
    await loadModels();
    return true;
  } catch (err) {
    $("token-state").textContent = err.message;
    return false;
  }
}

function applySettings() {
  const s = state.settings;
  $("files").accept = s.upload.extensions.join(",");
  const mb = (s.upload.max_upload_bytes / 1e6).toFixed(0);
  $("files-hint").textContent = `Accepted files: ${s.upload.extensions.join(" ")} (up to ${mb} MB per upload).`;
  $("retrieval-mode").textContent = "";
  for (const mode of s.retrieval_modes) {
    $("retrieval-mode").append(new Option(mode + (mode === s.retrieval_mode ? " (default)" : ""), mode, false, mode === s.retrieval_mode));
  }
  const floor = s.retrieval_min_score == null ? -1 : s.retrieval_min_score;
  if (!$("min-score").value) $("min-score").value = floor;
  $("min-score-hint").textContent = "A passage whose similarity to the question is below this " +
    `(−1 to 1; default ${floor}) is never used, so an unrelated question gets no passages; −1: no minimum.`;
  $("max-tokens").max = s.max_tokens_limit;
  if (!$("max-tokens").value) $("max-tokens").value = s.default_max_tokens;
  $("max-tokens-hint").textContent = `Longest answer, in tokens (1–${s.max_tokens_limit}; ` +
    `default ${s.default_max_tokens}). Formal defenses are calibrated for this length.`;
}

// ------------------------------------------------------------------ defenses

async function loadDefenses() {
  const body = await api("/v1/defenses");
  defenses.list = body.data;
  defenses.default = body.default;
  defenses.byName = Object.fromEntries(body.data.map((d) => [d.name, d]));
  const select = $("defense");
  const current = select.value || body.default;
  select.textContent = "";
  for (const d of body.data) select.append(new Option(d.label, d.name, false, d.name === current));
  renderKnobs();
}

function renderKnobs(values = {}) {
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
    input.type = "number"; input.step = knob.step;
    input.value = knob.name in values ? values[knob.name] : knob.default;
    input.dataset.knob = knob.name;
    input.dataset.default = knob.default;
    label.append(input);
    const help = document.createElement("p");
    help.className = "hint knob-help";
    help.textContent = `${knob.help} (default ${knob.default})`;
    box.append(label, help);
  }
}

// Checked before sending: every knob a finite number (whole where its default and step are,
// not negative where its default is not), max tokens a whole number within the limit.
function validate() {
  const problems = [];
  for (const input of $("knobs").querySelectorAll("input")) {
    const name = input.dataset.knob.replaceAll("_", " ");
    const value = Number(input.value);
    const whole = Number.isInteger(Number(input.dataset.default)) && Number.isInteger(Number(input.step));
    input.classList.remove("invalid");
    if (input.value.trim() === "" || !Number.isFinite(value)) problems.push([input, `${name} must be a number`]);
    else if (value < 0 && Number(input.dataset.default) >= 0) problems.push([input, `${name} cannot be negative`]);
    else if (whole && !Number.isInteger(value)) problems.push([input, `${name} must be a whole number`]);
  }
  const max = $("max-tokens");
  const limit = state.settings ? state.settings.max_tokens_limit : 1024;
  const tokens = Number(max.value);
  max.classList.remove("invalid");
  if (!Number.isInteger(tokens) || tokens < 1 || tokens > limit) {
    problems.push([max, `max tokens must be a whole number from 1 to ${limit}`]);
  }
  const score = $("min-score");
  score.classList.remove("invalid");
  const v = Number(score.value);
  if (score.value.trim() === "" || !Number.isFinite(v) || v < -1 || v > 1) {
    problems.push([score, "minimum relevance must be a number from -1 to 1 (-1: no minimum)"]);
  }
  for (const [input] of problems) input.classList.add("invalid");
  $("settings-state").textContent = problems.length ? "Not sent: " + problems.map((p) => p[1]).join("; ") + "." : "";
  return problems.length === 0;
}

function knobValues() {
  const params = {};
  for (const input of $("knobs").querySelectorAll("input")) {
    const value = Number(input.value);
    if (input.value !== "" && Number.isFinite(value)) params[input.dataset.knob] = value;
  }
  return params;
}

// ------------------------------------------------------------------ models

async function loadModels(select) {
  const body = await api("/v1/models");
  state.models = body.data;
  const current = select || $("model").value || (body.data.find((m) => m.veil.default) || {}).id;
  $("model").textContent = "";
  for (const m of body.data) {
    const loaded = m.veil.state === "loaded" ? "" : " (not loaded)";
    const option = new Option(`${m.id}${m.veil.default ? " — default" : ""}${loaded}`, m.id, false, m.id === current);
    option.title = m.veil.description || "";
    $("model").append(option);
  }
  showModel();
}

function showModel() {
  const m = state.models.find((x) => x.id === $("model").value);
  if (!m) return;
  if (state.loadingModel !== m.id) {
    $("model-state").textContent = m.veil.description + (m.veil.state === "loaded" ? ". Loaded." : ". Loads when chosen.");
  }
}

async function chooseModel() {
  const id = $("model").value;
  await saveSettings();
  const card = state.models.find((x) => x.id === id);
  if (!card || card.veil.state === "loaded") { showModel(); return; }
  state.loadingModel = id;
  updateSend();
  const path = "/v1/models/" + encodeURIComponent(id);
  try {
    await api(path + "/load", { method: "POST" });
    for (;;) {
      const load = (await api(path)).load;
      if (load.state === "loaded") break;
      if (load.state === "failed") throw new Error(load.error || "the model did not load");
      $("model-state").textContent = `Loading ${id}: ${load.stage || "starting"}… (${load.elapsed_s || 0} s)`;
      await new Promise((r) => setTimeout(r, 500));
    }
    state.loadingModel = null;
    await loadModels(id);
    $("model-state").textContent = `${id} is loaded.`;
  } catch (err) {
    state.loadingModel = null;
    $("model-state").textContent = `${id} could not be loaded: ${err.message}`;
  } finally {
    updateSend();
  }
}

function updateSend() {
  $("send").disabled = state.busy || state.loadingModel !== null;
  $("send").title = state.loadingModel ? `waiting for ${state.loadingModel} to load` : "";
}

// ------------------------------------------------------------------ documents

async function refreshCollections(select) {
  const collections = await api("/v1/collections");
  state.collections = new Set(collections.map((c) => c.name));
  const fallback = (state.settings && state.settings.default_collection) || "default";
  const current = select || $("collection").value || fallback;
  const names = new Set(state.collections);
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
    li.textContent = `${doc.name} (${plural(doc.chunks, "chunk")})`;
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
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(name)) {
    $("upload-state").textContent = "Not uploaded: a collection name is 1–64 letters, digits, '-', '_' or '.'.";
    return;
  }
  const accepted = state.settings ? state.settings.upload.extensions : [];
  const refused = [...files].filter((f) => accepted.length && !accepted.some((e) => f.name.toLowerCase().endsWith(e)));
  if (refused.length) {
    $("upload-state").textContent = `Not uploaded: ${refused.map((f) => f.name).join(", ")} — the companion reads ${accepted.join(" ")}.`;
    return;
  }
  const form = new FormData();
  for (const file of files) form.append("files", file);
  form.append("collection", name);
  $("upload-state").textContent = "Ingesting…";
  try {
    const result = await api("/v1/documents", { method: "POST", body: form });
    const added = result.documents.filter((d) => d.created).length;
    const there = result.documents.length - added;
    $("upload-state").textContent = `${plural(added, "file")} added, ${there} already there.`;
    $("files").value = ""; $("new-collection").value = "";
    await refreshCollections(name);
    await saveSettings();
  } catch (err) {
    $("upload-state").textContent = "Upload failed: " + err.message;
  }
}

// ------------------------------------------------------------------ conversations

function currentSettings() {
  return {
    model: $("model").value || null,
    collection: $("collection").value || null,
    use_documents: $("use-rag").checked,
    defense: $("defense").value,
    defense_params: knobValues(),
    max_tokens: Number($("max-tokens").value) || null,
    retrieval_mode: $("retrieval-mode").value || null,
    retrieval_min_score: Number($("min-score").value),
  };
}

async function saveSettings() {
  if (!state.conversation) return;
  try {
    await api("/v1/conversations/" + state.conversation, {
      method: "PATCH", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ settings: currentSettings() }),
    });
  } catch (_) { /* shown when the next answer fails */ }
}

async function refreshConversations() {
  const list = $("conversation-list");
  let conversations;
  try {
    conversations = (await api("/v1/conversations")).data;
  } catch (err) {
    $("conversation-state").textContent = err.message;
    return;
  }
  list.textContent = "";
  for (const c of conversations) {
    const li = document.createElement("li");
    li.dataset.id = c.id;
    if (c.id === state.conversation) li.className = "current";
    const open = document.createElement("button");
    open.className = "conversation-open";
    open.textContent = c.title;
    open.title = `${plural(c.messages, "message")}; open`;
    open.onclick = () => openConversation(c.id);
    const rename = document.createElement("button");
    rename.textContent = "✎"; rename.title = "Rename"; rename.className = "conversation-rename";
    rename.onclick = async () => {
      const title = prompt("New name for the conversation:", c.title);
      if (!title || !title.trim()) return;
      try {
        await api("/v1/conversations/" + c.id, {
          method: "PATCH", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ title: title.trim() }),
        });
      } catch (err) { $("conversation-state").textContent = "Not renamed: " + err.message; }
      await refreshConversations();
    };
    const exp = document.createElement("button");
    exp.textContent = "⤓"; exp.title = "Export as Markdown"; exp.className = "conversation-export";
    exp.onclick = () => exportConversation(c.id);
    const del = document.createElement("button");
    del.textContent = "✕"; del.title = "Delete"; del.className = "conversation-delete";
    del.onclick = async () => {
      if (!confirm(`Delete the conversation "${c.title}"? Its messages are removed from the companion.`)) return;
      await api("/v1/conversations/" + c.id, { method: "DELETE" });
      if (state.conversation === c.id) newConversation();
      await refreshConversations();
    };
    li.append(open, rename, exp, del);
    list.append(li);
  }
  $("conversation-state").textContent = conversations.length ? "" : "No conversation yet: ask a question to start one.";
}

async function exportConversation(id) {
  const response = await fetch(`/v1/conversations/${id}/export`, { headers: headers() });
  if (!response.ok) { $("conversation-state").textContent = "Export failed: " + response.status; return; }
  const disposition = response.headers.get("content-disposition") || "";
  const name = (disposition.match(/filename="([^"]+)"/) || [])[1] || "conversation.md";
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement("a");
  link.href = url; link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function newConversation() {
  state.conversation = null;
  localStorage.removeItem("veil-conversation");
  $("messages").textContent = "";
  $("chat-title").textContent = "";
  for (const li of $("conversation-list").children) li.classList.remove("current");
}

async function openConversation(id) {
  let conv;
  try {
    conv = await api("/v1/conversations/" + id);
  } catch (err) {
    newConversation(); // deleted elsewhere, or a stale id after a reload
    return;
  }
  state.conversation = conv.id;
  localStorage.setItem("veil-conversation", conv.id);
  $("chat-title").textContent = conv.title;
  $("messages").textContent = "";
  for (const m of conv.messages) {
    const div = addMessage(m.role, m.content);
    if (m.role === "assistant" && m.veil) renderReceipt(div, m.veil);
  }
  const s = conv.settings || {};
  if (s.defense && defenses.byName[s.defense]) { $("defense").value = s.defense; renderKnobs(s.defense_params || {}); }
  if (s.max_tokens) $("max-tokens").value = s.max_tokens;
  if (typeof s.use_documents === "boolean") $("use-rag").checked = s.use_documents;
  if (s.retrieval_mode) $("retrieval-mode").value = s.retrieval_mode;
  if (typeof s.retrieval_min_score === "number") $("min-score").value = s.retrieval_min_score;
  if (s.collection) await refreshCollections(s.collection);
  if (s.model && state.models.some((m) => m.id === s.model) && s.model !== $("model").value) {
    $("model").value = s.model;
    chooseModel();
  }
  for (const li of $("conversation-list").children) li.classList.toggle("current", li.dataset.id === conv.id);
}

// ------------------------------------------------------------------ messages

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

function receiptRows(r, budget) {
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
  const v = r.votes;
  if (v) {
    rows.push(["private vote", `${v.released_tokens} of ${v.released_tokens_allowed} tokens went to the ` +
      `document groups' vote, ${v.agreed_tokens} agreed with the model without documents` +
      (v.budget_spent ? `; the answer's budget was spent: ${v.public_fallback_tokens} later tokens ` +
        "are the model's alone" : "")]);
  }
  if (budget && budget.formal) {
    rows.push(["document budget", budget.note]);
    for (const d of budget.documents || []) {
      rows.push([`· ${d.document}`, `${(100 * d.spent_fraction).toFixed(1)}% of its lifetime budget ` +
        `spent (ε ${d.spent_epsilon.toFixed(2)}), ${(100 * d.remaining_fraction).toFixed(1)}% left` +
        (d.in_context ? "" : "; charged, not in the context")]);
    }
  }
  const ctx = r.context;
  if (ctx) {
    const cut = [];
    if (ctx.partial.length) cut.push(`cut short: #${ctx.partial.join(", #")}`);
    if (ctx.cut.length) cut.push(`left out: #${ctx.cut.join(", #")}`);
    if (ctx.dropped && ctx.dropped.length) cut.push(`far less relevant, left out: #${ctx.dropped.join(", #")}`);
    rows.push(["retrieved context", `${ctx.tokens} of ${ctx.retrieved_tokens} tokens ` +
      `(budget ${ctx.budget_tokens}; ${plural(ctx.chunks, "chunk")})` + (cut.length ? `; ${cut.join("; ")}` : "")]);
  }
  return rows;
}

// "file.pdf, p. 4 — Heading › Sub" where the store knows the page and heading.
function citationPlace(c) {
  let place = c.document;
  if (c.page != null) place += `, p. ${c.page}`;
  if (c.heading) place += ` — ${c.heading}`;
  return place;
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
  for (const [key, value] of receiptRows(r, veil.budget)) {
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
      const place = document.createElement("span");
      place.className = "citation-place";
      place.textContent = citationPlace(c);
      li.append(place);
      if (c.text == null) { cites.append(li); continue; } // a guest's: the title only
      const kept = c.included === "cut" ? ", not in the prompt: over the context budget"
        : c.included === "dropped" ? ", not in the prompt: far less relevant than the best passage"
        : c.included === "partial" ? `, first ${c.included_chars} characters in the prompt` : "";
      li.append(` (passage ${c.chunk_index + 1}, score ${c.score.toFixed(2)}${kept}) `);
      const q = document.createElement("mark");
      q.className = "citation-passage";
      q.textContent = c.text.length > 300 ? c.text.slice(0, 300) + "…" : c.text;
      li.append(q);
      cites.append(li);
    }
    div.append(cites);
  } else if (veil.budget && veil.budget.excluded && veil.budget.excluded.length) {
    const note = document.createElement("div");
    note.className = "hint";
    note.textContent = `${plural(veil.budget.excluded.length, "document")} left out: lifetime budget spent.`;
    div.append(note);
  }
}

async function ask(event) {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || state.busy || state.loadingModel) return;
  if (!validate()) return;
  state.busy = true;
  updateSend();
  try {
    if (!state.conversation) {
      const title = text.length > 60 ? text.slice(0, 57) + "…" : text;
      const conv = await api("/v1/conversations", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ title, settings: currentSettings() }),
      });
      state.conversation = conv.id;
      localStorage.setItem("veil-conversation", conv.id);
      $("chat-title").textContent = conv.title;
    }
  } catch (err) {
    $("settings-state").textContent = "Not sent: " + err.message;
    state.busy = false; updateSend();
    return;
  }
  $("prompt").value = "";
  addMessage("user", text);
  const div = addMessage("assistant", "");
  const body = {
    conversation_id: state.conversation,
    messages: [{ role: "user", content: text }], stream: true,
    max_tokens: Number($("max-tokens").value),
    defense: $("defense").value, defense_params: knobValues(),
  };
  if ($("model").value) body.model = $("model").value;
  if (body.collection !== null) {
    // Always sent: the page shows the API's defaults, and asks for exactly what it shows.
    body.retrieval_mode = $("retrieval-mode").value;
    body.retrieval_min_score = Number($("min-score").value);
  }
  // The API's rule, written out: a named collection that does not exist yet is left out
  // (the companion's default applies), unticked means no retrieval at all.
  if (!$("use-rag").checked) body.collection = null;
  else if (state.collections.has($("collection").value)) body.collection = $("collection").value;
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
  } catch (err) {
    div.className = "msg error";
    div.textContent = (answer ? answer + "\n\n" : "") + "Error: " + err.message;
  } finally {
    state.busy = false;
    updateSend();
    refreshConversations();
  }
}

// ------------------------------------------------------------------ wiring

$("save-token").onclick = async () => {
  state.token = $("token").value.trim();
  localStorage.setItem("veil-token", state.token);
  if (await checkToken()) await start();
};
$("defense").onchange = () => { renderKnobs(); saveSettings(); };
$("knobs").addEventListener("change", () => { validate(); saveSettings(); });
$("max-tokens").onchange = () => { validate(); saveSettings(); };
$("use-rag").onchange = saveSettings;
$("retrieval-mode").onchange = saveSettings;
$("min-score").onchange = () => { validate(); saveSettings(); };
$("collection").onchange = async () => { await refreshDocuments(); await saveSettings(); };
$("model").onchange = chooseModel;
$("upload").onclick = upload;
$("ask").onsubmit = ask;
$("new-conversation").onclick = newConversation;
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("ask").requestSubmit(); }
});
$("token").value = state.token;

async function start() {
  await refreshCollections();
  await refreshConversations();
  if (state.conversation) await openConversation(state.conversation);
}

explainToken();
checkToken().then((ok) => ok && start());
