// The worker's rootguard-add handler: a value stored later is drawn alone, under
// RootGuard's lock, recorded in the events; the rest of the record is kept.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Op } from "../src/core-ops.js";
import { ErrorCode } from "../src/errors.js";
import { message, Msg, SCHEMA, Target } from "../src/messages.js";
import { dispatch } from "../src/sw/handlers.js";
import { ROOTGUARD_LOCK } from "../src/sw/storage.js";
import { fakeCore, fakeExt, senders } from "./fake-ext.mjs";
import { assertKeys } from "./schema-keys.mjs";

const PROFILE = { values: { age: { domain: [0, 120] }, height_cm: { domain: [120, 220] } } };

function env() {
  const core = fakeCore({
    // Stand-in for py_core's add_values: adds the given values, one draw each.
    rootguard_add: ({ trueValues, state, values }) => ({
      state: { draws: state.draws + Object.keys(values).length },
      noisy: {},
      ledger: [],
      describe: { roots: {} },
      trueValues: { ...trueValues, ...values },
      added: Object.keys(values).filter((k) => !(k in trueValues)),
      updated: Object.keys(values).filter((k) => k in trueValues),
      adopted: [],
    }),
  });
  return fakeExt({ core, tabs: [] });
}

async function call({ ext }, type, data) {
  const reply = await dispatch(ext, message(type, Target.BACKGROUND, data), senders.page());
  if (reply.ok) assertKeys(SCHEMA[type].reply, Object.keys(reply.data), `the reply to ${type}`);
  return reply;
}

test("rootguard-add: needs a saved record and values", async () => {
  const e = env();
  const none = await call(e, Msg.ROOTGUARD_ADD, { values: { height_cm: 171 } });
  assert.equal(none.error.code, ErrorCode.BAD_REQUEST);
  assert.match(none.error.message, /save your profile first/);
  await call(e, Msg.ROOTGUARD_SAVE, { profile: PROFILE, trueValues: { age: 52 } });
  const empty = await call(e, Msg.ROOTGUARD_ADD, { values: {} });
  assert.equal(empty.error.code, ErrorCode.BAD_REQUEST);
});

test("rootguard-add: only the new value goes to the core, under the lock; the record keeps the rest", async () => {
  const e = env();
  await call(e, Msg.ROOTGUARD_SAVE, { profile: PROFILE, trueValues: { age: 52 } });
  const before = (await e.local.get("rootguard")).rootguard;
  const locksBefore = e.state.locksHeld.length;
  const reply = await call(e, Msg.ROOTGUARD_ADD, { values: { height_cm: 171 } });
  assert.ok(reply.ok, JSON.stringify(reply));
  assert.deepEqual(reply.data.added, ["height_cm"]);
  assert.ok(e.state.locksHeld.slice(locksBefore).includes(ROOTGUARD_LOCK));
  const calls = e.state.coreCalls.filter((c) => c.op === Op.ROOTGUARD_ADD);
  assert.equal(calls.length, 1);
  assert.deepEqual(calls[0].args.values, { height_cm: 171 });
  assert.deepEqual(calls[0].args.state, before.state);
  const after = (await e.local.get("rootguard")).rootguard;
  assert.deepEqual(after.profile, before.profile);
  assert.deepEqual(after.trueValues, { age: 52, height_cm: 171 });
  assert.deepEqual(after.state, { draws: before.state.draws + 1 });
  assert.deepEqual(after.events.map((ev) => ev.event), ["initialised", "added"]);
  assert.match(after.events[1].reason, /height_cm added from the options page: drawn once/);
});

test("rootguard record: read back in the order the person entered, though chrome.storage sorts keys", async () => {
  const { loadRootguard, saveRootguard } = await import("../src/sw/storage.js");
  const e = env();
  const profile = { values: { weight_kg: { domain: [30, 250] }, age: { domain: [18, 100] }, bmi: { formula: "bmi" } } };
  await saveRootguard(e.ext, { profile, trueValues: { weight_kg: 82.4, age: 52 }, state: { draws: 0 }, events: [] });
  // What Chrome's storage does to an object: its keys come back sorted.
  const sorted = (obj) => Object.fromEntries(Object.keys(obj).sort().map((k) => [k, obj[k]]));
  const { rootguard } = await e.local.get("rootguard");
  await e.local.set({ rootguard: { ...rootguard, profile: { ...rootguard.profile, values: sorted(rootguard.profile.values) }, trueValues: sorted(rootguard.trueValues) } });
  const raw = (await e.ext.storage.local.get("rootguard")).rootguard;
  assert.deepEqual(Object.keys(raw.profile.values), ["age", "bmi", "weight_kg"], "the stand-in for Chrome's sorting took");
  const back = await loadRootguard(e.ext);
  assert.deepEqual(Object.keys(back.profile.values), ["weight_kg", "age", "bmi"]);
  assert.deepEqual(Object.keys(back.trueValues), ["weight_kg", "age"]);
  assert.ok(!("order" in back));
});
