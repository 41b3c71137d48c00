// Unit tests of the extension's pure logic (no browser): node --test extension/test/
import assert from "node:assert/strict";
import { test } from "node:test";

import { envelopeError, isExtensionPage, Msg, PRIVILEGED } from "../src/messages.js";
import { DEFAULT_SITE, defaultSettings, effectiveHeader, normalizeSettings, patchSite, validateEpsilon } from "../src/settings.js";
import { builtinMatchPatterns, customSiteId, originMatchPattern, parseCustomOrigin, protectableUrl, siteForUrl, SITES } from "../src/sites.js";

test("every built-in site is found from its URL and nothing else is", () => {
  for (const site of SITES) {
    const path = site.pathPrefix ? `${site.pathPrefix}/abc` : "/c/123";
    assert.equal(siteForUrl(`https://${site.hosts[0]}${path}`)?.id, site.id);
  }
  assert.equal(siteForUrl("https://huggingface.co/models"), null, "HuggingChat only under /chat");
  assert.equal(siteForUrl("http://chatgpt.com/"), null, "plain http is not the real site");
  assert.equal(siteForUrl("https://evil-chatgpt.com/"), null);
  assert.equal(siteForUrl("not a url"), null);
});

test("the table covers the ten sites the issue names, with selectors", () => {
  assert.deepEqual(
    SITES.map((s) => s.id),
    ["chatgpt", "claude", "gemini", "copilot", "perplexity", "mistral", "deepseek", "grok", "poe", "huggingchat"],
  );
  for (const site of SITES) {
    assert.ok(site.editor.length > 0 && site.send.length > 0, site.id);
  }
  assert.ok(builtinMatchPatterns().every((p) => /^https:\/\/[a-z.]+\/\*$/.test(p)));
});

test("custom origins are normalised or refused with a clear message", () => {
  assert.equal(parseCustomOrigin("chat.example.com/path"), "https://chat.example.com");
  assert.equal(parseCustomOrigin("http://localhost:8080/x"), "http://localhost:8080");
  assert.throws(() => parseCustomOrigin(""), /Type the address/);
  assert.throws(() => parseCustomOrigin("ftp://x.org"), /Only http and https/);
  assert.throws(() => parseCustomOrigin("https://"), /not a web address/);
  // What a new user typed: none of these is a site.
  for (const bad of ["not a url", "https://not a url", "https://not%20a%20url", "example", "chat..example.com", "-x.com"]) {
    assert.throws(() => parseCustomOrigin(bad), /not a web address/, bad);
  }
  assert.throws(() => parseCustomOrigin("chrome://newtab"), /Only http and https/);
  assert.throws(() => parseCustomOrigin("chrome-extension://abc/popup.html"), /Only http and https/);
  assert.equal(parseCustomOrigin("localhost:3000"), "https://localhost:3000");
  assert.equal(parseCustomOrigin("bücher.example"), "https://xn--bcher-kva.example");
  assert.equal(protectableUrl("chrome://newtab/"), false);
  assert.equal(protectableUrl("chrome-extension://abc/popup.html"), false);
  assert.equal(protectableUrl("about:blank"), false);
  assert.equal(protectableUrl("https://chat.example.com/c/1"), true);
  assert.equal(originMatchPattern("http://localhost:8080"), "http://localhost/*");
  assert.equal(customSiteId("https://a.b"), "custom:https://a.b");
});

test("settings fill in new sites and fields without touching what is set", () => {
  const stored = { header: "", sites: { chatgpt: { enabled: false, epsilon: 3 } }, custom: { "custom:https://x.y": { origin: "https://x.y" } } };
  const s = normalizeSettings(stored);
  assert.equal(s.header, "");
  assert.deepEqual(s.sites.chatgpt, { ...DEFAULT_SITE, enabled: false, epsilon: 3 });
  assert.deepEqual(s.sites.claude, DEFAULT_SITE);
  assert.deepEqual(s.sites["custom:https://x.y"], DEFAULT_SITE);
  assert.deepEqual(normalizeSettings(undefined), defaultSettings());
});

