// messages.js documents exactly the messages src/ sends: every send's type,
// target and data keys are checked against SCHEMA, read from the source
// (the replies of the worker's handlers are checked in handlers.test.mjs).
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";

import { Op } from "../src/core-ops.js";
import { Msg, PRIVILEGED, SCHEMA, Target } from "../src/messages.js";
import { keysOf } from "./schema-keys.mjs";
import { code, literalKeys, objectAt, sources } from "./source-scan.mjs";

const MSG_NAME = Object.fromEntries(Object.entries(Msg).map(([name, type]) => [name, type]));
const TARGET_NAME = Object.fromEntries(Object.entries(Target).map(([name, target]) => [name, target]));

/**
 * Every message src/ sends: `message(Msg.X, Target.Y, {...})` and the pages'
 * `send(Msg.X, {...})` (page-api.js: always to the background).
 */
function sends() {
  const out = [];
  for (const [file, text] of sources()) {
    const body = code(text);
    const re = /\b(message|send)\(\s*Msg\.([A-Z_]+)\s*(?:,\s*Target\.([A-Z]+))?\s*(,\s*)?/g;
    for (const m of body.matchAll(re)) {
      const [, fn, name, targetName, comma] = m;
      if (fn === "message" && !targetName) continue; // not a call of messages.js's message()
      const type = MSG_NAME[name];
      assert.ok(type, `${file}: Msg.${name} is not in messages.js`);
      const target = fn === "send" ? Target.BACKGROUND : TARGET_NAME[targetName];
      const at = m.index + m[0].length;
      const literal = comma ? objectAt(body, at) : "";
      out.push({ file, type, target, keys: literal === null ? null : literalKeys(literal) });
    }
  }
  return out;
}

// The offscreen page reports the core's status from objects it builds up
// (report(status), report({...status, snapshot})); the worker stores them whole.
const NOT_LITERAL = new Set([Msg.CORE_STATUS]);

test("the scan finds the sends it should (it is not vacuous)", () => {
  const found = sends();
  assert.ok(found.length >= 20, `${found.length} sends`);
  assert.ok(found.some((s) => s.file === path.join("content", "protect.js") && s.type === Msg.PROTECT && s.keys.join() === "text,url"));
  assert.ok(found.some((s) => s.file === "popup.js" && s.type === Msg.GET_STATE && s.keys.join() === "url"));
  assert.deepEqual(literalKeys(" a, b: f(1, 2), 'c': { d: 1 } "), ["a", "b", "c"]);
  assert.equal(literalKeys("...x, a"), null);
});

test("every message type is documented in SCHEMA, and every documented type is sent", () => {
  assert.deepEqual(Object.keys(SCHEMA).sort(), Object.values(Msg).sort());
  const sent = new Set(sends().map((s) => s.type));
  assert.deepEqual(Object.values(Msg).filter((type) => !sent.has(type)), []);
});

test("every send goes to its documented target with documented data keys, required ones included", () => {
  for (const { file, type, target, keys } of sends()) {
    const spec = SCHEMA[type];
    assert.equal(target, spec.target, `${file}: ${type} sent to ${target}`);
    if (keys === null) {
      assert.ok(NOT_LITERAL.has(type), `${file}: ${type} is sent with data that is not an object literal; write its keys out`);
      continue;
    }
    const { required, all } = keysOf(spec.data);
    assert.deepEqual(keys.filter((k) => !all.has(k)), [], `${file}: ${type} sends keys messages.js does not document`);
    assert.deepEqual([...required].filter((k) => !keys.includes(k)), [], `${file}: ${type} leaves out required keys`);
  }
});

test("every documented data key is sent by some sender (the schema lists nothing extra)", () => {
  const used = new Map();
  for (const { type, keys } of sends()) {
    if (keys) for (const k of keys) used.set(type, new Set([...(used.get(type) || []), k]));
  }
  for (const [type, spec] of Object.entries(SCHEMA)) {
    if (NOT_LITERAL.has(type)) continue;
    const unsent = [...keysOf(spec.data).all].filter((k) => !used.get(type)?.has(k));
    assert.deepEqual(unsent, [], `${type}: documented but never sent`);
  }
});

test("privileged types are the ones the extension's pages send to the worker", () => {
  assert.deepEqual(
    [...PRIVILEGED].sort(),
    [
      Msg.GET_STATE, Msg.SET_SITE, Msg.ADD_SITE, Msg.REMOVE_SITE, Msg.SET_GLOBAL, Msg.PREVIEW,
      Msg.EXPLAIN, Msg.CLEAR_HISTORY, Msg.GET_HISTORY, Msg.ROOTGUARD_SAVE, Msg.ROOTGUARD_RESET,
      Msg.ROOTGUARD_EXPORT, Msg.ROOTGUARD_IMPORT, Msg.ROOTGUARD_ADD, Msg.COMPOSE_SEND, Msg.MEMO_STATE, Msg.MEMO_RESET, Msg.LEDGER_STATE,
      Msg.RESTORE_REPLY,
    ].sort(),
  );
});

test("only chrome-api.js touches chrome.*", () => {
  for (const [file, text] of sources()) {
    if (file === "chrome-api.js") continue;
    assert.deepEqual(code(text).match(/\bchrome\.[a-z]\w*/g) || [], [], `${file} calls chrome.* directly`);
  }
});

test("the core's op names come from core-ops.js, never as bare strings", () => {
  const names = new Set(Object.values(Op));
  for (const [file, text] of sources()) {
    if (file === "core-ops.js") continue;
    const body = code(text);
    assert.deepEqual(body.match(/callCore\([^,]+,\s*["'`]/g) || [], [], `${file}: callCore with a bare op name`);
    // (messages.js's SCHEMA describes `op` in words.)
    if (file !== "messages.js") assert.deepEqual(body.match(/\bop:\s*["'`]/g) || [], [], `${file}: an op written as a string`);
    for (const m of body.matchAll(/\bOp\.([A-Z_]+)/g)) assert.ok(names.has(Op[m[1]]), `${file}: Op.${m[1]} does not exist`);
  }
});
