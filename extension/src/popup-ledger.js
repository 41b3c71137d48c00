// The popup's lifetime line: what this site (and all sites) have received from
// the person, counted once per distinct word (the word memo), with its ε.

import { Msg } from "./messages.js";
import { send } from "./page-api.js";

// Above this a lifetime ε is said in words not to protect the history as a whole.
const MEANINGFUL_EPSILON = 10;
const fixed = (x) => (x === null || x === undefined ? "—" : Number(x).toFixed(1));
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** Fill `box` with the ledger of `siteId`; a failure says so in the box. */
export async function showLifetime(box, siteId) {
  try {
    const { total, site } = await send(Msg.LEDGER_STATE, { siteId });
    box.dataset.words = String(site.words);
    box.textContent =
      `Sent to this site so far: ${plural(site.words, "distinct word")} (${plural(site.chars, "character")}), ` +
      `ε ${fixed(site.epsilon_composed)} tight (${fixed(site.epsilon_basic)} basic, δ ${site.delta}); ` +
      `all sites: ${plural(total.words, "word")}, ε ${fixed(total.epsilon_composed)} tight. ` +
      (site.epsilon_composed > MEANINGFUL_EPSILON
        ? "This ε covers everything you ever sent here taken together: far too large to protect all of it as one; " +
          "what protects each word is its own ε (its length × ε per character). "
        : "") +
      "A word you send again goes out as the same draw, so repeating it adds nothing; " +
      "the site can see that the same word came twice.";
  } catch (err) {
    box.textContent = `(no lifetime ledger: ${err.message})`;
  }
}
