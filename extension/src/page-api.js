// Helpers shared by the popup and the options page.

import { ext } from "./chrome-api.js";
import { message, Target } from "./messages.js";

export async function send(type, data = {}) {
  const reply = await ext.runtime.send(message(type, Target.BACKGROUND, data));
  if (!reply) throw new Error("Veil's service worker did not answer");
  if (!reply.ok) throw new Error(reply.error?.message || "request failed");
  return reply.data;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function percent(x, digits = 0) {
  return `${(100 * x).toFixed(digits)}%`;
}

export function coreStatusText(status) {
  if (!status || status.state === "unknown") return "Privacy core: not started yet";
  if (status.state === "booting") {
    const since = Number.isFinite(status.documentStartedAt) ? ` ${((Date.now() - status.documentStartedAt) / 1000).toFixed(1)} s` : "";
    return status.step ? `Privacy core: starting… ${status.step}${since}` : "Privacy core: starting…";
  }
  if (status.state === "error") return `Privacy core failed: ${status.error}`;
  const how = status.fromSnapshot ? "from its snapshot" : "cold start";
  return `Privacy core ready (${((status.msSinceDocument ?? status.ms) / 1000).toFixed(2)} s, ${how})`;
}

/** Debounce `fn` by `ms`. */
export function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