test("site patches are validated, naming the bad value", () => {
  assert.equal(patchSite(DEFAULT_SITE, { epsilon: 2.5 }).epsilon, 2.5);
  assert.throws(() => patchSite(DEFAULT_SITE, { epsilon: 0.1 }), /from 0.5 to 11; got 0.1/);
  assert.throws(() => patchSite(DEFAULT_SITE, { epsilon: "7" }), /got "7"/);
  assert.throws(() => patchSite(DEFAULT_SITE, { mode: "all" }), /mode must be one of text, numbers, both; got "all"/);
  assert.throws(() => patchSite(DEFAULT_SITE, { enabled: "yes" }), /true or false/);
  assert.throws(() => patchSite(DEFAULT_SITE, { colour: 1 }), /unknown site setting "colour"/);
  assert.throws(() => validateEpsilon(true), /got true/);
  assert.throws(() => validateEpsilon(Number.NaN));
});

test("a site's own header wins over the global one", () => {
  const s = defaultSettings();
  assert.equal(effectiveHeader(s, "chatgpt"), null);
  s.header = "G";
  assert.equal(effectiveHeader(s, "chatgpt"), "G");
  s.sites.chatgpt.header = "";
  assert.equal(effectiveHeader(s, "chatgpt"), "");
});

test("only the extension's own pages may send privileged messages", () => {
  const id = "abc";
  const origin = "chrome-extension://abc/";
  assert.ok(isExtensionPage({ id, url: "chrome-extension://abc/popup.html", origin: "chrome-extension://abc" }, id, origin));
  assert.ok(!isExtensionPage({ id, url: "https://chatgpt.com/", origin: "https://chatgpt.com", tab: { id: 1 } }, id, origin));
  assert.ok(!isExtensionPage({ id: "other", url: "chrome-extension://other/popup.html" }, id, origin));
  assert.ok(!isExtensionPage(undefined, id, origin));
  for (const type of [Msg.SET_SITE, Msg.SET_GLOBAL, Msg.ADD_SITE, Msg.CLEAR_HISTORY, Msg.ROOTGUARD_RESET, Msg.GET_HISTORY]) {
    assert.ok(PRIVILEGED.has(type), type);
  }
  assert.ok(!PRIVILEGED.has(Msg.PROTECT));
});

test("message envelopes are checked", () => {
  assert.equal(envelopeError({ type: "x", target: "background", data: {} }), null);
  assert.match(envelopeError(null), /must be an object/);
  assert.match(envelopeError({ type: 1, target: "b" }), /type must be a string/);
  assert.match(envelopeError({ type: "x", target: "b", data: null }), /data must be an object/);
});

import { forecastCounts, forecastSegments, KIND, wordTitle } from "../src/forecast.js";

test("the forecast covers the typed text exactly once, words marked by kind", () => {
  const text = "  Dear Xylofant,\nthe 52 kg";
  const word = (start, end, label, extra = {}) => ({ start, end, label, probability: 0.5, survival_probability: 0.4, zipf: null, rootguard: false, ...extra });
  const words = [
    word(2, 6, "likely restored", { zipf: 5.1 }),
    word(7, 16, "likely hidden"),
    word(17, 20, "likely restored", { zipf: 7.6 }),
    word(21, 23, "likely hidden", { rootguard: true }),
    word(24, 26, "likely restored"),
  ];
  const runs = forecastSegments(text, words);
  assert.equal(runs.map((r) => r.text).join(""), text);
  assert.deepEqual(
    runs.filter((r) => r.kind).map((r) => [r.text, r.kind]),
    [["Dear", KIND.RESTORED], ["Xylofant,", KIND.HIDDEN], ["the", KIND.RESTORED], ["52", KIND.ROOTGUARD], ["kg", KIND.RESTORED]],
  );
  assert.equal(runs[0].text, "  ");
  assert.deepEqual(forecastCounts(words), { hidden: 1, restored: 3, rootguard: 1 });
  assert.match(wordTitle(words[1]), /likely hidden.*50%.*40% \(p\^9\).*not in the word list/);
  assert.match(wordTitle(words[3]), /RootGuard/);
});

test("a forecast that does not fit the text is an error, not a wrong picture", () => {
  const w = { start: 0, end: 5, label: "likely hidden", probability: 0.1, survival_probability: 0.1, zipf: null };
  assert.throws(() => forecastSegments("abc", [w]), /out of place/);
  assert.throws(() => forecastSegments("abcdef abc", [w, { ...w, start: 3, end: 6 }]), /out of place/);
  assert.throws(() => forecastSegments("abcde", [{ ...w, label: "maybe" }]), /unknown forecast label/);
  assert.deepEqual(forecastSegments("", []), []);
});
