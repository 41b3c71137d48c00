// Error codes: Veil's one vocabulary, snake_case, the table of py_core/errors.py
// (ERROR_CODES) shared by py_core, the bridge, the extension and the companion's JSON
// errors. Every failed reply is {ok: false, error: {code, message}} with a code of
// ERROR_CODES; the bridge sends a py_core error's own code, so the extension passes it
// on as it is.

// A copy of py_core/errors.py's ERROR_CODES (code: meaning); tests/extension/test_ops.py
// checks the two are identical.
export const ERROR_CODES = Object.freeze({
  invalid_request: "a value in the request is refused; the message names it",
  insecure_randomness: "a seeded RNG was passed where real data is protected",
  budget_exhausted: "the request would spend more privacy budget than remains",
  state_conflict: "saved state is corrupted or does not match; it is refused",
  setup_required: "something must be set up first (RootGuard, the auditor)",
  invalid_profile: "a RootGuard profile is invalid; every problem is listed",
  invalid_expression: "a formula is unsafe, malformed or cannot be evaluated",
  unknown_op: "the privacy core has no such operation",
  bad_message: "not a {type, target, data} message",
  unknown_type: "no handler for this message type",
  forbidden: "this sender may not send this message type",
  timeout: "the privacy core did not answer in time",
  core_unavailable: "the privacy core failed to start",
  unauthorized: "no valid access token or guest key",
  key_revoked: "a guest key the owner revoked",
  key_expired: "a guest key past its expiry",
  guest_forbidden: "an owner route, or chat terms the guest key does not allow",
  guest_budget_spent: "the guest key's lifetime epsilon is spent",
  forbidden_host: "a Host header other than the companion's (DNS rebinding)",
  forbidden_origin: "an Origin other than the companion's page or Veil",
  not_found: "no such route or object",
  method_not_allowed: "the route does not take this method",
  payload_too_large: "the body or upload is over its limit",
  unsupported_media_type: "a body type the route does not read",
  model_busy: "the model is busy; retry",
  generation_timeout: "the generation ran past its timeout and was stopped",
  model_unavailable: "the model could not be loaded",
  queue_full: "the audit job queue is full; retry after Retry-After",
  prompt_too_long: "over max_prompt_tokens or max_messages",
  document_too_large: "over max_document_chars or max_document_chunks",
  storage_full: "the disk under the companion's home is full",
  storage_unavailable: "an I/O error or a locked database",
  internal_error: "anything not foreseen; the details are in the log",
});

export const ErrorCode = Object.freeze({
  // the message itself
  BAD_MESSAGE: "bad_message", // not {type, target, data}
  UNKNOWN_TYPE: "unknown_type",
  FORBIDDEN: "forbidden", // a sender that may not send this type
  BAD_REQUEST: "invalid_request", // data the handler refuses (an unknown site, a bad value)
  // the core
  TIMEOUT: "timeout", // the core did not answer in time
  CORE_UNAVAILABLE: "core_unavailable", // the core failed to start
  UNKNOWN_OP: "unknown_op",
  INTERNAL: "internal_error", // anything not foreseen
});

/** The code for an error code the core sent: one of ERROR_CODES as it is, else "internal_error". */
export function coreCode(code) {
  return isErrorCode(code) ? code : ErrorCode.INTERNAL;
}

/** Whether `code` is one of ERROR_CODES. */
export function isErrorCode(code) {
  return typeof code === "string" && Object.hasOwn(ERROR_CODES, code);
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

/** The code a reply carries for `err`: its own when it is one of ERROR_CODES, else "internal_error". */
export function errorCode(err) {
  return isErrorCode(err?.code) ? err.code : ErrorCode.INTERNAL;
}
