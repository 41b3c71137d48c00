// Protecting a draft: the worker protects it (the core, RootGuard, the word
// memo), Veil writes the protected text through the editor and approves it
// with the network guard; then the held-back activation is replayed.

import { ext } from "../chrome-api.js";
import { readText, writeText } from "../editors.js";
import { message, Msg, Target } from "../messages.js";
import { approve } from "./guard-link.js";
import { notify } from "./notice.js";
import { resend } from "./replay.js";
import { latestReply } from "./reply.js";
import { watchReply } from "./reply-watch.js";
import { siteSettings, state, written } from "./state.js";

/** @typedef {{outcome: "protected" | "unprotected" | "off" | "blocked", notice: string | null, historyId?: string}} Protected */

/** @param {string} text */
async function askBackground(text) {
  const timeout = (state.settings?.coreTimeoutMs ?? 6000) + 3000;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;
  try {
    return await Promise.race([
      ext.runtime.send(message(Msg.PROTECT, Target.BACKGROUND, { text, url: location.href })),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`Veil's service worker did not answer within ${timeout} ms`)), timeout);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Tell the worker the send of `historyId` did not happen (a failure leaves it counted: the safe side). @param {string} historyId */
async function withdraw(historyId) {
  try {
    await ext.runtime.send(message(Msg.WITHDRAW, Target.BACKGROUND, { historyId }));
  } catch {
    // The worker is gone: the words stay counted as sent, which overstates, never understates.
  }
}

/**
 * Protect `original` and write it into `editor`. Nothing is sent here.
 * @param {Element} editor @param {string} original
 * @returns {Promise<Protected>}
 */
export async function protectInto(editor, original) {
  try {
    const reply = await askBackground(original);
    if (!reply?.ok) throw new Error(reply?.error?.message || "no answer from Veil's service worker");
    const result = reply.data;
    if (result.action === "block") return { outcome: "blocked", notice: result.notice };
    if (result.action === "send" && typeof result.text === "string") {
      approve(result.text, original);
      const ok = await writeText(editor, result.text);
      if (!ok) {
        await writeText(editor, original);
        return { outcome: "blocked", notice: "Veil blocked this send: it could not write the protected text into this editor. Your text is back in the box and saved in Veil's history." };
      }
      const now = readText(editor);
      written.set(editor, now);
      if (now !== result.text) approve(now, original);
      return { outcome: "protected", notice: result.notice, historyId: result.historyId };
    }
    if (result.action === "send-unprotected") {
      approve(original); // the person chose this for the site: the one way an original leaves
      return { outcome: "unprotected", notice: result.notice };
    }
    approve(original); // protection is off for the site
    return { outcome: "off", notice: null };
  } catch (err) {
    const why = /** @type {any} */ (err)?.message || err;
    if (siteSettings()?.failOpen) {
      approve(original);
      return { outcome: "unprotected", notice: `Veil could not protect this prompt (${why}); sent UNPROTECTED as you chose for this site.` };
    }
    return { outcome: "blocked", notice: `Veil blocked this send: ${why}. Your text is still in the box.` };
  }
}

/**
 * Protect the draft, then replay the activation that would have sent it.
 * @param {Element} editor @param {string} original @param {import("./replay.js").Trigger} trigger
 */
export async function protectAndSend(editor, original, trigger) {
  state.busy = true;
  notify("Veil is protecting this prompt…", "working");
  try {
    const { outcome, notice, historyId } = await protectInto(editor, original);
    if (outcome === "blocked") {
      notify(notice ?? "", "blocked");
      return;
    }
    // Said once the replay shows it was a send (an Enter that makes a new line says so itself).
    const replyBefore = latestReply();
    if (!(await resend(trigger, editor, original))) {
      // Nothing left: the history says so and these words stop counting as sent here.
      if (outcome === "protected" && historyId) await withdraw(historyId);
      return;
    }
    if (outcome === "protected") {
      notify(notice ?? "", "protected");
      if (historyId) watchReply(historyId, replyBefore); // kept for the options page's history
    }
    else if (outcome === "unprotected") notify(notice ?? "", "unprotected");
    else notify("Sent as typed: Veil's protection is off for this site.", "off");
  } finally {
    state.busy = false;
    if (trigger.kind === "pointer" && state.gesture === trigger.gesture) state.gesture = null;
  }
}
