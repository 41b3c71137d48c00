"""A full disk or a failing one: 507 (or 503) with what to do, never 500; reads and guests go on;
nothing is lost once space returns (issue 24, point 4)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from companion import db
from companion.app import create_app
from companion.settings import Settings
from tests.companion.fakes import KeywordEmbedder

BASE = "http://127.0.0.1:8765"
GOUT = b"Gout: the doctor prescribed allopurinol 100 mg for gout, gout flares."
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")


def disk_full_error(message: str = "database or disk is full") -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = db.SQLITE_FULL  # type: ignore[attr-defined]
    exc.sqlite_errorname = "SQLITE_FULL"  # type: ignore[attr-defined]
    return exc


class FullDisk:
    """A connection whose every write fails as SQLite's would on a full disk; reads work."""

    def __init__(self, conn: sqlite3.Connection, error: sqlite3.Error | None = None) -> None:
        self._conn = conn
        self._error = error

    def execute(self, sql: str, *args: Any) -> Any:
        words = sql.lstrip().split(None, 1)
        if words and words[0].upper() in WRITES:  # BEGIN writes nothing: it takes a lock
            raise self._error or disk_full_error()
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@contextlib.contextmanager
def _client(home: Path, tiny_folder: Path) -> Iterator[TestClient]:
    torch.set_num_threads(1)
    settings = Settings(home=home, model=str(tiny_folder), preload_model=False)
    app = create_app(settings, embedder=KeywordEmbedder())
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {app.state.token}"
        yield client


def _upload(client: TestClient, name: str, data: bytes) -> Any:
    files = [("files", (name, data, "text/plain"))]
    return client.post("/v1/documents", files=files, data={"collection": "med"})


def _chat(client: TestClient, headers: dict[str, str] | None = None, **extra: Any) -> Any:
    body = {
        "messages": [{"role": "user", "content": "What helps gout?"}],
        "collection": "med",
        "max_tokens": 2,
        **extra,
    }
    return client.post("/v1/chat/completions", json=body, headers=headers)


def _full(response: Any, status: int = 507) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if status == 507:
        assert error["code"] == "storage_full" and "full" in error["message"]
        assert "free some space" in error["message"]
    else:
        assert error["code"] == "storage_unavailable" and response.headers["retry-after"]


def test_every_write_on_a_full_disk_answers_507_and_reads_and_guests_go_on(tiny_folder, tmp_path):
    """Injected SQLITE_FULL in each store: upload, delete, conversations, chat into a
    conversation, a guest's chat (charged to its key first), key creation answer 507;
    lists, search, guest authentication and the owner's answers still work; once space
    returns every write succeeds and nothing is lost."""
    with _client(tmp_path, tiny_folder) as client:
        app: Any = client.app
        assert _upload(client, "gout.txt", GOUT).status_code == 200
        conv_id = client.post("/v1/conversations", json={"title": "Gout"}).json()["id"]
        key = client.post("/v1/keys", json={"collection": "med", "defense": "none"}).json()
        guest = {"Authorization": f"Bearer {key['key']}"}
        assert _chat(client, defense="none").status_code == 200  # the ledger's setup row
        store, convs, keys = app.state.rag.store, app.state.conversations, app.state.keys
        with keys._connect():
            pass
        real = (store._conn, convs._db, keys._conn)
        store_parts = (store, store.vectors, store.lexical, store.ledger)

        def fill() -> None:
            for part in store_parts:
                setattr(part, "_conn" if part is store else "conn", FullDisk(real[0]))
            convs._db, keys._conn = FullDisk(real[1]), FullDisk(real[2])

        def free() -> None:
            for part in store_parts:
                setattr(part, "_conn" if part is store else "conn", real[0])
            convs._db, keys._conn = real[1], real[2]

        fill()
        _full(_upload(client, "asthma.txt", b"Asthma: the salbutamol inhaler for asthma."))
        doc_id = client.get("/v1/documents").json()[0]["id"]
        _full(client.delete(f"/v1/documents/{doc_id}"))
        _full(client.post("/v1/conversations", json={"title": "More"}))
        _full(client.patch(f"/v1/conversations/{conv_id}", json={"title": "Renamed"}))
        _full(client.post("/v1/keys", json={"collection": "med", "defense": "none"}))
        _full(_chat(client, conversation_id=conv_id))
        # streamed into a conversation: the answer arrives, then an event says it was not kept
        streamed = _chat(client, conversation_id=conv_id, stream=True)
        assert streamed.status_code == 200
        events = [x[6:] for x in streamed.text.splitlines() if x.startswith("data: ")]
        assert events[-1] == "[DONE]" and "veil" in json.loads(events[-3])
        assert json.loads(events[-2])["error"]["code"] == "storage_full"
        # reads, guests and answers that store nothing
        assert [d["name"] for d in client.get("/v1/documents").json()] == ["gout.txt"]
        assert client.get(f"/v1/conversations/{conv_id}").json()["title"] == "Gout"
        assert client.get("/v1/keys").status_code == 200
        assert client.post("/v1/search", json={"query": "gout", "collection": "med"}).is_success
        assert client.get("/v1/models", headers=guest).status_code == 200
        # a guest's answer is counted on its key before it is generated: refused, not lost
        _full(_chat(client, headers=guest))
        # the owner's answer under a defense without a formal guarantee: charged to nothing,
        # kept nowhere; under a formal one the documents' budgets are charged first: 507
        assert _chat(client, defense="none").status_code == 200
        _full(_chat(client, defense="bounded"))
        assert client.get("/healthz").status_code == 200

        free()  # space returns: the same requests succeed, and what was there is kept
        assert _upload(client, "asthma.txt", b"Asthma: the salbutamol inhaler.").is_success
        assert client.post("/v1/conversations", json={"title": "More"}).status_code == 201
        assert client.post("/v1/keys", json={"collection": "med", "defense": "none"}).is_success
        assert _chat(client, conversation_id=conv_id).status_code == 200
        assert _chat(client, headers=guest).status_code == 200
        stored = client.get(f"/v1/conversations/{conv_id}").json()
        assert stored["title"] == "Gout" and len(stored["messages"]) == 2
        assert client.delete(f"/v1/documents/{doc_id}").json()["deleted"] is True
        assert [d["name"] for d in client.get("/v1/documents").json()] == ["asthma.txt"]
        assert len(client.get("/v1/keys").json()["data"]) == 2


