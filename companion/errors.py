"""One error envelope for every failure, with stable codes.

The envelope has OpenAI's shape, so OpenAI clients show the message:
``{"error": {"message": ..., "type": ..., "code": ..., "param": ...}}``.
The codes are Veil's one vocabulary, :data:`py_core.errors.ERROR_CODES` (which the
extension and the Pyodide bridge speak too): :class:`ErrorCode` names the ones the
companion answers, and an error Veil raises on purpose (:class:`py_core.errors.VeilError`)
becomes its own ``code`` with the table's status (4xx).
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
from enum import StrEnum
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from companion.db import storage_problem
from py_core.errors import ERROR_CODES, VeilError

log = logging.getLogger("veil.errors")


class ErrorCode(StrEnum):
    """The codes the companion answers: all of them in py_core.errors.ERROR_CODES (tested)."""

    INVALID_REQUEST = "invalid_request"
    UNAUTHORIZED = "unauthorized"
    KEY_REVOKED = "key_revoked"  # a guest key the owner revoked
    KEY_EXPIRED = "key_expired"  # a guest key past its expiry
    GUEST_FORBIDDEN = "guest_forbidden"  # an owner route, or chat terms the key does not allow
    GUEST_BUDGET_SPENT = "guest_budget_spent"  # the key's lifetime epsilon is spent
    FORBIDDEN_HOST = "forbidden_host"
    FORBIDDEN_ORIGIN = "forbidden_origin"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA = "unsupported_media_type"
    BUSY = "model_busy"
    TIMEOUT = "generation_timeout"
    INSECURE_RANDOMNESS = "insecure_randomness"
    BUDGET_EXHAUSTED = "budget_exhausted"
    STATE_CONFLICT = "state_conflict"
    INVALID_PROFILE = "invalid_profile"  # a RootGuard profile (py_core ProfileError)
    INVALID_EXPRESSION = "invalid_expression"  # a formula (py_core ExpressionError)
    MODEL_UNAVAILABLE = "model_unavailable"
    QUEUE_FULL = "queue_full"  # the audit job queue is full (429 with Retry-After)
    SETUP_REQUIRED = "setup_required"  # the auditor's per-model setup; RootGuard (py_core)
    PROMPT_TOO_LONG = "prompt_too_long"  # over max_prompt_tokens or max_messages
    DOCUMENT_TOO_LARGE = "document_too_large"  # over max_document_chars / max_document_chunks
    STORAGE_FULL = "storage_full"  # the disk under the companion's home is full (507)
    STORAGE_UNAVAILABLE = "storage_unavailable"  # an I/O error, a locked database (503)
    INTERNAL = "internal_error"


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_busy_error",
    504: "timeout_error",
    507: "storage_error",
}


class APIError(Exception):
    """An error with an HTTP status and a stable code."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.headers = headers


def envelope(
    status: int, code: ErrorCode, message: str, param: str | None = None
) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "server_error"),
            "code": code.value,
            "param": param,
        }
    }


def error_response(
    status: int,
    code: ErrorCode,
    message: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(envelope(status, code, message, param), status_code=status, headers=headers)


def veil_error_status(exc: VeilError) -> tuple[int, ErrorCode]:
    """A py_core error's HTTP status and code: its own ``code``, the status from ERROR_CODES."""
    code = ErrorCode(exc.code)
    return ERROR_CODES[code].status, code


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.param, exc.headers)

    @app.exception_handler(VeilError)
    async def _veil_error(request: Request, exc: VeilError) -> JSONResponse:
        status, code = veil_error_status(exc)
        return error_response(status, code, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        first: str | None = None
        for err in exc.errors():
            where = _location(tuple(err.get("loc", ())))
            first = first or where
            problems.append(f"{where}: {err.get('msg')}")
        message = "invalid request: " + "; ".join(problems) if problems else "invalid request"
        return error_response(400, ErrorCode.INVALID_REQUEST, message, first)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {
            404: ErrorCode.NOT_FOUND,
            405: ErrorCode.METHOD_NOT_ALLOWED,
            413: ErrorCode.PAYLOAD_TOO_LARGE,
            415: ErrorCode.UNSUPPORTED_MEDIA,
        }.get(exc.status_code, ErrorCode.INVALID_REQUEST)
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return error_response(exc.status_code, code, detail, headers=getattr(exc, "headers", None))

    @app.exception_handler(OverflowError)
    async def _overflow(request: Request, exc: OverflowError) -> JSONResponse:
        # A number from the request too large for SQLite's 64-bit integers or a float
        # (routes bound their numbers; this catches one a route forgot).
        return error_response(
            400, ErrorCode.INVALID_REQUEST, "a number in the request is out of range"
        )

    @app.exception_handler(sqlite3.Error)
    @app.exception_handler(OSError)
    async def _storage(request: Request, exc: Exception) -> JSONResponse:
        response = storage_error_response(exc)
        if response is None:
            raise exc  # not the storage: the internal error below
        return response

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        return internal_error_response(exc, f"{request.method} {request.url.path}")


STORAGE_FULL_MESSAGE = (
    "the disk where the companion keeps its data is full, so this request was not saved: "
    "free some space on it and send the request again (what was stored before is kept)"
)
STORAGE_UNAVAILABLE_MESSAGE = (
    "the companion could not read or write its data ({problem}), so this request was not "
    "saved: check the disk under the companion's home and send the request again"
)


def storage_error_response(exc: BaseException) -> JSONResponse | None:
    """507 for a full disk, 503 for another storage failure (None: not the storage).

    The message says what happened and what to do; the error itself goes to the log.
    """
    problem = storage_problem(exc)
    if problem is None:
        return None
    log.warning("storage error: %s: %s", type(exc).__name__, exc)
    if problem == "full":
        return error_response(507, ErrorCode.STORAGE_FULL, STORAGE_FULL_MESSAGE)
    detail = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    return error_response(
        503,
        ErrorCode.STORAGE_UNAVAILABLE,
        STORAGE_UNAVAILABLE_MESSAGE.format(problem=detail),
        headers={"Retry-After": "5"},
    )


def internal_error_message(exc: BaseException, where: str) -> str:
    """Log ``exc`` with its trace; the client's message names only an id to look for."""
    ref = secrets.token_hex(4)
    log.error("internal error %s in %s", ref, where, exc_info=(type(exc), exc, exc.__traceback__))
    return f"internal error (reference {ref}; the details are in the server log)"


def internal_error_response(exc: BaseException, where: str) -> JSONResponse:
    """A 500 that never carries exception text or a trace (they go to the server log)."""
    return error_response(500, ErrorCode.INTERNAL, internal_error_message(exc, where))
