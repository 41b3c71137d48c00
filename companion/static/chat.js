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
  abort: null, // the running answer's AbortController (Stop)
  guest: false, // the token is a guest key (companion.keys.KEY_PREFIX): chat only
  history: [], // a guest's conversation, kept in the page (guests have no stored ones)
  lastQuestion: null,
};
const GUEST_PREFIX = "veil_guest_";

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
  state.guest = state.token.startsWith(GUEST_PREFIX);
  document.body.classList.toggle("guest", state.guest);
  if (state.guest) return checkGuest();
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

// A guest key may chat (and list models and defenses) only: the page shows just that.
async function checkGuest() {
  try {
    const models = await api("/v1/models");
    state.models = models.data;
    $("token-state").textContent = "Connected with a guest key.";
    $("guest-state").textContent = "You chat with a guest key: over the collection and with the " +
      "defense its owner chose for it. Its collection and remaining budget show after the first answer.";
    $("prompt").placeholder = "Ask about the owner's shared documents… (Enter to send)";
    return true;
  } catch (err) {
    $("token-state").textContent = err.message;
    $("guest-state").textContent = err.message;
    return false;
  }
}

function showGuest(info, receipt) {
  if (!info) return;
  const budget = info.budget == null ? "no budget cap"
    : `ε ${Number(info.remaining).toFixed(2)} of ${info.budget} left`;
  const defense = receipt && (receipt.label || receipt.mechanism);
  $("guest-state").textContent = `Guest key #${info.key_id}: collection ${info.collection}` +
    (defense ? `, defense ${defense}` : "") + `, ${budget}.`;
  $("guest-state").dataset.remaining = info.remaining == null ? "" : info.remaining;
}

function applySettings() {
  const s = state.settings;
  $("files").accept = s.upload.extensions.join(",");
  $("files-hint").textContent = `Accepted files: ${s.upload.extensions.join(" ")} (up to ${bytesText(s.upload.max_upload_bytes)} per upload; more files go in several).`;
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
  $("send").hidden = state.abort !== null;
  $("stop").hidden = state.abort === null;
  $("send").disabled = state.busy || state.loadingModel !== null;
  $("send").title = state.loadingModel ? `waiting for ${state.loadingModel} to load` : "";
}

// ------------------------------------------------------------------ documents

async function refreshCollections(select) {
  const collections = await api("/v1/collections");
  state.collections = new Set(collections.map((c) => c.name));
  const fallback = (state.settings && state.settings.default_collection) || "default";
  const wanted = select || $("collection").value || fallback;
  // Only collections that exist are offered: a deleted one is never asked for again.
  const names = [...state.collections].sort();
  const current = names.includes(wanted) ? wanted : names.includes(fallback) ? fallback : names[0];
  $("collection").textContent = "";
  if (!names.length) $("collection").append(new Option("(no documents yet: upload some)", "", false, true));
  for (const name of names) $("collection").append(new Option(name, name, false, name === current));
  if (select && current !== select) {
    $("upload-state").textContent = `The collection ${select} no longer exists` +
      (current ? `; using ${current}.` : ".");
  }
  showContext();
  await refreshDocuments();
}

function showContext() {
  if (state.guest) { $("chat-context").textContent = ""; return; }
  const name = $("collection").value;
  $("chat-context").textContent = !$("use-rag").checked ? "Answers from the conversation alone (no documents)."
    : name ? `Answers from the collection ${name} · defense ${$("defense").value || "…"}`
      : "No documents yet: answers come from the model alone (upload documents in ⚙ Settings).";
}

