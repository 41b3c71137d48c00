// The inversion audit page: start a job, follow its server-sent events, colour tokens by loss.
"use strict";

const $ = (id) => document.getElementById(id);
let currentJob = null;
let currentKind = "inversion";
let streamAbort = null;

function apiToken() {
  // The companion's token: from the URL fragment (#token=...), the page's meta tag,
  // or what the chat page stored for this session.
  const hash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (hash) sessionStorage.setItem("veil-token", hash);
  const meta = document.querySelector('meta[name="veil-token"]');
  return hash || (meta && meta.content) || sessionStorage.getItem("veil-token")
    || localStorage.getItem("veil-token") || "";
}

function headers(extra = {}) {
  const token = apiToken();
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

function errorMessage(body, status) {
  const detail = body && (body.detail ?? body.error ?? body);
  if (detail && typeof detail === "object" && detail.message) return detail.message;
  if (typeof detail === "string") return detail;
  return `request failed with HTTP ${status}`;
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

function lossColour(loss) {
  // log10(loss): ≤ -8 green, -5 amber, ≥ -2 red (linear between).
  const x = Math.log10(Math.max(loss, 1e-30));
  const t = Math.min(1, Math.max(0, (x + 8) / 6));
  const ok = [46, 158, 79], mid = [217, 164, 0], bad = [198, 40, 40];
  const [a, b, u] = t < 0.5 ? [ok, mid, t * 2] : [mid, bad, (t - 0.5) * 2];
  const c = a.map((v, i) => Math.round(v + (b[i] - v) * u));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

function visible(token) {
  return token.replace(/\n/g, "↵\n").replace(/\t/g, "⇥");
}

function checkedInFp32(p) {
  return p.candidates_checked - (p.screened ?? 0);
}

function tokenSpan(p) {
  const span = document.createElement("span");
  span.className = "tok" + (p.status !== "proven" ? " flagged" : "");
  span.style.background = lossColour(p.discrete_loss);
  span.textContent = visible(p.token);
  span.title = `#${p.position} ${JSON.stringify(p.token)} — ${p.status}\n` +
    `discrete loss ${p.discrete_loss.toExponential(2)}\nrank ${p.rank ?? "–"}, ` +
    `${p.candidates_checked} candidates examined (${checkedInFp32(p)} in full precision), ` +
    `${p.seconds.toFixed(3)} s`;
  span.dataset.status = p.status;
  return span;
}

function num(x, digits = 3) {
  return x === null || x === undefined ? "–" : Number(x).toPrecision(digits);
}

function renderResult(result, tokenizerText) {
  $("result").hidden = false;
  const tokens = $("tokens");
  tokens.replaceChildren(...result.positions.map(tokenSpan));
  const items = [
    ["recovered text", result.text],
    ["tokens", String(result.positions.length)],
    ["all proven", result.all_proven ? "yes" : `no — flagged positions ${result.flagged_positions.join(", ")}`],
    ["cumulative discrete loss", result.cumulative_discrete_loss.toExponential(3)],
    ["time", `${result.seconds.toFixed(2)} s (${result.seconds_per_token.toFixed(3)} s per token)`],
    ["method", result.method],
  ];
  if (result.exact_match !== null && result.exact_match !== undefined) {
    items.push(["exact match with the input", result.exact_match ? "yes" : "no"]);
    items.push(["token accuracy", (100 * result.token_accuracy).toFixed(1) + " %"]);
  }
  const dl = $("summary");
  dl.replaceChildren();
  for (const [k, v] of items) {
    const dt = document.createElement("dt"); dt.textContent = k;
    const dd = document.createElement("dd"); dd.textContent = v;
    dl.append(dt, dd);
  }
  const body = $("positions").querySelector("tbody");
  body.replaceChildren(...result.positions.map((p) => {
    const tr = document.createElement("tr");
    const cells = [p.position, JSON.stringify(p.token), p.status, p.discrete_loss.toExponential(2),
      p.max_abs.toExponential(2), p.rank ?? "–",
      `${p.candidates_checked} (${checkedInFp32(p)} fp32)`, p.seconds.toFixed(3),
      p.true_token_id === null ? "–" : (p.true_token_id === p.token_id ? "✓" : "✗")];
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.textContent = String(c);
      if (i >= 3 && i <= 7) td.className = "num";
      tr.append(td);
    });
    return tr;
  }));
}

function onEvent(kind, data) {
  const stage = $("stage"), bar = $("progress");
  if (kind === "queued") {
    stage.textContent = data.ahead ? `Queued: ${data.ahead} job(s) ahead…` : "Queued…";
  } else if (kind === "setup") {
    stage.textContent = `One-time setup for this model — ${data.stage}: ${data.done} / ${data.total}`;
    bar.max = data.total; bar.value = data.done;
  } else if (kind === "started") {
    stage.textContent = `Inverting ${data.positions} positions…`;
    bar.max = data.positions; bar.value = 0;
  } else if (kind === "position") {
    stage.textContent = `Position ${data.position + 1} / ${data.total}: ${JSON.stringify(data.token)} ` +
      `(${data.status}, loss ${num(data.discrete_loss, 2)}, ${data.candidates_checked} checked)`;
    bar.max = data.total; bar.value = data.position + 1;
    $("result").hidden = false;
    $("tokens").append(tokenSpan({ ...data, max_abs: 0 }));
  } else if (kind === "done") {
    if (currentKind === "setup") {
      stage.textContent = "Setup done: the fast path is ready for this model.";
      $("setup-box").hidden = true;
    } else {
      stage.textContent = "Done.";
      renderResult(data.result);
    }
    finish();
  } else if (kind === "error") {
    showError(data.message);
    stage.textContent = data.code === "cancelled" ? "Cancelled." : "Failed.";
    finish();
  }
}

async function follow(jobId) {
  // fetch() rather than EventSource so the token can travel in a header.
  streamAbort = new AbortController();
  let lastId = null;
  for (let attempt = 0; attempt < 20; attempt++) {
    try {
      const h = headers({ Accept: "text/event-stream" });
      if (lastId !== null) h["Last-Event-ID"] = String(lastId);
      const res = await fetch(`/v1/audit/inversion/${jobId}/events`, { headers: h, signal: streamAbort.signal });
      if (!res.ok) throw new Error(errorMessage(await res.json().catch(() => null), res.status));
      const finished = await readServerSentEvents(res, (ev) => {
        if (ev.id !== null) lastId = Number(ev.id);
        if (ev.data) onEvent(ev.event, JSON.parse(ev.data));
        return ev.event === "done" || ev.event === "error";
      });
      if (finished) return;
    } catch (err) {
      if (err.name === "AbortError") return;
      showError(`lost the progress stream (${err.message}); retrying…`);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function finish() {
  $("start").disabled = false;
  $("setup").disabled = false;
  $("cancel").disabled = true;
  currentJob = null;
  refreshJobs();
}

async function attach(job) {
  // Follow a job that is already queued or running (after reopening the page).
  if (streamAbort) streamAbort.abort();
  showError("");
  currentJob = job.id;
  currentKind = job.kind || "inversion";
  $("start").disabled = true;
  $("setup").disabled = true;
  $("cancel").disabled = false;
  $("progress-box").hidden = false;
  $("stage").textContent = job.status === "queued" ? "Queued…" : "Reattaching…";
  if (currentKind !== "setup") { $("result").hidden = true; $("tokens").replaceChildren(); }
  await follow(job.id);
}

function progressText(job) {
  const p = job.progress;
  if (!p) return job.status === "queued" ? "waiting" : "–";
  if (p.kind === "setup") return `${p.stage}: ${p.done} / ${p.total}`;
  if (p.kind === "position") return `position ${p.position + 1}`;
  return `${p.positions} positions`;
}

async function refreshJobs() {
  let body;
  try {
    const res = await fetch("/v1/audit/inversion", { headers: headers() });
    if (!res.ok) return;
    body = await res.json();
  } catch (err) {
    return;
  }
  const active = body.jobs.filter((j) => j.status === "running" || j.status === "queued");
  $("jobs-box").hidden = active.length === 0;
  $("jobs").querySelector("tbody").replaceChildren(...active.map((job) => {
    const tr = document.createElement("tr");
    for (const text of [job.id, job.kind === "setup" ? "setup" : job.method, job.status, progressText(job)]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    const td = document.createElement("td");
    const followButton = document.createElement("button");
    followButton.type = "button";
    followButton.textContent = "Follow";
    followButton.disabled = job.id === currentJob;
    followButton.addEventListener("click", () => attach(job));
    const cancelButton = document.createElement("button");
    cancelButton.type = "button";
    cancelButton.textContent = "Cancel";
    cancelButton.addEventListener("click", () => cancelJob(job.id));
    td.append(followButton, cancelButton);
    tr.append(td);
    return tr;
  }));
}

async function checkSetup() {
  // Does the chosen model need its one-time setup? Offer it (or reattach to it).
  const params = new URLSearchParams({ layer: String(chosenLayer()), source: $("states").value });
  const model = $("model").value.trim();
  if (model) params.set("model", model);
  try {
    const res = await fetch(`/v1/audit/setup?${params}`, { headers: headers() });
    if (!res.ok) return;
    const status = await res.json();
    $("setup-box").hidden = status.ready;
    if (!status.ready && status.estimate) {
      const minutes = Math.max(1, Math.round(status.estimate.total_s / 60));
      const where = describeWhere(status);
      $("setup-text").textContent = `The fast path needs a one-time setup for this model at ${where}: `
        + `about ${minutes} minute${minutes === 1 ? "" : "s"} on this machine (measured just now). `
        + "It resumes where it stopped if cancelled.";
    }
    if (status.job && !currentJob) attach(status.job);
  } catch (err) {
    // the page still works; a job request would say what is missing
  }
}

function describeWhere(r) {
  // "the last layer", "block 6", "block 6's cached keys"
  if (r.source && r.source !== "hidden") {
    return `${r.layer === -1 ? "the last block" : `block ${r.layer}`}'s cached ${r.source}`;
  }
  return r.layer === -1 ? "the last layer" : `block ${r.layer}`;
}

function chosenLayer() {
  const value = Number($("layer").value);
  return Number.isInteger(value) && value >= -1 ? value : -1;
}

async function loadModels() {
  // The models the auditor can read, with the layers already set up (GET /v1/audit/models).
  try {
    const res = await fetch("/v1/audit/models", { headers: headers() });
    if (!res.ok) return;
    const body = await res.json();
    $("models-list").replaceChildren(...body.data.map((m) => {
      const option = document.createElement("option");
      option.value = m.id;
      const ready = m.ready.map(describeWhere).join(", ");
      option.label = ready ? `${m.id} — ready: ${ready}` : `${m.id} — not set up`;
      return option;
    }));
  } catch (err) {
    // the field still takes any model spec
  }
}

async function startSetup() {
  showError("");
  const model = $("model").value.trim();
  const setupBody = { layer: chosenLayer(), source: $("states").value };
  if (model) setupBody.model = model;
  const res = await fetch("/v1/audit/setup", {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(setupBody),
  });
  const body = await res.json().catch(() => null);
  if (!res.ok) { showError(errorMessage(body, res.status)); return; }
  await attach({ id: body.id, kind: "setup", status: body.status });
}

async function start(event) {
  event.preventDefault();
  showError("");
  $("result").hidden = true;
  $("tokens").replaceChildren();
  const source = document.querySelector('input[name="source"]:checked').value;
  const options = {
    method: $("method").value, sigma: Number($("sigma").value || 0), layer: chosenLayer(), source: $("states").value,
  };
  for (const id of ["model", "key"]) if ($(id).value.trim()) options[id] = $(id).value.trim();
  for (const id of ["tolerance", "max_candidates", "steps", "candidates", "learning_rate"]) {
    if ($(id).value !== "" && (options.method === "gradient" || !["steps", "candidates", "learning_rate"].includes(id))) {
      options[id] = Number($(id).value);
    }
  }
  let init;
  if (source === "text") {
    const text = $("text").value;
    if (!text.trim()) { showError("Type or paste the text to audit."); return; }
    init = { method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify({ ...options, text }) };
  } else {
    const file = $("file").files[0];
    if (!file) { showError("Choose a hidden-state file (.pt, .npy or .safetensors)."); return; }
    const form = new FormData();
    form.append("file", file);
    for (const [k, v] of Object.entries(options)) form.append(k, String(v));
    init = { method: "POST", headers: headers(), body: form };
  }
  $("start").disabled = true;
  $("progress-box").hidden = false;
  $("stage").textContent = "Starting…";
  try {
    const res = await fetch("/v1/audit/inversion", init);
    const body = await res.json().catch(() => null);
    if (!res.ok) {
      if (body && body.error && body.error.code === "setup_required") $("setup-box").hidden = false;
      const retry = res.headers.get("Retry-After");
      throw new Error(errorMessage(body, res.status) + (retry ? ` (retry in ${retry} s)` : ""));
    }
    currentJob = body.id;
    currentKind = "inversion";
    $("cancel").disabled = false;
    refreshJobs();
    await follow(body.id);
  } catch (err) {
    showError(err.message);
    finish();
  }
}

async function cancelJob(jobId) {
  await fetch(`/v1/audit/inversion/${jobId}`, { method: "DELETE", headers: headers() });
  refreshJobs();
}

async function cancel() {
  if (currentJob) await cancelJob(currentJob);
}

document.addEventListener("DOMContentLoaded", () => {
  apiToken();
  $("audit-form").addEventListener("submit", start);
  $("cancel").addEventListener("click", cancel);
  $("setup").addEventListener("click", startSetup);
  $("model").addEventListener("change", checkSetup);
  $("layer").addEventListener("change", checkSetup);
  $("states").addEventListener("change", checkSetup);
  loadModels();
  checkSetup();
  refreshJobs();
  setInterval(refreshJobs, 3000);
  $("method").addEventListener("change", () => {
    $("audit-form").classList.toggle("gradient", $("method").value === "gradient");
  });
});
