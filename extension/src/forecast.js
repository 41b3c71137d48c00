// The popup's per-word forecast: the text as typed, cut into runs of plain
// text and words marked "likely hidden" / "likely restored" (from the core's
// py_core.preview, calibrated by `veil eval krr`) or "replaced by RootGuard".

import { el } from "./page-api.js";

export const KIND = Object.freeze({ HIDDEN: "hidden", RESTORED: "restored", ROOTGUARD: "rootguard" });

function kindOf(word) {
  if (word.rootguard) return KIND.ROOTGUARD;
  if (word.label === "likely hidden") return KIND.HIDDEN;
  if (word.label === "likely restored") return KIND.RESTORED;
  throw new Error(`unknown forecast label ${JSON.stringify(word.label)}`);
}

function pct(x) {
  return `${(100 * x).toFixed(x < 0.01 ? 1 : 0)}%`;
}

/** The hover text of one word: the forecast and what it rests on. */
export function wordTitle(word) {
  if (word.rootguard) return "Sent as your cached noisy value (RootGuard), not as typed";
  if (word.intact) return "Sent unchanged in this draw (the preview shows the draw that is sent): readable as typed";
  const zipf = word.zipf === null || word.zipf === undefined ? "not in the word list (rare)" : `word frequency ${word.zipf.toFixed(1)} (Zipf)`;
  return `${word.label}: restored with probability ≈ ${pct(word.probability)}; arrives unchanged ${pct(word.survival_probability)} (p^${word.end - word.start}); ${zipf}`;
}

/**
 * Runs covering `text` exactly once, in order: {text} for what lies between
 * words, {text, kind, title, probability} for each word. Words must be sorted,
 * non-overlapping and inside the text (the core's contract); anything else is
 * an error, never a silently wrong picture.
 */
export function forecastSegments(text, words) {
  const out = [];
  let at = 0;
  for (const word of words) {
    if (!Number.isInteger(word.start) || !Number.isInteger(word.end) || word.start < at || word.end <= word.start || word.end > text.length) {
      throw new Error(`forecast word out of place: [${word.start}, ${word.end}) after ${at} in ${text.length} characters`);
    }
    if (word.start > at) out.push({ text: text.slice(at, word.start) });
    out.push({ text: text.slice(word.start, word.end), kind: kindOf(word), title: wordTitle(word), probability: word.probability, intact: Boolean(word.intact) });
    at = word.end;
  }
  if (at < text.length) out.push({ text: text.slice(at) });
  return out;
}

/** Counts per kind, for the one-line summary above the words. */
export function forecastCounts(words) {
  const counts = { [KIND.HIDDEN]: 0, [KIND.RESTORED]: 0, [KIND.ROOTGUARD]: 0 };
  for (const word of words) counts[kindOf(word)] += 1;
  return counts;
}

/**
 * Draw the forecast into a page (the popup and the side panel share it):
 * `parts` = {box, legend, caveat, legendRootguard}; null `words` shows `why`
 * instead; `lead` starts the one-line summary ("Your draft").
 */
export function renderForecast(parts, text, words, why, lead) {
  const { box, legend, caveat, legendRootguard } = parts;
  box.dataset.state = words ? "ready" : "none";
  legend.hidden = !words;
  caveat.hidden = !words;
  if (!words) {
    box.replaceChildren(why);
    return;
  }
  const counts = forecastCounts(words);
  legendRootguard.hidden = counts.rootguard === 0;
  const summary = el(
    "span",
    { class: "label", id: "forecast-summary" },
    `${lead}: ${counts.hidden} likely hidden, ${counts.restored} likely restored` + (counts.rootguard ? `, ${counts.rootguard} replaced by RootGuard` : ""),
  );
  const runs = forecastSegments(text, words).map((run) =>
    run.kind ? el("span", { class: `word ${run.kind}-word`, "data-kind": run.kind, "data-p": run.probability.toFixed(3), "data-intact": String(run.intact), title: run.title }, run.text) : run.text,
  );
  box.replaceChildren(summary, ...runs);
}
