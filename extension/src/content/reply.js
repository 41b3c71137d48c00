// The site's latest reply, read for Veil's side panel (which restores it in
// the person's words there: nothing is written into the page). Chat pages mark
// their model's messages in a few common ways; the last one on the page is the
// latest reply.

const REPLY = [
  "[data-message-author-role='assistant']",
  "[data-role='assistant']",
  "[data-author='assistant']",
  "[data-testid*='assistant-message']",
  "model-response",
  ".assistant-message",
  ".cs-message--incoming .cs-message__content",
].join(", ");

/** The latest reply on the page: its text, how many replies there are, and which it is. */
export function latestReply() {
  const all = [...document.querySelectorAll(REPLY)].filter((el) => !el.parentElement?.closest(REPLY));
  const last = /** @type {HTMLElement | undefined} */ (all[all.length - 1]);
  return { text: last ? last.innerText.trim() : "", count: all.length, index: all.length };
}
