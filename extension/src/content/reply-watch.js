// After a protected send: wait for the site's reply to that send and hand its
// text to the worker, which keeps it with the send's history entry, so Veil's
// options page can show it restored in the person's words (restore.js; only
// Veil's pages restore). Nothing is written into the page: this only reads it.

import { ext } from "../chrome-api.js";
import { message, Msg, Target } from "../messages.js";
import { latestReply } from "./reply.js";

let watching = 0; // a newer send ends the watch of an older one (its reply is the newer's)

/**
 * Watch the page for a reply newer than `before` (latestReply() just before the
 * send); each time its text has settled (unchanged for `quietPolls` polls) and
 * differs from what was saved, save it for `historyId`. Ends after `maxMs` or at the next send.
 * @param {string} historyId @param {{text: string, count: number}} before
 */
export async function watchReply(historyId, before, { pollMs = 1000, quietPolls = 2, maxMs = 180000 } = {}) {
  const run = ++watching;
  let last = "";
  let quiet = 0;
  let saved = "";
  for (let waited = 0; waited < maxMs && run === watching; waited += pollMs) {
    await new Promise((resolve) => setTimeout(resolve, pollMs));
    if (run !== watching) return;
    const now = latestReply();
    const fresh = now.text && (now.count > before.count || now.text !== before.text);
    if (!fresh) continue;
    quiet = now.text === last ? quiet + 1 : 0;
    last = now.text;
    if (quiet < quietPolls || now.text === saved) continue;
    try {
      const reply = await ext.runtime.send(message(Msg.SAVE_REPLY, Target.BACKGROUND, { historyId, text: now.text }));
      if (!reply?.ok || !reply.data?.saved) return; // not this page's send any more: stop
      saved = now.text;
    } catch {
      return; // the worker is gone; the options page shows the send without its reply
    }
  }
}
