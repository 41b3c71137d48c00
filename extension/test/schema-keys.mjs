// Checking an object's keys against a SCHEMA entry of messages.js (a key ending
// in "?" may be left out).
import assert from "node:assert/strict";

export function keysOf(spec) {
  const required = new Set();
  const optional = new Set();
  for (const key of Object.keys(spec)) (key.endsWith("?") ? optional : required).add(key.replace(/\?$/, ""));
  return { required, optional, all: new Set([...required, ...optional]) };
}

/** `keys` (present in an object) are exactly what `spec` documents: none missing, none extra. */
export function assertKeys(spec, keys, what) {
  const { required, all } = keysOf(spec);
  const present = new Set(keys);
  const extra = [...present].filter((k) => !all.has(k));
  const missing = [...required].filter((k) => !present.has(k));
  assert.deepEqual({ extra, missing }, { extra: [], missing: [] }, `${what}: keys differ from messages.js`);
}