async function refreshDocuments() {
  const list = $("doc-list");
  list.textContent = "";
  if (!$("collection").value) return;
  const docs = await api("/v1/documents?collection=" + encodeURIComponent($("collection").value));
  for (const doc of docs) {
    const li = document.createElement("li");
    li.textContent = `${doc.name} (${plural(doc.chunks, "chunk")})`;
    li.dataset.docId = doc.id; // budget.js puts the document's budget meter here
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
  const limit = state.settings ? state.settings.upload.max_upload_bytes : Infinity;
  const most = (state.settings && state.settings.upload.max_upload_files) || Infinity;
  const batches = uploadBatches([...files], limit, most);
  const big = [...files].filter((f) => f.size + UPLOAD_OVERHEAD > limit);
  if (big.length) {
    $("upload-state").textContent = `Not uploaded: ${big.map((f) => `${f.name} (${bytesText(f.size)})`).join(", ")} — the companion takes up to ${bytesText(limit)} per upload; split the file or raise max_upload_bytes.`;
    return;
  }
  let added = 0, there = 0, done = 0;
  try {
    for (const [i, batch] of batches.entries()) {
      const form = new FormData();
      for (const file of batch) form.append("files", file);
      form.append("collection", name);
      $("upload-state").textContent = batches.length > 1
        ? `Ingesting… part ${i + 1} of ${batches.length} (${plural(done, "file")} done)`
        : "Ingesting…";
      const result = await api("/v1/documents", { method: "POST", body: form });
      added += result.documents.filter((d) => d.created).length;
      there += result.documents.filter((d) => !d.created).length;
      done += batch.length;
    }
    $("upload-state").textContent = `${plural(added, "file")} added, ${there} already there.`;
    $("files").value = ""; $("new-collection").value = "";
  } catch (err) {
    const kept = done ? ` (${plural(done, "file")} before it were uploaded: ${added} added, ${there} already there)` : "";
    $("upload-state").textContent = "Upload failed: " + err.message + kept;
  }
  if (done) {
    await refreshCollections(name);
    await saveSettings();
  }
}

function bytesText(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)} MB`;
  return `${Math.max(1, Math.round(n / 1e3))} kB`;
}

// What one file adds to a multipart request besides its bytes (headers, boundary), with room.
const UPLOAD_OVERHEAD = 4096;

// The files in requests that each fit the companion's upload limits (bytes, files), in the
// order chosen.
function uploadBatches(files, limit, most) {
  const batches = [];
  let current = [], size = 1024;
  for (const file of files) {
    const cost = file.size + UPLOAD_OVERHEAD;
    if (current.length && (size + cost > limit || current.length >= most)) {
      batches.push(current); current = []; size = 1024;
    }
    current.push(file); size += cost;
  }
  if (current.length) batches.push(current);
  return batches;
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

// The list, or with words in the search box the conversations whose title or messages
// have them all (the companion searches: GET /v1/conversations?q=), each with the words
// where they were said.
async function refreshConversations() {
  const list = $("conversation-list");
  const query = $("conversation-search").value.trim();
  let conversations;
  try {
    conversations = (await api("/v1/conversations" + (query ? "?q=" + encodeURIComponent(query) : ""))).data;
  } catch (err) {
    $("conversation-state").textContent = err.message;
    return;
  }
  if (query !== $("conversation-search").value.trim()) return; // typed on: a newer search runs
  list.textContent = "";
  for (const c of conversations) {
    const li = document.createElement("li");
    li.dataset.id = c.id;
    if (c.id === state.conversation) li.className = "current";
    const open = document.createElement("button");
    open.className = "conversation-open";
    const title = document.createElement("span");
    title.className = "conversation-title";
    title.textContent = c.title;
    const when = document.createElement("time");
    when.dateTime = new Date(c.updated * 1000).toISOString();
    when.textContent = formatWhen(c.updated);
    open.append(title, when);
    if (c.match && c.match.snippet) open.append(snippetOf(c.match));
    open.title = `${c.title} — ${plural(c.messages, "message")}, last ${new Date(c.updated * 1000).toLocaleString()}`;
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
  const n = conversations.length;
  $("conversation-state").textContent = query
    ? (n ? `${plural(n, "conversation")} match.` : "No conversation matches.")
    : (n ? "" : "No conversation yet: ask a question to start one.");
}

// A matched message's words around the match, the matched words marked (U+0002/U+0003
// around them in the companion's snippet; the text itself is never parsed as HTML).
function snippetOf(match) {
  const line = document.createElement("span");
  line.className = "conversation-snippet";
  line.append(match.role === "assistant" ? "Answer: " : "You: ");
  match.snippet.split("\u0002").forEach((part, i) => {
    const [marked, rest] = i === 0 ? ["", part] : part.split("\u0003");
    if (marked) { const m = document.createElement("mark"); m.textContent = marked; line.append(m); }
    if (rest) line.append(rest);
  });
  return line;
}

// "14:05" today, "yesterday", "Mon", then "3 Dec" (and the year when it is not this one).
function formatWhen(seconds) {
  const d = new Date(seconds * 1000);
  const now = new Date();
  const day = (x) => new Date(x.getFullYear(), x.getMonth(), x.getDate()).getTime();
  const days = Math.round((day(now) - day(d)) / 86400000);
  if (days === 0) return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (days === 1) return "yesterday";
  if (days < 7) return d.toLocaleDateString([], { weekday: "short" });
  const year = d.getFullYear() === now.getFullYear() ? undefined : "numeric";
  return d.toLocaleDateString([], { day: "numeric", month: "short", year });
}

let searchTimer = null;
function searchConversations() { // as one types: one search a quarter second after the last key
  clearTimeout(searchTimer);
  searchTimer = setTimeout(refreshConversations, 250);
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

// A conversation created for a question that was then not sent: removed again (it has
// no message), and the page shows a new one.
async function dropUnused(id) {
  if (!id) return;
  try { await api("/v1/conversations/" + id, { method: "DELETE" }); } catch { /* kept: harmless */ }
  const why = $("chat-context").textContent;
  if (state.conversation === id) newConversation();
  $("chat-context").textContent = why;
  await refreshConversations();
}

function newConversation() {
  state.conversation = null;
  state.history = [];
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
    const div = addMessage(m.role, m.content, m.id);
    if (m.role === "assistant") { if (m.veil) renderReceipt(div, m.veil); addActions(div); }
    if (m.role === "user") state.lastQuestion = m.content;
  }
  const s = conv.settings || {};
  if (s.defense && defenses.byName[s.defense]) { $("defense").value = s.defense; renderKnobs(s.defense_params || {}); }
  if (s.max_tokens) $("max-tokens").value = s.max_tokens;
  if (typeof s.use_documents === "boolean") $("use-rag").checked = s.use_documents;
  if (s.retrieval_mode) $("retrieval-mode").value = s.retrieval_mode;
  if (typeof s.retrieval_min_score === "number") $("min-score").value = s.retrieval_min_score;
  await refreshCollections(s.collection || undefined);
  if (s.model && state.models.some((m) => m.id === s.model) && s.model !== $("model").value) {
    $("model").value = s.model;
    chooseModel();
  }
  for (const li of $("conversation-list").children) li.classList.toggle("current", li.dataset.id === conv.id);
}

// ------------------------------------------------------------------ messages

// A message; `id` is its id in the stored conversation (regenerate and edit name it).
function addMessage(role, text, id) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  if (id) div.dataset.id = id;
  if (role === "assistant") setAnswer(div, text);
  else if (role === "user") setQuestion(div, text);
  else div.textContent = text;
  $("messages").append(div);
  $("messages").scrollTop = $("messages").scrollHeight;
  return div;
}

// An answer's text as rendered Markdown (markdown.js escapes it first); the raw text is
// kept for Copy and Regenerate.
function setAnswer(div, text) {
  div.dataset.raw = text;
  div.classList.add("md");
  let body = div.querySelector(":scope > .answer");
  if (!body) { body = document.createElement("div"); body.className = "answer"; div.prepend(body); }
  body.innerHTML = renderMarkdown(text); // escaped first, then only markdown.js's own tags
}

// A question, with Edit: change it and ask again from there (what followed is replaced).
function setQuestion(div, text) {
  div.dataset.raw = text;
  div.textContent = "";
  const body = document.createElement("span");
  body.className = "question";
  body.textContent = text;
  const edit = document.createElement("button");
  edit.type = "button"; edit.className = "edit"; edit.textContent = "✎ Edit";
  edit.title = "Edit the question and ask again from here (the answers after it are replaced)";
  edit.onclick = () => editQuestion(div);
  const bar = document.createElement("div");
  bar.className = "actions";
  bar.append(edit);
  div.append(body, bar);
}

function editQuestion(div) {
  if (state.busy || div.querySelector("textarea")) return;
  const box = document.createElement("textarea");
  box.className = "edit-box"; box.rows = 3; box.value = div.dataset.raw || "";
  const save = document.createElement("button");
  save.type = "button"; save.className = "edit-send"; save.textContent = "Send";
  const cancel = document.createElement("button");
  cancel.type = "button"; cancel.className = "edit-cancel"; cancel.textContent = "Cancel";
  const bar = document.createElement("div");
  bar.className = "actions";
  bar.append(save, cancel);
  div.textContent = "";
  div.append(box, bar);
  box.focus();
  cancel.onclick = () => setQuestion(div, div.dataset.raw || "");
  save.onclick = () => {
    const text = box.value.trim();
    if (text && !state.busy) send(text, { replace: div });
  };
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); save.click(); }
    if (e.key === "Escape") { e.stopPropagation(); cancel.click(); }
  });
}

function addActions(div) {
  const bar = document.createElement("div");
  bar.className = "actions";
  const copy = document.createElement("button");
  copy.type = "button"; copy.className = "copy"; copy.textContent = "Copy";
  copy.title = "Copy the answer's text";
  copy.onclick = async () => {
    try { await navigator.clipboard.writeText(div.dataset.raw || ""); copy.textContent = "Copied"; }
    catch (_) { copy.textContent = "Copy failed"; }
    setTimeout(() => { copy.textContent = "Copy"; }, 1500);
  };
  const again = document.createElement("button");
  again.type = "button"; again.className = "regenerate"; again.textContent = "↻ Regenerate";
  again.title = "Ask the same question again (this answer is replaced)";
  again.onclick = () => regenerate();
  bar.append(copy, again);
  div.append(bar);
  for (const old of $("messages").querySelectorAll(".regenerate")) old.hidden = old !== again;
}

function regenerate() {
  const questions = $("messages").querySelectorAll(".msg.user");
  const last = questions[questions.length - 1];
  if (state.busy || !last) return;
  send(last.dataset.raw || "", { replace: last });
}

// Take `div` and every message after it off the page (regenerate, edit); the id of the
// first of them the companion keeps (what replace_from names), or null.
function removeFrom(div) {
  let stored = null;
  for (let node = div; node;) {
    const next = node.nextElementSibling;
    if (!stored && node.classList.contains("user") && node.dataset.id) stored = Number(node.dataset.id);
    node.remove();
    node = next;
  }
  return stored;
}

// A guest's conversation as the page keeps it: the questions and answers that completed
// or were stopped (marked "kept"), in order.
function pageHistory() {
  return [...$("messages").querySelectorAll(".msg[data-kept]")]
    .map((d) => ({ role: d.classList.contains("user") ? "user" : "assistant", content: d.dataset.raw || "" }));
}

// Which collection and passages the answer used, in one line above its citations.
function renderUsed(div, veil, asked) {
  const line = document.createElement("div");
  line.className = "used";
  const cites = veil.citations || [];
  const collection = (cites.find((c) => c.collection) || {}).collection || (veil.guest && veil.guest.collection) || asked;
  if (veil.guest) line.textContent = `Collection ${veil.guest.collection}: a guest key's answers do not show which passages they used.`;
  else if (!collection) line.textContent = "No documents used: the answer comes from the conversation alone.";
  else if (!cites.length) line.textContent = `Collection ${collection}: no passage was used for this answer.`;
  else line.textContent = `Collection ${collection}: ${plural(cites.length, "passage")} used — ` +
    cites.map((c) => `[${c.n}] ${citationPlace(c)}`).join("; ");
  div.append(line);
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

