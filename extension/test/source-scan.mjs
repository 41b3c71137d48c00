// Reading the extension's sources for the schema tests: every .js file under
// src/, the code without comments, and the keys of object literals.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const SRC = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "src");

export function sources() {
  const out = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith(".js")) out.push([path.relative(SRC, full), fs.readFileSync(full, "utf8")]);
    }
  };
  walk(SRC);
  return out;
}

/** The code without its // and /* comments (enough for this source: no "//" starts a string's text). */
export function code(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

/** The text of the balanced {...} starting at `at`, or null when there is none. */
export function objectAt(text, at) {
  if (text[at] !== "{") return null;
  let depth = 0;
  for (let i = at; i < text.length; i++) {
    if ("{[(".includes(text[i])) depth++;
    else if ("}])".includes(text[i])) depth--;
    if (depth === 0) return text.slice(at + 1, i);
  }
  return null;
}

/** The top-level keys of an object literal's body; null when it spreads another object. */
export function literalKeys(body) {
  const parts = [];
  let depth = 0;
  let quote = null;
  let start = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (quote) {
      if (c === "\\") i++;
      else if (c === quote) quote = null;
    } else if (`"'\``.includes(c)) quote = c;
    else if ("{[(".includes(c)) depth++;
    else if ("}])".includes(c)) depth--;
    else if (c === "," && depth === 0) {
      parts.push(body.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(body.slice(start));
  const keys = [];
  for (const part of parts.map((p) => p.trim()).filter(Boolean)) {
    if (part.startsWith("...")) return null;
    const match = part.match(/^["']?([A-Za-z_$][\w$]*)["']?\s*(?::|$)/);
    assert.ok(match, `cannot read the key of ${JSON.stringify(part)}`);
    keys.push(match[1]);
  }
  return keys;
}

