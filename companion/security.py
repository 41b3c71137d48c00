"""The companion trusts no web page: token, Host, Origin and size checks.

* A random token is created on first run in ``<veil home>/token`` with mode
  0600 and printed by ``veil serve``; every ``/v1`` request must carry it as
  ``Authorization: Bearer <token>`` (what OpenAI clients send as their API key).
* The Host header must name a loopback host (127.0.0.1, localhost, [::1]) and the
  port the companion listens on, on every request, so a DNS-rebinding page cannot
  reach the companion; IPv6 literals are parsed strictly (``[::1]evil.example`` is
  refused).
* A request that carries an Origin is accepted only from the companion's own
  page and from Chrome extensions (configured ids, or any when none is set);
  any other site gets 403 -- before the token is even looked at.
* Bodies over ``max_body_bytes`` (``max_upload_bytes`` for uploads) get 413,
  whether they declare a Content-Length or stream chunks; a request line and headers
  over ``max_header_bytes`` get 431 (``veil serve`` also stops reading such headers,
  and closes a connection that has not sent its headers in time:
  :mod:`companion.http_limits`).
* WebSocket handshakes get the same Host, Origin, header-size, token and guest checks
  (a handshake is a GET: a guest key opens only what ``GUEST_ROUTES`` lets it GET,
  which lists no WebSocket); a refused
  handshake is answered with the HTTP status and error envelope where the server
  supports it (uvicorn does), or closed with code 1008.
* The bearer value is either the owner's token or a guest key
  (``veil_guest_...``, :mod:`companion.keys`).  The middleware puts who called
  into the ASGI scope as ``scope["veil.principal"]`` (a
  :class:`companion.keys.Principal`: owner, guest or public); a revoked or
  expired guest key gets 401 at once, and a guest on anything but the routes of
  :data:`companion.keys.GUEST_ROUTES` gets 403 before its body is read.
  :func:`companion.api.deps.check_access`, a dependency of every route, checks
  the same table again per route.  Host and Origin checks come first, for the
  owner and guests alike.

:class:`SecurityMiddleware` is plain ASGI and wraps the whole app, so every
router -- including ones added later -- gets these checks for free.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from companion.errors import ErrorCode, envelope
from companion.keys import GUEST_ROUTES, OWNER, PUBLIC, KeyStore, Principal, looks_like_guest_key
from py_core.errors import StateError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})
UPLOAD_PATHS = ("/v1/documents", "/v1/audit/inversion")  # file uploads: documents, hidden states
TOKEN_PREFIXES = ("/v1/", "/mcp")  # /mcp: the MCP endpoint (companion.mcp.http)
PRINCIPAL = "veil.principal"  # the ASGI scope key the middleware sets
DEFAULT_MAX_HEADER_BYTES = 32_768  # the request line and headers (Settings.max_header_bytes)


def ensure_token(path: Path) -> str:
    """Read the API token, creating it (mode 0600) on first run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            os.chmod(path, 0o600)  # tighten a copied or hand-made file
        token = path.read_text(encoding="utf-8").strip()
        if len(token) < 32:
            raise StateError(
                f"the token file {path} is empty or too short; delete it and restart "
                "'veil serve' to create a new one"
            ) from None
        return token
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token


def parse_host(host_header: str) -> tuple[str, int | None] | None:
    """(host, port or None) of a Host header, or None when it is malformed.

    An IPv6 literal must be a valid address in brackets, followed by nothing or
    ``:port``; a port is 1-5 ASCII digits.
    """
    host = host_header.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        try:
            address = ipaddress.IPv6Address(host[1:end])
        except ValueError:
            return None
        name, rest = f"[{address.compressed}]", host[end + 1 :]
        if not rest:
            return name, None
        if not rest.startswith(":"):
            return None
        port = rest[1:]
    else:
        name, colon, port = host.partition(":")
        if not colon:
            return (name, None) if name else None
    if not (port.isascii() and port.isdigit() and 1 <= len(port) <= 5):
        return None
    return name, int(port)


def host_allowed(host_header: str, port: int) -> bool:
    """A loopback name and the companion's own port (no port: only when it listens on 80)."""
    parsed = parse_host(host_header)
    if parsed is None:
        return False
    name, given = parsed
    return name in LOOPBACK_HOSTS and (given if given is not None else 80) == port


