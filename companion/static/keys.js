// Veil companion chat page: the owner's guest keys (create, list, revoke).
// Uses chat.js's $, api(), knobValues() and checkToken(); loaded after it.
"use strict";

function describeKey(key) {
  const budget = key.budget === null ? "no cap" : `ε ${key.spent.toFixed(2)} of ${key.budget}`;
  const label = key.label ? key.label + ": " : "";
  return `#${key.id} ${label}${key.collection}, ${key.defense}, ${budget} (${key.status})`;
}

async function refreshKeys() {
  const list = $("key-list");
  list.textContent = "";
  let keys;
  try {
    keys = (await api("/v1/keys")).data;
  } catch (err) {
    $("key-state").textContent = err.message;
    return;
  }
  for (const key of keys) {
    const li = document.createElement("li");
    li.className = key.status;
    li.dataset.keyId = key.id;
    li.append(describeKey(key));
    if (key.status === "active") {
      const revoke = document.createElement("button");
      revoke.textContent = "Revoke"; revoke.title = "Revoke key #" + key.id;
      revoke.onclick = async () => {
        if (!confirm(`Revoke guest key #${key.id}? Requests with it are refused at once.`)) return;
        await api("/v1/keys/" + key.id, { method: "DELETE" });
        await refreshKeys();
      };
      li.append(revoke);
    }
    list.append(li);
  }
}

async function createKey() {
  const body = {
    collection: $("collection").value || "default",
    defense: $("defense").value,
    defense_params: knobValues(),
    allow_titles: $("key-titles").checked,
    label: $("key-label").value.trim(),
  };
  const budget = $("key-budget").value.trim();
  if (budget !== "") body.budget = Number(budget);
  const expires = $("key-expires").value.trim();
  if (expires !== "") body.expires = expires;
  $("key-state").textContent = "Creating…";
  $("key-new").hidden = true;
  try {
    const created = await api("/v1/keys", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    $("key-value").textContent = created.key;
    $("key-new").hidden = false;
    $("key-state").textContent = `Key #${created.guest_key.id} created: copy it now, it is not shown again.`;
    $("key-label").value = "";
    await refreshKeys();
  } catch (err) {
    $("key-state").textContent = "Not created: " + err.message;
  }
}

$("key-create").onclick = createKey;
$("key-copy").onclick = () => navigator.clipboard.writeText($("key-value").textContent);
// chat.js's own handler (registered first) has stored the new token by now.
// A guest key has no guest keys to list (the page is chat only then).
$("save-token").addEventListener("click", () => { if (!state.guest) refreshKeys(); });
if (state.token && !state.token.startsWith(GUEST_PREFIX)) refreshKeys();
