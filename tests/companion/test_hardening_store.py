"""Smaller defects of issue 15: reused document ids, a Host check without its port."""

from __future__ import annotations

import sqlite3
import stat

import numpy as np
import pytest

import companion.rag.store.schema as store_module
from companion.rag.store import DocumentStore
from companion.security import host_allowed, parse_host

# The schema before AUTOINCREMENT ids (the budget log keeps its own AUTOINCREMENT).
OLD_SCHEMA = (
    store_module.SCHEMA.replace(
        "id INTEGER PRIMARY KEY AUTOINCREMENT,\n    name", "id INTEGER PRIMARY KEY,\n    name"
    )
    .replace(
        "id INTEGER PRIMARY KEY AUTOINCREMENT,\n    collection_id",
        "id INTEGER PRIMARY KEY,\n    collection_id",
    )
    .replace(
        "id INTEGER PRIMARY KEY AUTOINCREMENT,\n    document_id",
        "id INTEGER PRIMARY KEY,\n    document_id",
    )
)


def _add(store: DocumentStore, name: str, text: str) -> int:
    info, _ = store.add_document(
        "notes", name, text.encode(), "txt", {}, [(text, 0, len(text))], np.ones((1, 4), np.float32)
    )
    return info.id


def _autoincrement(path) -> dict[str, bool]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name: "AUTOINCREMENT" in sql for name, sql in rows}


def test_ids_are_never_reused_after_a_delete(tmp_path):
    """Deleting the newest document and adding another gives a new id (AUTOINCREMENT)."""
    store = DocumentStore(tmp_path / "rag.sqlite3", embedding_model="test")
    first = _add(store, "a.txt", "alpha")
    second = _add(store, "b.txt", "beta")
    assert store.delete_document(second)
    third = _add(store, "c.txt", "gamma")
    assert third > second > first
    assert stat.S_IMODE((tmp_path / "rag.sqlite3").stat().st_mode) == 0o600


def test_an_old_store_is_migrated_with_its_ids_chunks_and_vectors(tmp_path, monkeypatch):
    """A store made without AUTOINCREMENT is rebuilt in place: same ids, rows and search."""
    path = tmp_path / "rag.sqlite3"
    assert OLD_SCHEMA.count("AUTOINCREMENT") == 1
    monkeypatch.setattr(store_module, "SCHEMA", OLD_SCHEMA)
    old = DocumentStore(path, embedding_model="test")
    ids = [_add(old, f"{i}.txt", f"text {i}") for i in range(3)]
    old.delete_document(ids[-1])  # the largest id: an old store would hand it out again
    before = [(d.id, d.name, d.chunks) for d in old.documents()]
    old.close()
    assert _autoincrement(path)["documents"] is False
    with sqlite3.connect(path) as conn:  # a Veil before numbered migrations left version 0
        conn.execute("PRAGMA user_version = 0")
    monkeypatch.undo()
    new = DocumentStore(path, embedding_model="test")
    flags = _autoincrement(path)
    assert flags["documents"] and flags["chunks"] and flags["collections"]
    assert [(d.id, d.name, d.chunks) for d in new.documents()] == before
    hits = new.search("notes", np.ones(4, np.float32), 5)
    assert sorted(h.document_id for h in hits) == ids[:2]
    assert _add(new, "again.txt", "text again") > ids[-1]  # the deleted id is not reused
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    new.close()
    DocumentStore(path, embedding_model="test").close()  # a second open changes nothing


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8765", True),
        ("localhost:8765", True),
        ("[::1]:8765", True),
        ("[0:0:0:0:0:0:0:1]:8765", True),
        ("127.0.0.1:8766", False),  # another port: another server
        ("127.0.0.1", False),  # no port means 80
        ("localhost:08765x", False),
        ("[::1]evil.example", False),
        ("[::1]evil.example:8765", False),
        ("[::1:8765", False),
        ("[not-an-ip]:8765", False),
        ("::1", False),
        ("127.0.0.1:8765:1", False),
        ("127.0.0.1:", False),
        ("127.0.0.1:\u0668\u0667\u0666\u0665", False),  # Arabic-Indic digits
        ("evil.example:8765", False),
        ("", False),
    ],
)
def test_host_is_checked_with_its_port_and_ipv6_strictly(host, allowed):
    """Only a loopback name with the listening port passes; malformed literals never do."""
    assert host_allowed(host, 8765) is allowed


def test_host_without_a_port_passes_only_on_port_80():
    """A Host without a port is port 80."""
    assert host_allowed("localhost", 80) and not host_allowed("localhost", 8765)
    assert parse_host("[::1]") == ("[::1]", None)
