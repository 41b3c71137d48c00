// The reply in the person's words as DOM nodes, for Veil's own pages only (the
// side panel and the options page's history): restore.js's segments, each
// restored word, close match and RootGuard value marked with what was sent.

import { el } from "./page-api.js";

/**
 * @param {Array<{kind: string, text: string, original?: string, sent?: string}>} segments
 * @returns {Node[]}
 */
export function replyNodes(segments) {
  return segments.map((s) => {
    if (s.kind === "plain") return document.createTextNode(s.text);
    const title =
      s.kind === "word" ? `sent as “${s.sent}”` : s.kind === "close" ? `the reply has “${s.sent}”, close to what Veil sent for your word` : `sent as ${s.sent}; your value is ${s.original}`;
    return el("mark", { class: s.kind === "word" ? "restored" : s.kind, title }, s.text);
  });
}

/** "3 words restored, 1 close, 2 values" for a restore-reply answer. @param {{words: number, close: number, values: number}} r */
export function replySummary(r) {
  const what = [`${r.words} word${r.words === 1 ? "" : "s"} restored`, r.close ? `${r.close} close` : "", r.values ? `${r.values} value${r.values === 1 ? "" : "s"}` : ""];
  return what.filter(Boolean).join(", ");
}
