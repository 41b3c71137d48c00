// The channel between the network guard (guard.js, the page's world) and the
// content script (content/guard-link.js) is part of messages.js's schema:
// every message either side sends has exactly the fields GUARD_SCHEMA lists
// (read from the source), each type is sent by the side the schema names, and
// a receiver drops what it should not take.
import assert from "node:assert/strict";
import { test } from "node:test";

import { GUARD_SCHEMA, guardMessage, guardMessageError, GuardMsg, parseGuardMessage } from "../src/messages.js";
import { code, literalKeys, objectAt, sources } from "./source-scan.mjs";

/** Each side's sending function: the content script's toGuard, the guard's emit. */
const SENDER = { "content/guard-link.js": ["toGuard", "content"], "guard.js": ["emit", "guard"] };

/** Every guard-channel message in src/: {file, side, type, keys}. */
function guardSends() {
  const out = [];
  for (const [file, text] of sources()) {
    const body = code(text);
    for (const m of body.matchAll(/\b(toGuard|emit)\(\s*GuardMsg\.([A-Z_]+)\s*(,\s*)?/g)) {
      const [, fn, name, comma] = m;
      const sender = SENDER[file.split("\\").join("/")];
      assert.ok(sender && sender[0] === fn, `${file} sends ${fn}(GuardMsg.${name}): only guard-link.js and guard.js talk on the guard channel`);
      assert.ok(GuardMsg[name], `${file}: GuardMsg.${name} is not in messages.js`);
      const literal = comma ? objectAt(body, m.index + m[0].length) : "";
      out.push({ file, side: sender[1], type: GuardMsg[name], keys: literal === null ? null : literalKeys(literal) });
    }
    // Nothing dispatches on the channel's events except through those two functions.
    const direct = [...body.matchAll(/new CustomEvent\(\s*(TO_GUARD|FROM_GUARD|"veil:)/g)];
    assert.ok(direct.length <= 1 && (direct.length === 0 || SENDER[file.split("\\").join("/")]), `${file} dispatches guard events directly`);
  }
  return out;
}

test("every guard-channel message sent has exactly the schema's fields, from the schema's side", () => {
  const found = guardSends();
  assert.ok(found.length >= 6, `${found.length} sends`); // not vacuous
  for (const s of found) {
    const spec = GUARD_SCHEMA[s.type];
    assert.equal(s.side, spec.from, `${s.file}: ${s.type} is sent by the ${spec.from}`);
    assert.ok(s.keys !== null, `${s.file}: ${s.type}'s fields are not a literal`);
    assert.deepEqual([...s.keys].sort(), Object.keys(spec.fields).sort(), `${s.file}: ${s.type}'s fields`);
  }
  const sent = new Set(found.map((s) => s.type));
  assert.deepEqual([...sent].sort(), Object.values(GuardMsg).sort(), "every type in GUARD_SCHEMA is sent, and only those");
});

test("a receiver takes the messages of the other side, and drops anything else", () => {
  const approve = JSON.stringify(guardMessage(GuardMsg.APPROVE, { text: "protected", original: null }));
  assert.deepEqual(parseGuardMessage(approve, "guard"), { type: "approve", text: "protected", original: null });
  assert.equal(parseGuardMessage(approve, "content"), null, "the content script does not take its own messages");
  const blocked = guardMessage(GuardMsg.BLOCKED, { api: "fetch", host: "x.test", reason: "draft", draft: "hello there" });
  assert.equal(guardMessageError(blocked, "content"), null);
  assert.match(guardMessageError({ ...blocked, extra: 1 }, "content"), /unexpected field extra/);
  assert.match(guardMessageError({ ...blocked, draft: 3 }, "content"), /draft is not string\|null/);
  const { host: _host, ...noHost } = blocked;
  assert.match(guardMessageError(noHost, "content"), /missing field host/);
  assert.match(guardMessageError({ type: "nope" }, "guard"), /unknown type/);
  assert.match(guardMessageError({ type: "toString" }, "guard"), /unknown type/);
  assert.match(guardMessageError({ type: GuardMsg.STATE, protected: "yes" }, "guard"), /protected is not boolean/);
  assert.equal(parseGuardMessage("{not json", "guard"), null);
  assert.equal(parseGuardMessage({ type: "hello" }, "guard"), null, "detail is JSON text, not an object");
  assert.deepEqual(parseGuardMessage(JSON.stringify({ type: "hello" }), "guard"), { type: "hello" });
  const status = { type: "status", active: true, checked: 2, blocked: 1, lastBlocked: { api: "fetch", at: 1 } };
  assert.deepEqual(parseGuardMessage(JSON.stringify(status), "content"), status);
  assert.equal(parseGuardMessage(JSON.stringify({ ...status, lastBlocked: null }), "content").lastBlocked, null);
});
