"""A Hugging Face hub look-alike on loopback, for ``veil models pull`` tests.

It answers what ``huggingface_hub`` asks, with the headers it reads:

* ``GET /api/models/{owner}/{name}/revision/{rev}`` -> the model's JSON: ``sha`` (the
  commit) and ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs`` with ``sha256``);
* ``HEAD /{owner}/{name}/resolve/{rev}/{file}`` -> ``X-Repo-Commit``, ``ETag`` (the git
  blob id, or for an LFS file its SHA-256), ``X-Linked-Etag`` and ``X-Linked-Size`` for
  LFS files, ``Content-Length``;
* ``GET`` of the same URL -> the bytes, honouring ``Range: bytes=N-`` with a 206.

Faults are set per file on :class:`Hub`: ``drop_after`` (send that many bytes of the
first full-body response, then close the connection), ``fail_ranges`` (answer a
``Range`` request with 503), ``corrupt`` (serve bytes that differ from the listed
SHA-256).  ``requests`` records every (method, path, Range header).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


@dataclass
class Hub:
    repo: str
    files: dict[str, bytes]
    commit: str = COMMIT
    drop_after: dict[str, int] = field(default_factory=dict)
    fail_ranges: set[str] = field(default_factory=set)
    corrupt: set[str] = field(default_factory=set)
    wrong_etag: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    served: dict[str, int] = field(default_factory=dict)  # body bytes sent per file

    @classmethod
    def from_folder(cls, repo: str, folder: Path) -> Hub:
        files = {
            p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }
        return cls(repo, files)

    @staticmethod
    def sha256(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    @staticmethod
    def blob_id(data: bytes) -> str:
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def is_lfs(self, path: str) -> bool:
        return path.endswith(LFS_SUFFIXES)

    def listing(self) -> dict[str, object]:
        siblings = []
        for path, data in self.files.items():
            sibling: dict[str, object] = {
                "rfilename": path,
                "size": len(data),
                "blobId": self.blob_id(data),
            }
            if self.is_lfs(path):
                sibling["lfs"] = {
                    "sha256": self.sha256(data),
                    "size": len(data),
                    "pointerSize": 134,
                }
            siblings.append(sibling)
        return {"id": self.repo, "modelId": self.repo, "sha": self.commit, "siblings": siblings}

    def body(self, path: str) -> bytes:
        data = self.files[path]
        if path in self.corrupt:  # same length, other bytes
            data = bytes(b ^ 0xFF for b in data[:16]) + data[16:]
        return data


def serve(hub: Hub) -> tuple[ThreadingHTTPServer, str]:
    """Start ``hub`` on 127.0.0.1 in a thread; (server, endpoint URL). Call stop(server)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def end_headers(self) -> None:
            # One request per connection: no handler thread outlives the test on keep-alive.
            self.send_header("Connection", "close")
            self.close_connection = True
            super().end_headers()

        def _route(self) -> tuple[str, str | None]:
            """('api', None) | ('file', path) | ('', None)."""
            path = unquote(urlsplit(self.path).path)
            api = f"/api/models/{hub.repo}/revision/"
            if path.startswith(api):
                return "api", None
            prefix = f"/{hub.repo}/resolve/"
            if path.startswith(prefix):
                rest = path[len(prefix) :]
                revision, _, file = rest.partition("/")
                if revision in (hub.commit, "main") and file in hub.files:
                    return "file", file
            return "", None

        def _file_headers(self, file: str, length: int) -> None:
            data = hub.files[file]
            self.send_header("X-Repo-Commit", hub.commit)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(length))
            if hub.is_lfs(file):
                sha = hub.sha256(data) if file not in hub.wrong_etag else "f" * 64
                self.send_header("ETag", f'"{sha}"')
                self.send_header("X-Linked-Etag", f'"{sha}"')
                self.send_header("X-Linked-Size", str(len(data)))
            else:
                self.send_header("ETag", f'"{hub.blob_id(data)}"')

        def do_HEAD(self) -> None:  # http.server's naming
            kind, file = self._route()
            hub.requests.append(("HEAD", self.path, self.headers.get("Range")))
            if kind != "file" or file is None:
                self.send_error(404)
                return
            self.send_response(200)
            self._file_headers(file, len(hub.files[file]))
            self.end_headers()

        def do_GET(self) -> None:
            kind, file = self._route()
            ranged = self.headers.get("Range")
            hub.requests.append(("GET", self.path, ranged))
            if kind == "api":
                payload = json.dumps(hub.listing()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            if kind != "file" or file is None:
                self.send_error(404)
                return
            data = hub.body(file)
            start = 0
            if ranged:
                if file in hub.fail_ranges:
                    self.send_error(503, "try later")
                    return
                start = int(ranged.removeprefix("bytes=").split("-")[0])
            chunk = data[start:]
            self.send_response(206 if ranged else 200)
            self._file_headers(file, len(chunk))
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            cut = hub.drop_after.pop(file, None) if not ranged else None
            if cut is not None:  # the connection breaks part-way through the body
                self.wfile.write(chunk[:cut])
                hub.served[file] = hub.served.get(file, 0) + cut
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(chunk)
            hub.served[file] = hub.served.get(file, 0) + len(chunk)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
