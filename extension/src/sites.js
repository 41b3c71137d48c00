// The site adapters, in one table.
//
// Each entry says where a chat site keeps its prompt editor and its send
// button. The editor's kind (textarea, ProseMirror, Quill, Lexical, plain
// contenteditable) is recognised from the element itself by editors.js, so an
// adapter only lists selectors, most specific first. Selectors are tried in
// order; the first visible match wins.

export const SITES = Object.freeze([
  {
    id: "chatgpt",
    name: "ChatGPT",
    hosts: ["chatgpt.com", "chat.openai.com"],
    editor: ["#prompt-textarea", "div.ProseMirror[contenteditable='true']", "textarea"],
    send: ["[data-testid='send-button']", "#composer-submit-button", "button[aria-label*='Send']"],
  },
  {
    id: "claude",
    name: "Claude",
    hosts: ["claude.ai"],
    editor: ["div.ProseMirror[contenteditable='true']", "[contenteditable='true']"],
    send: ["button[aria-label='Send message']", "button[aria-label*='Send']"],
  },
  {
    id: "gemini",
    name: "Gemini",
    hosts: ["gemini.google.com"],
    editor: ["rich-textarea .ql-editor", ".ql-editor[contenteditable='true']"],
    send: ["button.send-button", "button[aria-label='Send message']", "button[aria-label*='Send']"],
  },
  {
    id: "copilot",
    name: "Microsoft Copilot",
    hosts: ["copilot.microsoft.com"],
    editor: ["#userInput", "textarea", "[contenteditable='true']"],
    send: ["button[aria-label='Submit message']", "button[aria-label*='Submit']", "button[type='submit']"],
  },
  {
    id: "perplexity",
    name: "Perplexity",
    hosts: ["www.perplexity.ai", "perplexity.ai"],
    editor: ["#ask-input", "[data-lexical-editor='true']", "textarea"],
    send: ["button[aria-label='Submit']", "button[data-testid='submit-button']"],
  },
  {
    id: "mistral",
    name: "Mistral Le Chat",
    hosts: ["chat.mistral.ai"],
    editor: ["div.ProseMirror[contenteditable='true']", "textarea"],
    send: ["button[aria-label='Send question']", "button[type='submit']"],
  },
  {
    id: "deepseek",
    name: "DeepSeek",
    hosts: ["chat.deepseek.com"],
    editor: ["#chat-input", "textarea"],
    send: ["div[role='button'][aria-disabled='false']", "button[type='submit']"],
  },
  {
    id: "grok",
    name: "Grok",
    hosts: ["grok.com"],
    editor: ["div.ProseMirror[contenteditable='true']", "textarea"],
    send: ["button[aria-label='Submit']", "button[type='submit']"],
  },
  {
    id: "poe",
    name: "Poe",
    hosts: ["poe.com"],
    editor: ["textarea[class*='GrowingTextArea']", "textarea"],
    send: ["button[data-button-send='true']", "button[aria-label='Send message']"],
  },
  {
    id: "huggingchat",
    name: "HuggingChat",
    hosts: ["huggingface.co"],
    pathPrefix: "/chat",
    editor: ["textarea"],
    send: ["button[aria-label='Send message']", "button[type='submit']"],
  },
]);

// Sites the person adds: any editable element and the usual send buttons.
export const GENERIC_ADAPTER = Object.freeze({
  editor: ["textarea", "[contenteditable='true']", "[contenteditable='plaintext-only']"],
  send: [
    "button[type='submit']",
    "button[aria-label*='Send' i]",
    "button[aria-label*='Submit' i]",
    "[data-testid*='send' i]",
  ],
});

/** Match patterns for the built-in sites (used by the manifest and the build). */
export function builtinMatchPatterns() {
  const patterns = [];
  for (const site of SITES) {
    for (const host of site.hosts) {
      patterns.push(`https://${host}/*`);
    }
  }
  return patterns;
}

/** The built-in site for a URL, or null. */
export function siteForUrl(url) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  if (parsed.protocol !== "https:") return null;
  for (const site of SITES) {
    if (!site.hosts.includes(parsed.hostname)) continue;
    if (site.pathPrefix && !parsed.pathname.startsWith(site.pathPrefix)) continue;
    return site;
  }
  return null;
}

/** The id a custom site is stored under: "custom:" + its origin. */
export function customSiteId(origin) {
  return `custom:${origin}`;
}

/** Normalise what a person types as a site to add into an origin, or throw. */
export function parseCustomOrigin(input) {
  const text = String(input ?? "").trim();
  if (!text) throw new Error("Type the address of the site to add, e.g. https://chat.example.com");
  const notAddress = `"${text}" is not a web address; type e.g. https://chat.example.com`;
  const scheme = text.match(/^([a-z][a-z0-9+.-]*):/i);
  if (scheme && !/^https?$/i.test(scheme[1]) && !/^[^/]*:\d+(\/|$)/.test(text)) {
    throw new Error(`Only http and https sites can be protected; got ${scheme[1].toLowerCase()}:`);
  }
  if (/\s/.test(text)) throw new Error(notAddress);
  const withScheme = /^https?:\/\//i.test(text) ? text : `https://${text}`;
  let url;
  try {
    url = new URL(withScheme);
  } catch {
    throw new Error(notAddress);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new Error(`Only http and https sites can be protected; got ${url.protocol}`);
  }
  // A host name: labels of letters, digits and hyphens (IDNs arrive as xn--),
  // with a dot unless it is localhost; or an IP address.
  const host = url.hostname;
  const label = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/i;
  const ip = /^\d{1,3}(\.\d{1,3}){3}$|^\[[0-9a-f:.]+\]$/i;
  if (!ip.test(host) && (host !== "localhost" && !host.includes(".") || !host.split(".").every((l) => label.test(l)))) {
    throw new Error(notAddress);
  }
  return url.origin;
}

/** Can Veil protect a page at this URL at all (Chrome's own pages and extension pages: no)? */
export function protectableUrl(url) {
  try {
    const { protocol } = new URL(url);
    return protocol === "https:" || protocol === "http:";
  } catch {
    return false;
  }
}

/** The match pattern Chrome needs for a custom origin (ports are ignored by match patterns). */
export function originMatchPattern(origin) {
  const url = new URL(origin);
  return `${url.protocol}//${url.hostname}/*`;
}
