// Error codes: one style, kebab-case strings, the style of the bridge's own
// codes ("bad-request", "rootguard-not-set-up", "invalid-profile", ...). Every
// failed reply is {ok: false, error: {code, message}} with a code from here or
// one the bridge sent. The bridge names py_core's VeilError subclasses by class
// (e.g. "InvalidParameterError"); the core client maps those with coreCode().

export const ErrorCode = Object.freeze({
  // the message itself
  BAD_MESSAGE: "bad-message", // not {type, target, data}
  UNKNOWN_TYPE: "unknown-type",
  FORBIDDEN: "forbidden", // a sender that may not send this type
  BAD_REQUEST: "bad-request", // data the handler refuses (an unknown site, a bad value)
  // the core
  TIMEOUT: "timeout", // the core did not answer in time
  CORE_UNAVAILABLE: "core-unavailable", // the core failed to start
  UNKNOWN_OP: "unknown-op",
  INTERNAL: "internal", // anything not foreseen
});

// py_core/errors.py's VeilError classes, as the bridge names them, and their
// codes here (tests/extension/test_ops.py checks every class is listed).
export const CORE_ERROR_CODES = Object.freeze({
  VeilError: "core-error",
  InvalidParameterError: "invalid-parameter",
  InsecureRandomnessError: "insecure-randomness",
  InsufficientBudgetError: "insufficient-budget",
  StateError: "bad-state",
  SetupRequiredError: "setup-required",
  ProfileError: "invalid-profile",
  DependencyCycleError: "invalid-profile",
  ExpressionError: "invalid-expression",
});

const KEBAB = /^[a-z]+(-[a-z]+)*$/;

/** The code for an error code the core sent: kebab-case ones as they are, class names mapped. */
export function coreCode(code) {
  if (typeof code !== "string" || code === "") return ErrorCode.INTERNAL;
  if (KEBAB.test(code)) return code;
  if (Object.hasOwn(CORE_ERROR_CODES, code)) return CORE_ERROR_CODES[code];
  // A class added to py_core since: "FooBarError" -> "foo-bar".
  const words = code.replace(/Error$/, "").match(/[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+/g);
  return words ? words.join("-").toLowerCase() : ErrorCode.INTERNAL;
}

/** An Error that carries one of the codes above to the reply. */
export class CodedError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

/** A request the handler refuses (the message says what to change). */
export function badRequest(message) {
  return new CodedError(ErrorCode.BAD_REQUEST, message);
}

export function errorText(err) {
  return String(err?.message || err);
}

/** The code a reply carries for `err`: its own, else "internal". */
export function errorCode(err) {
  return typeof err?.code === "string" && KEBAB.test(err.code) ? err.code : ErrorCode.INTERNAL;
}
