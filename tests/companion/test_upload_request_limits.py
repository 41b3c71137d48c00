"""Issue 24, point 5: one upload request may no longer hold up to an hour of ingest.

A request holds at most ``max_upload_files`` files and ``max_upload_bytes`` in all, and
spends at most ``upload_timeout_s`` reading and storing them together; past any of them
it gets 413 naming the limit and saying to upload in several requests, and nothing of it
is kept (files of the request already stored are removed again).
"""

from __future__ import annotations

import time

import psutil
import pytest
from fastapi.testclient import TestClient

from tests.companion.fakes import KeywordEmbedder
from tests.companion.hostile import plain_app, text_bomb_pdf

BASE = "http://127.0.0.1:8765"


def _client(app):
    client = TestClient(app, base_url=BASE)
    client.__enter__()
    client.headers["Authorization"] = f"Bearer {app.state.token}"
    return client


@pytest.fixture
def make_client(tmp_path):
    clients = []

    def make(app=None, **settings):
        client = _client(app if app is not None else plain_app(tmp_path, **settings))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def _files(*named):
    return [("files", (name, data, "text/plain")) for name, data in named]


def _error(r, status=413):
    assert r.status_code == status, r.text
    return r.json()["error"]


def test_more_files_than_max_upload_files_are_refused_before_any_is_read(make_client):
    client = make_client(max_upload_files=2)
    notes = [(f"note{i}.txt", f"gout note {i}".encode()) for i in range(3)]
    started = time.monotonic()
    error = _error(client.post("/v1/documents", files=_files(*notes)))
    assert time.monotonic() - started < 2.0  # no file was read (each read starts a process)
    assert error["code"] == "payload_too_large"
    assert "3 files" in error["message"] and "at most 2" in error["message"]
    assert "max_upload_files" in error["message"] and "several requests" in error["message"]
    assert client.get("/v1/documents").json() == []
    r = client.post("/v1/documents", files=_files(*notes[:2]))  # at the limit: read
    assert r.status_code == 200, r.text
    assert len(client.get("/v1/documents").json()) == 2


def test_an_upload_over_max_upload_bytes_in_all_is_refused_and_says_what_to_do(make_client):
    """Two files under the limit each, over it together: the whole request is refused."""
    client = make_client(max_upload_bytes=100_000)
    big = b"gout " * 12_000  # 60 KB
    error = _error(client.post("/v1/documents", files=_files(("a.txt", big), ("b.txt", big))))
    assert error["code"] == "payload_too_large"
    assert "max_upload_bytes" in error["message"] and "several requests" in error["message"]
    assert client.get("/v1/documents").json() == []


def _parsers() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "parse_worker" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def test_a_file_still_being_read_when_the_request_time_is_spent_is_refused(make_client):
    """A slow file (a PDF that takes many seconds to read) in a request of 1.5 s: 413 naming
    upload_timeout_s (not the file's own parse_timeout_s), the parser killed."""
    client = make_client(
        upload_timeout_s=1.5, max_document_chars=50_000_000, max_compression_ratio=1e9
    )
    started = time.monotonic()
    r = client.post(
        "/v1/documents", files=[("files", ("slow.pdf", text_bomb_pdf(400_000), "application/pdf"))]
    )
    took = time.monotonic() - started
    error = _error(r)
    assert "upload_timeout_s" in error["message"] and "parse_timeout_s" not in error["message"]
    assert "1.5 s" in error["message"] and "several requests" in error["message"]
    assert took < 10, took
    deadline = time.monotonic() + 5
    while _parsers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _parsers()
    assert client.get("/v1/documents").json() == []


class SlowEmbedder(KeywordEmbedder):
    """Half a second for each batch of a text that says 'slow'; the rest at once."""

    def encode(self, texts, **kwargs):
        if any("slow" in t for t in texts):
            time.sleep(0.5)
        return super().encode(texts, **kwargs)


def test_files_already_stored_are_removed_when_the_request_time_runs_out(tmp_path, make_client):
    """The first file is stored, the second's embeddings outlast the request's 5 s: 413, and
    neither file is kept (the person is told nothing was)."""
    from companion.app import create_app
    from companion.settings import Settings

    config = Settings(home=tmp_path, preload_model=False, upload_timeout_s=5.0)
    app = create_app(config, embedder=SlowEmbedder())
    client = make_client(app)
    store = app.state.rag.store
    removed: list[int] = []
    real_delete = store.delete_document
    store.delete_document = lambda doc_id: removed.append(doc_id) or real_delete(doc_id)
    slow = " ".join(f"slow word{i}" for i in range(40_000)).encode()  # ~600 chunks
    started = time.monotonic()
    r = client.post("/v1/documents", files=_files(("fast.txt", b"gout note"), ("slow.txt", slow)))
    took = time.monotonic() - started
    error = _error(r)
    assert "upload_timeout_s" in error["message"] and "nothing of it was kept" in error["message"]
    assert took < 5.0 + 3.0, took
    assert len(removed) == 1  # fast.txt had been stored
    assert client.get("/v1/documents").json() == []
    # an upload within the time is stored as before
    r = client.post("/v1/documents", files=_files(("fast.txt", b"gout note")))
    assert r.status_code == 200 and r.json()["documents"][0]["created"] is True