def host_name(host_header: str) -> str:
    """The host part of a Host header, without the port (IPv6 keeps its brackets)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end > 0 else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class SecurityMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        port: int,
        extension_ids: list[str] | tuple[str, ...] = (),
        max_body_bytes: int,
        max_upload_bytes: int,
        keys: KeyStore | None = None,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        token_path: str | None = None,
    ) -> None:
        self.app = app
        self.token = token
        # Named in the 401s: where the person finds the right token.
        self.token_file = f"the token file {token_path}" if token_path else "the token file"
        self.keys = keys
        self.port = port
        self.extension_ids = tuple(extension_ids)
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes
        self.max_header_bytes = max_header_bytes

    def origin_allowed(self, origin: str, host_header: str) -> bool:
        origin = origin.strip().lower()
        if origin.startswith("chrome-extension://"):
            ext_id = origin[len("chrome-extension://") :].rstrip("/")
            return not self.extension_ids or ext_id in {e.lower() for e in self.extension_ids}
        if origin.startswith("http://"):
            rest = origin[len("http://") :].rstrip("/")
            # The companion's own page: same loopback host and port as this request.
            return host_name(rest) in LOOPBACK_HOSTS and rest == host_header.strip().lower()
        return False

    def identify(self, authorization: str) -> Principal | tuple[int, ErrorCode, str]:
        """The owner or a guest from the Authorization header, or why not (status, code, text)."""
        scheme, _, value = authorization.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and secrets.compare_digest(
            value.encode(), self.token.encode()
        ):
            return OWNER
        if scheme.lower() == "bearer" and self.keys is not None and looks_like_guest_key(value):
            key = self.keys.authenticate(value)
            if key is not None:
                status = key.status()
                if status == "active":
                    return Principal("guest", key)
                if status == "revoked":
                    return (
                        401,
                        ErrorCode.KEY_REVOKED,
                        "This guest key was revoked by the companion's owner: ask them for a "
                        "new key and paste that one instead.",
                    )
                return (
                    401,
                    ErrorCode.KEY_EXPIRED,
                    "This guest key has expired: ask the companion's owner for a new key and "
                    "paste that one instead.",
                )
        if not value:
            return (
                401,
                ErrorCode.UNAUTHORIZED,
                f"No API token was sent: paste the line in {self.token_file} (also printed by "
                "'veil serve') into the page, or send it as 'Authorization: Bearer <token>' "
                "(an OpenAI client's API key).",
            )
        return (
            401,
            ErrorCode.UNAUTHORIZED,
            f"This is not this companion's API token (or a guest key it knows): copy the "
            f"line in {self.token_file} again, or ask the owner for a guest key.",
        )

    def header_size(self, scope: Scope) -> int:
        """Bytes of the request line and headers, as sent (``name: value\\r\\n`` each)."""
        line = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + 16
        return line + sum(len(k) + len(v) + 4 for k, v in scope["headers"])

    def headers_too_large(self, scope: Scope) -> str | None:
        size = self.header_size(scope)
        if size <= self.max_header_bytes:
            return None
        return (
            f"the request's headers are {size:,} bytes, over the limit of "
            f"{self.max_header_bytes:,} bytes (max_header_bytes); send fewer or shorter "
            "headers (cookies of other local sites count too)"
        )

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket handshake: the HTTP checks, then the app (or the refusal)."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope.get("path", "")
        host = headers.get("host", "")
        origin = headers.get("origin")
        refusal: tuple[int, ErrorCode, str] | None = None
        too_large = self.headers_too_large(scope)
        if too_large is not None:
            refusal = 431, ErrorCode.INVALID_REQUEST, too_large
        elif not host_allowed(host, self.port):
            refusal = 403, ErrorCode.FORBIDDEN_HOST, f"Host {host!r} is not allowed"
        elif origin is not None and (origin == "null" or not self.origin_allowed(origin, host)):
            refusal = (
                403,
                ErrorCode.FORBIDDEN_ORIGIN,
                f"Origin {origin!r} is not allowed; only the companion's own page and the "
                "Veil extension may open a WebSocket",
            )
        principal = PUBLIC
        if refusal is None and path.startswith(TOKEN_PREFIXES):
            denied = self.identify(headers.get("authorization", ""))
            if not isinstance(denied, Principal):
                refusal = denied
            elif denied.kind == "guest" and ("GET", path) not in GUEST_ROUTES:
                refusal = (
                    403,
                    ErrorCode.GUEST_FORBIDDEN,
                    f"WebSocket {path} needs the owner's token",
                )
            else:
                principal = denied
        if refusal is not None:
            await _reject_websocket(scope, receive, send, *refusal)
            return
        scope[PRINCIPAL] = principal
        await self.app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self.websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = self.headers_too_large(scope)
        if too_large is not None:
            await _reject(send, 431, ErrorCode.INVALID_REQUEST, too_large)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope.get("path", "")
        host = headers.get("host", "")
        if not host_allowed(host, self.port):
            await _reject(
                send,
                403,
                ErrorCode.FORBIDDEN_HOST,
                f"Host {host!r} is not a loopback name with this companion's port; it answers "
                f"only requests addressed to 127.0.0.1:{self.port} or localhost:{self.port}",
            )
            return
        origin = headers.get("origin")
        allow_origin: str | None = None
        if origin is not None and origin != "null":
            if not self.origin_allowed(origin, host):
                await _reject(
                    send,
                    403,
                    ErrorCode.FORBIDDEN_ORIGIN,
                    f"Origin {origin!r} is not allowed; only the companion's own page "
                    "and the Veil extension may call it",
                )
                return
            allow_origin = origin
        elif origin == "null":
            await _reject(
                send,
                403,
                ErrorCode.FORBIDDEN_ORIGIN,
                "Origin 'null' (a sandboxed page or file://) is not allowed",
            )
            return
        cors = _cors_headers(allow_origin)
        if scope["method"] == "OPTIONS" and allow_origin is not None:
            await send({"type": "http.response.start", "status": 204, "headers": cors})
            await send({"type": "http.response.body", "body": b""})
            return
        principal = PUBLIC
        if path.startswith(TOKEN_PREFIXES):
            denied = self.identify(headers.get("authorization", ""))
            if not isinstance(denied, Principal):
                status, code, reason = denied
                await _reject(send, status, code, reason, extra=cors)
                return
            principal = denied
            if principal.kind == "guest" and (scope["method"], path) not in GUEST_ROUTES:
                await _reject(send, 403, ErrorCode.GUEST_FORBIDDEN, guest_refusal(scope), cors)
                return
        scope[PRINCIPAL] = principal
        upload = path.startswith(UPLOAD_PATHS)
        limit = self.max_upload_bytes if upload else self.max_body_bytes
        over = f"the limit of {limit} bytes ({'max_upload_bytes' if upload else 'max_body_bytes'})"
        if path.startswith("/v1/documents"):
            over += " for one upload, all its files together; upload them in several requests"
        declared = headers.get("content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await _reject(
                    send,
                    400,
                    ErrorCode.INVALID_REQUEST,
                    "Content-Length is not a number",
                    extra=cors,
                )
                return
            if size > limit:
                await _reject(
                    send,
                    413,
                    ErrorCode.PAYLOAD_TOO_LARGE,
                    f"request body of {size} bytes is over {over}",
                    extra=cors,
                )
                return
        if declared is None and scope["method"] in ("POST", "PUT", "PATCH"):
            # No declared length (chunked): read up to the limit first, then replay.
            body = bytearray()
            more = True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                body += message.get("body", b"")
                more = bool(message.get("more_body"))
                if len(body) > limit:
                    await _reject(
                        send,
                        413,
                        ErrorCode.PAYLOAD_TOO_LARGE,
                        f"request body is over {over}",
                        extra=cors,
                    )
                    return
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": bytes(body), "more_body": False}
                return await receive()

            app_receive: Receive = replay
        else:
            app_receive = receive

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start" and cors:
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + cors
            await send(message)

        await self.app(scope, app_receive, send_with_cors)


def guest_refusal(scope: Scope) -> str:
    allowed = ", ".join(f"{m} {p}" for m, p in sorted(GUEST_ROUTES))
    return (
        f"This is a guest key, which may only chat ({allowed}): "
        f"{scope['method']} {scope.get('path', '')} needs the owner's token, the line in "
        "the owner's token file."
    )


def _cors_headers(origin: str | None) -> list[tuple[bytes, bytes]]:
    if origin is None:
        return []
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-headers", b"authorization, content-type"),
        (b"access-control-allow-methods", b"GET, POST, DELETE, OPTIONS"),
        (b"vary", b"Origin"),
    ]


def _error_body(status: int, code: ErrorCode, message: str) -> bytes:
    error = envelope(status, code, message)
    if status == 431:  # a client error the envelope's table does not list
        error["error"]["type"] = "invalid_request_error"
    return json.dumps(error).encode()


async def _reject_websocket(
    scope: Scope, receive: Receive, send: Send, status: int, code: ErrorCode, message: str
) -> None:
    """Refuse a handshake: the HTTP answer where the server offers it, else close 1008."""
    connect = await receive()
    if connect.get("type") != "websocket.connect":
        return  # the client went away
    if "websocket.http.response" in (scope.get("extensions") or {}):
        body = _error_body(status, code, message)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})


async def _reject(
    send: Send,
    status: int,
    code: ErrorCode,
    message: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = _error_body(status, code, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send(
        {"type": "http.response.start", "status": status, "headers": headers + (extra or [])}
    )
    await send({"type": "http.response.body", "body": body})
