// The names of the Python core's operations: the keys of OPS in
// extension/python/veil_bridge.py (tests/extension/test_ops.py checks the two
// sets are equal). Every call into the core names its op from here.

export const Op = Object.freeze({
  PING: "ping",
  SANITIZE: "sanitize",
  PREVIEW: "preview",
  EXPLAIN: "explain",
  COMPOSED_EPSILON: "composed_epsilon",
  LEDGER: "ledger",
  ROOTGUARD_DEFAULT: "rootguard_default",
  ROOTGUARD_INIT: "rootguard_init",
  ROOTGUARD_RESET: "rootguard_reset",
  ROOTGUARD_VIEW: "rootguard_view",
  ROOTGUARD_DESCRIBE: "rootguard_describe",
  ROOTGUARD_IMPORT_CHECK: "rootguard_import_check",
  ROOTGUARD_ADD: "rootguard_add",
});

// Ops that read py_core's data files (not in the memory snapshot): after a
// snapshot restore the offscreen document runs them once the bundle is unpacked.
export const FILE_OPS = new Set([Op.PREVIEW]);
