"""What uvicorn does not limit by itself: how long and how large a request's head may be.

uvicorn has no deadline for a request's headers (its keep-alive timer runs only
between requests, and any byte cancels it, so a client that sends one header line a
minute holds a connection for ever) and its default parser (httptools) takes headers
of any size.  :func:`limited_protocol` wraps the HTTP protocol uvicorn would pick:

* from the moment a connection opens, and again after each response, the next
  request's line and headers must arrive within ``header_timeout_s``; otherwise the
  connection is closed (after a 408 if part of a request came);
* while a head is arriving its bytes are counted before the parser sees them, and
  past ``max_header_bytes`` the client gets 431 and the connection is closed.

The count is of bytes up to the blank line that ends the head, so a body in the same
packet does not count.  :class:`companion.security.SecurityMiddleware` checks the size
of every request's headers again (pipelined requests, test clients).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from companion.errors import ErrorCode, envelope


def _end_of_head(data: bytes) -> int:
    """The offset just past the blank line that ends a request's head, or -1."""
    ends = [i + 4 for i in (data.find(b"\r\n\r\n"),) if i >= 0]
    ends += [i + 2 for i in (data.find(b"\n\n"),) if i >= 0]
    return min(ends) if ends else -1


def _response(status: int, reason: str, message: str) -> bytes:
    error = envelope(status, ErrorCode.INVALID_REQUEST, message)
    error["error"]["type"] = "invalid_request_error"
    body = json.dumps(error).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class HeaderLimits(asyncio.Protocol):
    """A mixin before uvicorn's HTTP protocol class (see :func:`limited_protocol`).

    A request's headers are complete when the protocol starts a new request cycle
    (``self.cycle`` changes): both of uvicorn's parsers do that on the end of a head.
    """

    header_timeout_s: float = 10.0
    max_header_bytes: int = 32_768
    _veil_timer: asyncio.TimerHandle | None = None
    _veil_cycle: Any = None
    _veil_seen = 0  # bytes of the head received so far
    _veil_tail = b""  # its last bytes (a blank line may straddle two reads)

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._veil_arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._veil_disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._veil_timer is not None:  # a head is arriving
            scan = self._veil_tail + data
            end = _end_of_head(scan)
            size = self._veil_seen + (len(data) if end < 0 else end - len(self._veil_tail))
            if size > self.max_header_bytes:
                self._veil_refuse(
                    431,
                    "Request Header Fields Too Large",
                    f"the request's line and headers are over {self.max_header_bytes:,} bytes "
                    "(max_header_bytes); send fewer or shorter headers",
                )
                return
            self._veil_seen += len(data)
            self._veil_tail = scan[-3:]
        super().data_received(data)
        if self._veil_timer is not None and self._veil_headers_done():
            self._veil_disarm()

    def on_response_complete(self) -> None:
        parent: Any = super()
        parent.on_response_complete()
        transport = getattr(self, "transport", None)
        if transport is not None and not transport.is_closing():
            self._veil_arm()

    def _veil_arm(self) -> None:
        self._veil_disarm()
        self._veil_cycle = getattr(self, "cycle", None)
        self._veil_seen = 0
        self._veil_tail = b""
        loop = asyncio.get_running_loop()
        self._veil_timer = loop.call_later(self.header_timeout_s, self._veil_expired)

    def _veil_disarm(self) -> None:
        if self._veil_timer is not None:
            self._veil_timer.cancel()
            self._veil_timer = None

    def _veil_headers_done(self) -> bool:
        return getattr(self, "cycle", None) is not self._veil_cycle

    def _veil_expired(self) -> None:
        self._veil_timer = None
        cycle = getattr(self, "cycle", None)
        if self._veil_headers_done() or (cycle is not None and not cycle.response_complete):
            return  # a request is being answered; the next one is timed after it
        if self._veil_seen:
            self._veil_refuse(
                408,
                "Request Timeout",
                f"the request's headers did not arrive within {self.header_timeout_s:g} s "
                "(header_timeout_s)",
            )
        else:
            self._veil_close()

    def _veil_refuse(self, status: int, reason: str, message: str) -> None:
        transport = getattr(self, "transport", None)
        if transport is not None and not transport.is_closing():
            transport.write(_response(status, reason, message))
        self._veil_close()

    def _veil_close(self) -> None:
        self._veil_disarm()
        transport = getattr(self, "transport", None)
        if transport is not None and not transport.is_closing():
            transport.close()


def limited_protocol(header_timeout_s: float, max_header_bytes: int) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with :class:`HeaderLimits`."""
    base: type[asyncio.Protocol]
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    except ImportError:  # pragma: no cover - uvicorn[standard] installs httptools
        from uvicorn.protocols.http.h11_impl import H11Protocol

        base = H11Protocol
    return type(
        f"Limited{base.__name__}",
        (HeaderLimits, base),
        {"header_timeout_s": header_timeout_s, "max_header_bytes": max_header_bytes},
    )
