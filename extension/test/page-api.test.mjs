// The popup's line about the privacy core: while it boots, what it is doing and for how long.
import assert from "node:assert/strict";
import { test } from "node:test";

import { coreStatusText } from "../src/page-api.js";

test("the core's status line shows its progress while it boots, then how it started", () => {
  assert.equal(coreStatusText(null), "Privacy core: not started yet");
  assert.equal(coreStatusText({ state: "booting" }), "Privacy core: starting…");
  const booting = coreStatusText({ state: "booting", step: "restoring its snapshot", documentStartedAt: Date.now() - 1500 });
  assert.match(booting, /^Privacy core: starting… restoring its snapshot 1\.[5-9] s$/);
  assert.equal(coreStatusText({ state: "ready", ms: 2345, fromSnapshot: true }), "Privacy core ready (2.35 s, from its snapshot)");
  assert.equal(coreStatusText({ state: "error", error: "no wasm" }), "Privacy core failed: no wasm");
});