function renderReceipt(div, veil, asked) {
  renderUsed(div, veil, asked);
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
  if (veil.cache && veil.cache.served_again) { // released before: served again, nothing charged
    const again = document.createElement("div");
    again.className = "receipt-served-again";
    again.textContent = veil.cache.note;
    box.append(again);
  }
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
  await send($("prompt").value.trim(), { fromPrompt: true });
}

// Ask `text`.  With `replace` (a question's div): in place of that question and everything
// after it -- regenerate (the same text) and edit (another).  The companion replaces the
// stored turns (replace_from) only once the new answer is complete.
async function send(text, { fromPrompt = false, replace = null } = {}) {
  if (!text || state.busy || state.loadingModel) return;
  if (!state.guest && !validate()) return;
  state.busy = true;
  updateSend();
  const started = !state.guest && !state.conversation; // this question starts a conversation
  if (!state.guest && !(await ensureConversation(text))) { state.busy = false; updateSend(); return; }
  if (fromPrompt) $("prompt").value = "";
  const replaceFrom = replace ? removeFrom(replace) : null;
  if (replace && state.guest) state.history = pageHistory();
  state.lastQuestion = text;
  const question = addMessage("user", text);
  const div = addMessage("assistant", "");
  const body = state.guest ? guestBody(text) : ownerBody(text);
  if (replaceFrom) body.replace_from = replaceFrom;
  if (replace && state.guest) body.fresh = true; // Regenerate: a new answer, not the one served before
  // budget.js: under a formal defense, show what the answer will charge and ask first
  if (!state.guest && !(await confirmSpend(body, text))) {
    if (started) await dropUnused(state.conversation); // no empty conversation is left behind
    state.busy = false; updateSend(); return;
  }
  const keep = () => { question.dataset.kept = "1"; div.dataset.kept = "1"; }; // a guest's history
  const notKept = () => {
    if (!replaceFrom) return;
    const note = document.createElement("span");
    note.className = "stopped-note";
    note.textContent = "Not saved: the conversation keeps its earlier answer.";
    div.append(note);
  };
  state.abort = new AbortController();
  updateSend();
  let answer = "";
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(body), signal: state.abort.signal,
    });
    await readChatStream(response, (event, delta) => {
      if (delta) { answer += delta; setAnswer(div, answer); }
      if (event.veil) {
        renderReceipt(div, event.veil, body.collection);
        if (state.guest) showGuest(event.veil.guest, event.veil.receipt);
        document.dispatchEvent(new CustomEvent("veil:answer", { detail: { veil: event.veil, div } }));
      }
      if (event.conversation) { // the stored messages' ids: this question, this answer
        const ids = event.conversation.message_ids;
        question.dataset.id = ids[0];
        div.dataset.id = ids[ids.length - 1];
      }
    });
    if (state.guest) { state.history.push({ role: "user", content: text }, { role: "assistant", content: answer }); keep(); }
    addActions(div);
  } catch (err) {
    if (err.name === "AbortError") {
      div.classList.add("stopped");
      const note = document.createElement("span");
      note.className = "stopped-note";
      note.textContent = "Stopped: the companion stopped generating this answer.";
      div.append(note);
      notKept();
      if (state.guest) { state.history.push({ role: "user", content: text }, { role: "assistant", content: answer }); keep(); }
      addActions(div);
    } else {
      div.className = "msg error";
      div.textContent = (answer ? answer + "\n\n" : "") + "Error: " + err.message;
      notKept();
    }
  } finally {
    state.busy = false;
    state.abort = null;
    updateSend();
    if (!state.guest) refreshConversations();
  }
}

