// Veil companion chat page: "Preview as a guest" -- the question in the box (or the last
// one asked), sent as one of the owner's guest keys would send it, with the header
// X-Veil-Preview-Guest: the answer is exactly what that key would receive (its collection,
// its defense, a guest's view), marked as a preview; nothing is charged, neither the key
// nor any document's lifetime budget, and nothing is kept in the conversation.
// Uses chat.js's $, api(), headers(), state, plural(), setAnswer(), renderReceipt(),
// updateSend() and readChatStream() (sse.js); loaded after chat.js and keys.js.
"use strict";

const preview = { keys: [], timer: null };

function keyName(key) {
  return key.label ? `${key.label} (key #${key.id})` : `guest key #${key.id}`;
}

async function refreshPreviewKeys() {
  if (!state.token || state.token.startsWith(GUEST_PREFIX)) return;
  try {
    preview.keys = (await api("/v1/keys")).data.filter((k) => k.status === "active");
  } catch (_) {
    preview.keys = [];
  }
  const select = $("preview-key");
  const current = select.value;
  select.textContent = "";
  for (const key of preview.keys) {
    const text = `${keyName(key)}: ${key.collection}, ${key.defense}`;
    select.append(new Option(text, String(key.id), false, String(key.id) === current));
  }
  const none = preview.keys.length === 0;
  select.hidden = none;
  $("preview-send").disabled = none;
  $("preview-hint").textContent = none
    ? "Preview as a guest: create a guest key in ⚙ Settings to see what it would receive."
    : "Preview as a guest: what this key would receive for the question in the box (asked " +
      "alone, as a new guest conversation); nothing is charged or kept.";
}

async function previewAsGuest() {
  const key = preview.keys.find((k) => String(k.id) === $("preview-key").value);
  const text = $("prompt").value.trim() || state.lastQuestion || "";
  if (!key || !text || state.busy || state.loadingModel) return;
  state.busy = true;
  updateSend();
  const name = keyName(key);
  const question = document.createElement("div");
  question.className = "msg user preview";
  question.textContent = text;
  const div = document.createElement("div");
  div.className = "msg assistant preview";
  div.dataset.keyId = key.id;
  const banner = document.createElement("div");
  banner.className = "preview-banner";
  banner.textContent = `Preview — what ${name} would receive; nothing was charged.`;
  $("messages").append(question, div);
  setAnswer(div, "");
  div.prepend(banner);
  $("messages").scrollTop = $("messages").scrollHeight;
  const body = { messages: [{ role: "user", content: text }], stream: true };
  const tokens = Number($("max-tokens").value);
  if (Number.isInteger(tokens) && tokens > 0) body.max_tokens = tokens;
  state.abort = new AbortController();
  updateSend();
  let answer = "";
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", "X-Veil-Preview-Guest": String(key.id) }),
      body: JSON.stringify(body), signal: state.abort.signal,
    });
    await readChatStream(response, (event, delta) => {
      if (delta) { answer += delta; setAnswer(div, answer); }
      if (event.veil) {
        if (!event.veil.preview) throw new Error("the companion did not mark this answer as a preview");
        renderReceipt(div, event.veil, key.collection);
        const said = document.createElement("div");
        said.className = "preview-note";
        said.textContent = event.veil.preview;
        div.append(said);
      }
    });
  } catch (err) {
    const note = document.createElement("div");
    note.className = "preview-error";
    note.textContent = err.name === "AbortError" ? "Stopped." : "Preview failed: " + err.message;
    div.append(note);
  } finally {
    state.busy = false;
    state.abort = null;
    updateSend();
  }
}

(function addPreviewControls() {
  const bar = document.createElement("div");
  bar.id = "preview-bar";
  bar.className = "owner-only";
  const hint = document.createElement("span");
  hint.id = "preview-hint";
  hint.className = "hint";
  const select = document.createElement("select");
  select.id = "preview-key";
  select.setAttribute("aria-label", "guest key to preview");
  const send = document.createElement("button");
  send.id = "preview-send"; send.type = "button"; send.textContent = "Preview as a guest";
  send.title = "Send the question as this guest key would, and see what it would receive (nothing is charged)";
  send.onclick = previewAsGuest;
  bar.append(hint, select, send);
  $("ask").after(bar);
  // keys.js rebuilds its list after every create and revoke: the choice follows.
  new MutationObserver(() => {
    clearTimeout(preview.timer);
    preview.timer = setTimeout(refreshPreviewKeys, 50);
  }).observe($("key-list"), { childList: true });
  $("save-token").addEventListener("click", () => setTimeout(refreshPreviewKeys, 0));
  refreshPreviewKeys();
})();
