"""One exception root for everything Veil raises on purpose, and Veil's one table of error codes.

Each specific error also subclasses the matching builtin, so callers that only
know Python's own exceptions (``except ValueError``) still catch it, and carries
a stable :attr:`VeilError.code` from :data:`ERROR_CODES`.

:data:`ERROR_CODES` is the one vocabulary of failures: py_core's errors, the
Pyodide bridge's refusals (``extension/python/veil_bridge.py`` sends ``exc.code``),
the extension's own (``extension/src/errors.js`` holds a copy that
``tests/extension/test_ops.py`` checks is identical) and the companion's JSON errors
(``companion/errors.py``: its ``ErrorCode`` values are codes of this table, and a
py_core error becomes ``{"code": exc.code}`` with the table's HTTP status).  Codes are
snake_case, as OpenAI-compatible clients read them; the companion's kept their
spelling, the extension's and the bridge's were renamed to these.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple


class ErrorKind(NamedTuple):
    """What a code means, and the HTTP status the companion answers a py_core error of it with
    (its own routes name theirs: ``document_too_large`` is 413 for an upload's size)."""

    status: int
    meaning: str


#: Every error code Veil speaks, wherever it is raised.
ERROR_CODES: dict[str, ErrorKind] = {
    # py_core's errors (VeilError.code), also sent by the bridge and the companion
    "invalid_request": ErrorKind(400, "a value in the request is refused; the message names it"),
    "insecure_randomness": ErrorKind(400, "a seeded RNG was passed where real data is protected"),
    "budget_exhausted": ErrorKind(400, "the request would spend more privacy budget than remains"),
    "state_conflict": ErrorKind(409, "saved state is corrupted or does not match; it is refused"),
    "setup_required": ErrorKind(409, "something must be set up first (RootGuard, the auditor)"),
    "invalid_profile": ErrorKind(400, "a RootGuard profile is invalid; every problem is listed"),
    "invalid_expression": ErrorKind(400, "a formula is unsafe, malformed or cannot be evaluated"),
    # the bridge and the extension
    "unknown_op": ErrorKind(400, "the privacy core has no such operation"),
    "bad_message": ErrorKind(400, "not a {type, target, data} message"),
    "unknown_type": ErrorKind(400, "no handler for this message type"),
    "forbidden": ErrorKind(403, "this sender may not send this message type"),
    "timeout": ErrorKind(504, "the privacy core did not answer in time"),
    "core_unavailable": ErrorKind(503, "the privacy core failed to start"),
    # the companion's HTTP errors
    "unauthorized": ErrorKind(401, "no valid access token or guest key"),
    "key_revoked": ErrorKind(401, "a guest key the owner revoked"),
    "key_expired": ErrorKind(401, "a guest key past its expiry"),
    "guest_forbidden": ErrorKind(403, "an owner route, or chat terms the guest key does not allow"),
    "guest_budget_spent": ErrorKind(403, "the guest key's lifetime epsilon is spent"),
    "forbidden_host": ErrorKind(403, "a Host header other than the companion's (DNS rebinding)"),
    "forbidden_origin": ErrorKind(403, "an Origin other than the companion's page or Veil"),
    "not_found": ErrorKind(404, "no such route or object"),
    "method_not_allowed": ErrorKind(405, "the route does not take this method"),
    "payload_too_large": ErrorKind(413, "the body or upload is over its limit"),
    "unsupported_media_type": ErrorKind(415, "a body type the route does not read"),
    "model_busy": ErrorKind(503, "the model is busy; retry"),
    "generation_timeout": ErrorKind(504, "the generation ran past its timeout and was stopped"),
    "model_unavailable": ErrorKind(503, "the model could not be loaded"),
    "queue_full": ErrorKind(429, "the audit job queue is full; retry after Retry-After"),
    "prompt_too_long": ErrorKind(400, "over max_prompt_tokens or max_messages"),
    "document_too_large": ErrorKind(400, "over max_document_chars or max_document_chunks"),
    "storage_full": ErrorKind(507, "the disk under the companion's home is full"),
    "storage_unavailable": ErrorKind(503, "an I/O error or a locked database"),
    # anywhere
    "internal_error": ErrorKind(500, "anything not foreseen; the details are in the log"),
}


class VeilError(Exception):
    """Root of every error Veil raises deliberately; ``code`` is its entry in ERROR_CODES."""

    code: ClassVar[str] = "invalid_request"


class InvalidParameterError(VeilError, ValueError):
    """A parameter is out of range or of the wrong kind; the message names the value."""

    code: ClassVar[str] = "invalid_request"


class InsecureRandomnessError(VeilError, ValueError):
    """A seeded (reproducible) RNG was passed where real data is being protected."""

    code: ClassVar[str] = "insecure_randomness"


class InsufficientBudgetError(VeilError, ValueError):
    """A request would spend more privacy budget than remains."""

    code: ClassVar[str] = "budget_exhausted"

    def __init__(self, message: str, *, remaining: float, requested: float) -> None:
        super().__init__(message)
        self.remaining = remaining
        self.requested = requested


class StateError(VeilError, ValueError):
    """Saved state is corrupted or does not match; it is refused, never silently redrawn."""

    code: ClassVar[str] = "state_conflict"


class SetupRequiredError(VeilError, ValueError):
    """A setting needs something the person has not set up (numbers mode without RootGuard)."""

    code: ClassVar[str] = "setup_required"


class ProfileError(InvalidParameterError):
    """A RootGuard profile is invalid; ``.problems`` lists every problem found."""

    code: ClassVar[str] = "invalid_profile"

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid profile ({len(self.problems)} problem(s)):\n{lines}")


class DependencyCycleError(ProfileError):
    """Derived values depend on each other in a cycle; ``.cycle`` names it (first name repeated)."""

    def __init__(self, cycle: list[str], problems: list[str] | None = None) -> None:
        self.cycle = list(cycle)
        super().__init__(problems or [f"dependency cycle: {' -> '.join(self.cycle)}"])


class ExpressionError(InvalidParameterError):
    """A formula is unsafe or malformed, or could not be evaluated (domain error, overflow)."""

    code: ClassVar[str] = "invalid_expression"