function stop() {
  if (state.abort) state.abort.abort(); // the server sees the connection close and cancels
}

// A conversation's title from its first question (the store's rule, title_from): one
// line of at most 60 characters, cut at a word.
function titleFrom(question) {
  const text = question.split(/\s+/).filter(Boolean).join(" ") || "New conversation";
  if (text.length <= 60) return text;
  let cut = text.slice(0, 59);
  if (cut.slice(30).includes(" ")) cut = cut.slice(0, cut.lastIndexOf(" "));
  return cut.replace(/[ ,.;:]+$/, "") + "…";
}

async function ensureConversation(text) {
  if (state.conversation) return true;
  try {
    const title = titleFrom(text);
    const conv = await api("/v1/conversations", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ title, settings: currentSettings() }),
    });
    state.conversation = conv.id;
    localStorage.setItem("veil-conversation", conv.id);
    $("chat-title").textContent = conv.title;
    return true;
  } catch (err) {
    $("settings-state").textContent = "Not sent: " + err.message;
    return false;
  }
}

// A guest sends the whole conversation (no stored ones) and no collection or defense:
// the key's own apply.
function guestBody(text) {
  return {
    messages: [...state.history, { role: "user", content: text }],
    stream: true,
    max_tokens: Number($("max-tokens").value) || undefined,
  };
}

