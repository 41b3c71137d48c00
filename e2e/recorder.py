"""The local recorder: serves the fixture pages and records what they send.

Playwright routes the chat sites' origins (``https://chatgpt.com/`` ...) to this
server, so the extension's content scripts run on the real host names while
every byte comes from here. A page "sends" a prompt by POSTing it to
``/__recorder/send`` (JSON) or by submitting a form to ``/__recorder/form``.

The redesigned pages (``/redesign/<name>`` on a chat host, built from
``e2e/fixtures/src/redesign/``) send any way a site does -- JSON, a form-encoded
or multipart body, a beacon, a WebSocket message (Playwright's WebSocket route
hands those to ``add_arrival``) -- to ``/__recorder/raw/<kind>``; every one is
kept as an :class:`Arrival` with its raw body and the text values decoded from it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import default as email_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

# host -> fixture page (the editor that site uses)
FIXTURE_FOR_HOST = {
    "chatgpt.com": "prosemirror",
    "claude.ai": "prosemirror",
    "gemini.google.com": "quill",
    "www.perplexity.ai": "lexical",
    "chat.deepseek.com": "textarea",
    "copilot.microsoft.com": "contenteditable",
}


@dataclass(frozen=True, slots=True)
class Record:
    site: str
    editor: str
    text: str
    via: str
    at: float


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request (or WebSocket message) as it reached the "server"."""

    site: str
    kind: str  # "send", "ping", "ws"
    content_type: str
    raw: str
    values: tuple[str, ...]  # the text values decoded from the body (JSON strings, form fields)
    at: float

    def text(self) -> str:
        """Everything the body says, decoded, one value a line."""
        return "\n".join((self.raw, *self.values))


def _json_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        out = [value]
        with contextlib.suppress(ValueError):  # JSON inside a string
            out += _json_strings(json.loads(value))
        return out
    if isinstance(value, dict):
        return [s for v in value.values() for s in _json_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _json_strings(v)]
    return []


def decode_body(content_type: str, body: bytes) -> tuple[str, ...]:
    """The text values of a body: JSON strings, form fields, multipart parts."""
    ctype = content_type.split(";")[0].strip().lower()
    text = body.decode("utf-8", errors="replace")
    try:
        if ctype == "multipart/form-data":
            message = BytesParser(policy=email_policy).parsebytes(
                b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
            )
            return tuple(str(part.get_content()) for part in message.iter_parts())
        if ctype == "application/x-www-form-urlencoded":
            return tuple(v for vs in parse_qs(text, keep_blank_values=True).values() for v in vs)
        return tuple(_json_strings(json.loads(text)))
    except ValueError:
        return (text,)


class Recorder:
    def __init__(self, fixtures: Path) -> None:
        self.fixtures = fixtures
        self._records: list[Record] = []
        self._arrivals: list[Arrival] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> Recorder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
            self._arrivals.clear()

    def arrivals(self, kind: str | None = None) -> list[Arrival]:
        with self._lock:
            return [a for a in self._arrivals if kind is None or a.kind == kind]

    def add_arrival(self, site: str, kind: str, content_type: str, body: bytes) -> None:
        arrival = Arrival(
            site,
            kind,
            content_type,
            body.decode("utf-8", errors="replace"),
            decode_body(content_type, body),
            time.time(),
        )
        with self._lock:
            self._arrivals.append(arrival)

    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    def add(self, record: Record) -> None:
        with self._lock:
            self._records.append(record)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def _reply(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.send_header("cache-control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                segments = parts.path.split("/")
                if len(segments) >= 3 and segments[1] == "site":
                    host, rest = segments[2], "/" + "/".join(segments[3:])
                    if rest.startswith("/__fixture/"):
                        name = Path(rest).name
                        path = recorder.fixtures / name
                        if name.endswith(".js") and path.is_file():
                            self._reply(200, path.read_bytes(), "text/javascript")
                            return
                    elif rest.startswith("/redesign/"):
                        page = recorder.fixtures / f"redesign-{Path(rest).name}.html"
                        if page.is_file():
                            self._reply(200, page.read_bytes(), "text/html; charset=utf-8")
                            return
                    elif host in FIXTURE_FOR_HOST:
                        page = recorder.fixtures / f"{FIXTURE_FOR_HOST[host]}.html"
                        self._reply(200, page.read_bytes(), "text/html; charset=utf-8")
                        return
                self._reply(404, b"not found", "text/plain")

            def do_POST(self) -> None:
                parts = urlsplit(self.path)
                segments = parts.path.split("/")
                host = segments[2] if len(segments) > 2 else ""
                rest = "/" + "/".join(segments[3:])
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                body = raw.decode("utf-8", errors="replace")
                if rest.startswith("/__recorder/raw/"):
                    kind = rest.rsplit("/", 1)[1]
                    recorder.add_arrival(host, kind, self.headers.get("content-type") or "", raw)
                    self._reply(200, b"{}", "application/json")
                elif rest == "/__recorder/send":
                    data = json.loads(body)
                    recorder.add(
                        Record(data["site"], data["editor"], data["text"], data["via"], time.time())
                    )
                    self._reply(200, b"{}", "application/json")
                elif rest == "/__recorder/form":
                    fields = parse_qs(body, keep_blank_values=True)
                    # A form submission encodes line breaks as CRLF; undo the transport encoding.
                    text = fields.get("prompt", [""])[0].replace("\r\n", "\n")
                    recorder.add(Record(host, "textarea", text, "form", time.time()))
                    self._reply(200, b"<!doctype html><p id=sent>sent</p>", "text/html")
                else:
                    self._reply(404, b"not found", "text/plain")

        return Handler
