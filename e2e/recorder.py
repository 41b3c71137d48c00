"""The local recorder: serves the fixture pages and records what they send.

Playwright routes the chat sites' origins (``https://chatgpt.com/`` ...) to this
server, so the extension's content scripts run on the real host names while
every byte comes from here. A page "sends" a prompt by POSTing it to
``/__recorder/send`` (JSON) or by submitting a form to ``/__recorder/form``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
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


class Recorder:
    def __init__(self, fixtures: Path) -> None:
        self.fixtures = fixtures
        self._records: list[Record] = []
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
                body = self.rfile.read(length).decode("utf-8")
                if rest == "/__recorder/send":
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