function ownerBody(text) {
  const body = {
    conversation_id: state.conversation,
    messages: [{ role: "user", content: text }], stream: true,
    max_tokens: Number($("max-tokens").value),
    defense: $("defense").value, defense_params: knobValues(),
    retrieval_mode: $("retrieval-mode").value,
    retrieval_min_score: Number($("min-score").value),
  };
  if ($("model").value) body.model = $("model").value;
  // Unticked: no retrieval at all; a collection is named only when it exists (the page
  // offers no other), else the companion's default applies.
  if (!$("use-rag").checked) body.collection = null;
  else if (state.collections.has($("collection").value)) body.collection = $("collection").value;
  return body;
}

// ------------------------------------------------------------------ wiring

$("save-token").onclick = async () => {
  state.token = $("token").value.trim();
  localStorage.setItem("veil-token", state.token);
  newConversation();
  if (await checkToken()) await start();
};
$("stop").onclick = stop;
$("conversation-search").oninput = searchConversations;
$("guest-new").onclick = newConversation;
function openSettings(open) {
  $("settings").hidden = !open;
  $("open-settings").setAttribute("aria-expanded", String(open));
}
$("open-settings").onclick = () => openSettings($("settings").hidden);
$("close-settings").onclick = () => openSettings(false);
document.addEventListener("keydown", (e) => { if (e.key === "Escape") openSettings(false); });
$("defense").onchange = () => { renderKnobs(); showContext(); saveSettings(); };
$("knobs").addEventListener("change", () => { validate(); saveSettings(); });
$("max-tokens").onchange = () => { validate(); saveSettings(); };
$("use-rag").onchange = () => { showContext(); saveSettings(); };
$("retrieval-mode").onchange = saveSettings;
$("min-score").onchange = () => { validate(); saveSettings(); };
$("collection").onchange = async () => { showContext(); await refreshDocuments(); await saveSettings(); };
$("model").onchange = chooseModel;
$("upload").onclick = upload;
$("ask").onsubmit = ask;
$("new-conversation").onclick = newConversation;
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("ask").requestSubmit(); }
});
$("token").value = state.token;

async function start() {
  if (state.guest) { showContext(); return; }
  await refreshCollections();
  await refreshConversations();
  if (state.conversation) await openConversation(state.conversation);
}

explainToken();
// The settings drawer is open until the page has a working token, closed afterwards.
checkToken().then((ok) => { openSettings(!ok); return ok && start(); });
