// After the network guard refused a request: when the person had just sent
// (the site took the text out of the box, or left it there when its request
// failed), protect the prompt and put it back to send again; otherwise say
// what was stopped.

import { editableRoot, readText, sameText, writeText } from "../editors.js";
import { candidateEditors } from "./drafts.js";
import { notify } from "./notice.js";
import { protectInto } from "./protect.js";
import { state } from "./state.js";

/** Enter (keydown) or a click outside the editor: remember when (a send is near). @param {Event} event */
export function noteActivation(event) {
  if (event.type === "keydown") {
    const key = /** @type {KeyboardEvent} */ (event);
    if (key.key === "Enter" && !key.shiftKey && !key.altKey) state.lastActivation = Date.now();
  } else if (!editableRoot(event.composedPath?.()[0] ?? event.target)) {
    state.lastActivation = Date.now(); // a click outside the editor (inside it is editing)
  }
}

/** The guard's "blocked" message (messages.js GUARD_SCHEMA). @param {Record<string, any>} info */
export async function afterGuardBlocked(info) {
  const what = info.api === "form" ? "a form submission" : `a ${info.api} request`;
  const where = info.host ? ` to ${info.host}` : "";
  const why = info.reason === "draft" ? "it carried your prompt unprotected" : `it was ${info.reason}, which Veil cannot check, while your prompt is unprotected`;
  if (state.recovering || state.busy) return;
  const editor = candidateEditors().find((e) => e.isConnected) || null;
  const inBox = editor ? readText(editor) : "";
  const draft = typeof info.draft === "string" ? info.draft : "";
  const stillInBox = inBox.trim() && sameText(inBox, draft, { loose: true });
  const justActivated = Date.now() - state.lastActivation < 3000;
  if (!editor || !draft || (inBox.trim() && !(stillInBox && justActivated))) {
    notify(`Veil stopped ${what}${where}: ${why}. Nothing was sent.${inBox.trim() ? " Your text is still in the box." : ""}`, "blocked");
    return;
  }
  state.recovering = true;
  notify("Veil is protecting this prompt…", "working");
  try {
    const { outcome, notice } = await protectInto(editor, draft);
    if (outcome === "protected") {
      notify(`Veil stopped ${what}${where}: ${why}. It has protected your prompt and put it back in the box: send it again. (${notice})`, "blocked");
    } else if (outcome === "blocked") {
      await writeText(editor, draft);
      notify(`Veil stopped ${what}${where}: ${why}. ${notice}`, "blocked");
    } else {
      await writeText(editor, draft);
      notify(`Veil stopped ${what}${where}: ${why}. ${notice || "Protection is off for this site now"}: send it again to send it as typed.`, "unprotected");
    }
  } finally {
    state.recovering = false;
  }
}