def test_other_storage_failures_answer_503(tiny_folder, tmp_path):
    """A disk I/O error or a locked database: 503 with Retry-After, never 500."""
    with _client(tmp_path, tiny_folder) as client:
        app: Any = client.app
        convs = app.state.conversations
        real = convs._db
        for error in (
            sqlite3.OperationalError("disk I/O error"),
            sqlite3.OperationalError("database is locked"),
        ):
            convs._db = FullDisk(real, error)
            _full(client.post("/v1/conversations", json={}), 503)
        convs._db = real
        assert client.post("/v1/conversations", json={}).status_code == 201


def test_a_guest_on_a_full_disk_is_still_let_in(tmp_path):
    """Authentication writes last_used at most once a minute and never needs the write."""
    from companion.keys import KeyStore, keys_path

    keys = KeyStore(keys_path(tmp_path))
    key, raw = keys.create(collection="c", defense="none")
    real = keys._conn
    assert real is not None
    keys._conn = FullDisk(real)  # type: ignore[assignment]
    found = keys.authenticate(raw)
    assert found is not None and found.id == key.id and found.last_used is None
    keys._conn = real
    first = keys.authenticate(raw)
    assert first is not None and first.last_used is not None
    keys._conn = FullDisk(real)  # type: ignore[assignment]
    again = keys.authenticate(raw)  # within a minute: no write tried at all
    assert again is not None and again.last_used == first.last_used
    keys._conn = FullDisk(real, sqlite3.OperationalError("no such table: guest_keys"))  # type: ignore[assignment]
    with pytest.raises(sqlite3.OperationalError):  # not a storage problem: not swallowed
        keys._touch(key)
    keys._conn = real
    keys.close()


# --------------------------------------------------------------- a real full disk
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs as the companion's home (skipped where mounting is not allowed)."""
    home = tmp_path / "home"
    home.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(home)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount is not permitted here: {mounted.stderr.strip()}")
    try:
        yield home
    finally:
        if subprocess.run(["umount", str(home)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(home)], capture_output=True)


def _fill(folder: Path) -> Path:
    """Write a filler file until the disk is full; the filler."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_real_full_disk(tiny_folder, small_disk):
    """VEIL_HOME on a full 2 MB tmpfs: writes answer 507, reads and guests work, and once
    the filler is removed the same writes succeed with everything from before kept."""
    with _client(small_disk, tiny_folder) as client:
        assert _upload(client, "gout.txt", GOUT).status_code == 200
        conv_id = client.post("/v1/conversations", json={"title": "Gout"}).json()["id"]
        key = client.post("/v1/keys", json={"collection": "med", "defense": "none"}).json()
        guest = {"Authorization": f"Bearer {key['key']}"}
        assert _chat(client, defense="none").status_code == 200  # the ledger's setup row
        filler = _fill(small_disk)
        statuses = {
            "upload": _upload(client, "big.txt", b"gout asthma fever cats. " * 20_000),
            "conversation": client.post("/v1/conversations", json={"title": "x" * 200}),
            "chat into a conversation": _chat(client, conversation_id=conv_id),
            "guest chat": _chat(client, headers=guest),
            "key": client.post("/v1/keys", json={"collection": "med", "defense": "none"}),
            "guest authentication": client.get("/v1/models", headers=guest),
            "owner chat, defense none": _chat(client, defense="none"),
            "list documents": client.get("/v1/documents"),
        }
        codes = {name: r.status_code for name, r in statuses.items()}
        print(f"on a full disk: {codes}")
        assert 500 not in codes.values(), {n: r.text for n, r in statuses.items()}
        for response in statuses.values():
            if response.status_code != 201 and response.status_code != 200:
                _full(response)
        assert codes["upload"] == 507
        assert codes["guest authentication"] == codes["list documents"] == 200
        assert codes["owner chat, defense none"] == 200  # an answer that stores nothing
        assert client.get(f"/v1/conversations/{conv_id}").status_code == 200
        assert client.get("/v1/models", headers=guest).status_code == 200
        assert client.get("/healthz").status_code == 200
        filler.unlink()
        assert _upload(client, "asthma.txt", b"Asthma: the salbutamol inhaler.").is_success
        assert client.post("/v1/conversations", json={"title": "After"}).status_code == 201
        assert client.post("/v1/keys", json={"collection": "med", "defense": "none"}).is_success
        names = sorted(d["name"] for d in client.get("/v1/documents").json())
        assert names[0] == "asthma.txt" and "gout.txt" in names
        assert client.get(f"/v1/conversations/{conv_id}").json()["title"] == "Gout"
