// A prompt written in Veil's side panel (sw/compose.js): the page gets only
// the protected text, sent through the site's own path.

import { ext } from "../chrome-api.js";
import { readText, sameText, writeText } from "../editors.js";
import { message, Msg, Target } from "../messages.js";
import { editorInfo, isOurs } from "./drafts.js";
import { approve } from "./guard-link.js";
import { notify } from "./notice.js";
import { sendThroughSite, textLeaves } from "./replay.js";
import { latestReply } from "./reply.js";
import { watchReply } from "./reply-watch.js";
import { adapter, intercepting, state, written } from "./state.js";

/**
 * The side panel's send: `text` is already protected -- the original never
 * reaches this page -- and `token` is the worker's one-time permission for
 * exactly that text in this tab. Write it into the site's editor, redeem the
 * token with what the editor then holds, and send it through the site's own
 * path without protecting it again. Anything else (text the person typed
 * here, text the page changed) gets no exemption: the token is spent and
 * nothing is sent.
 * @param {{text?: unknown, token?: unknown, historyId?: unknown}} data
 * @returns {Promise<{sent: boolean, notice: string}>}
 */
export async function composeInsert({ text, token, historyId }) {
  const refuse = (/** @type {string} */ notice) => ({ sent: false, notice });
  if (typeof text !== "string" || !text.trim() || typeof token !== "string") return refuse("Veil's panel sent nothing to write. Nothing was sent.");
  if (!adapter() || !intercepting()) return refuse("Veil's protection is off on this page, so the panel wrote nothing into it. Nothing was sent.");
  if (state.busy) return refuse("Veil is still protecting another send on this page; nothing was written. Send again in a moment.");
  const { editor } = editorInfo();
  if (!editor) return refuse("Veil found no chat box on this page, so it wrote nothing. Nothing was sent.");
  const before = readText(editor);
  if (before.trim() && !isOurs(editor, before)) {
    return refuse("The site's chat box holds text typed there; send or clear it first. Veil wrote nothing into the page.");
  }
  state.busy = true;
  try {
    approve(text, null); // the network guard lets the protected text through
    const wrote = await writeText(editor, text);
    if (!wrote) {
      await writeText(editor, "");
      return refuse("Veil could not write the protected text into this chat box. Nothing was sent.");
    }
    written.set(editor, readText(editor)); // Veil's own text: a later send does not protect it again
    const holding = readText(editor);
    /** @type {any} */
    let redeemed;
    try {
      redeemed = await ext.runtime.send(message(Msg.COMPOSE_REDEEM, Target.BACKGROUND, { token, text: holding }));
    } catch (err) {
      redeemed = { ok: false, error: { message: `Veil's service worker did not answer (${/** @type {any} */ (err)?.message || err})` } };
    }
    // The page may have changed the box while the worker answered: only the text redeemed goes.
    if (!redeemed?.ok || !sameText(readText(editor), holding, { loose: true })) {
      written.delete(editor);
      await writeText(editor, "");
      const why = redeemed?.ok ? "the chat box changed before the send" : redeemed?.error?.message || "the token was refused";
      notify(`Veil did not send the panel's prompt: ${why}. Nothing was sent.`, "blocked");
      return refuse(`Veil did not send: ${why}. Nothing was sent.`);
    }
    const replyBefore = latestReply();
    const how = sendThroughSite(editor);
    if (how && (await textLeaves(editor, holding))) {
      const notice = "Veil sent the prompt you wrote in its panel: this page saw only the protected text.";
      notify(notice, "protected");
      if (typeof historyId === "string") watchReply(historyId, replyBefore);
      return { sent: true, notice };
    }
    const notice = "Veil wrote the protected text into the chat box, but the site did not send it: press its send button (the text is already protected).";
    notify(notice, "protected");
    return refuse(notice);
  } finally {
    state.busy = false;
  }
}
