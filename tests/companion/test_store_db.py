"""One SQLite helper (companion/db.py) under every store: settings, migrations, transactions."""

from __future__ import annotations

import sqlite3
import stat

import numpy as np
import pytest

from companion import db
from companion.conversations.store import ConversationStore
from companion.keys import KeyStore, keys_path
from companion.rag.store import DocumentStore
from companion.rag.store.schema import MIGRATIONS, SCHEMA
from py_core.errors import InvalidParameterError


def _settings(conn: sqlite3.Connection) -> tuple[str, int, int, int]:
    return (
        conn.execute("PRAGMA journal_mode").fetchone()[0],
        conn.execute("PRAGMA synchronous").fetchone()[0],
        conn.execute("PRAGMA foreign_keys").fetchone()[0],
        conn.execute("PRAGMA secure_delete").fetchone()[0],
    )


def test_every_store_opens_sqlite_the_same_way(tmp_path):
    """Documents, guest keys and conversations: WAL, synchronous FULL, foreign keys, secure
    delete, files 0600, and their numbered schema version."""
    docs = DocumentStore(tmp_path / "rag.sqlite3", embedding_model="t")
    keys = KeyStore(keys_path(tmp_path))
    convs = ConversationStore(tmp_path / "conversations.sqlite3")
    with keys._connect() as key_conn:
        connections = {"documents": docs._conn, "keys": key_conn, "conversations": convs._db}
        for name, conn in connections.items():
            assert _settings(conn) == ("wal", 2, 1, 1), name
            assert conn.execute("PRAGMA user_version").fetchone()[0] >= 1, name
    assert docs._conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 4
    for file in tmp_path.iterdir():
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file.name
    docs.close()
    keys.close()
    convs.close()


def test_a_store_from_before_numbered_migrations_opens_unchanged(tmp_path):
    """A store of today's shape at user_version 0 (every store written so far) gets version 4,
    with its rows, and a second open changes nothing."""
    path = tmp_path / "rag.sqlite3"
    store = DocumentStore(path, embedding_model="t")
    info, _ = store.add_document(
        "c", "a.txt", b"alpha", "txt", {}, [("alpha", 0, 5)], np.ones((1, 4), np.float32)
    )
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 0")
        tables = conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    again = DocumentStore(path, embedding_model="t")
    assert again._conn.execute("PRAGMA user_version").fetchone()[0] == 4
    assert [d.id for d in again.documents()] == [info.id]
    assert again.lexical_ranking("c", "alpha", 5)[0][0] > 0
    again.close()
    with sqlite3.connect(path) as conn:
        assert (
            conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall() == tables
        )


def test_a_store_of_a_newer_veil_is_refused_unchanged(tmp_path):
    path = tmp_path / "rag.sqlite3"
    DocumentStore(path, embedding_model="t").close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 9")
    with pytest.raises(InvalidParameterError, match="schema version 9, newer"):
        DocumentStore(path, embedding_model="t")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 9


def test_a_failed_migration_leaves_the_store_as_it_was(tmp_path):
    """Each step is one transaction with its version: a failing step changes nothing."""
    conn = db.connect(tmp_path / "x.sqlite3")

    def broken(c: sqlite3.Connection) -> None:
        c.execute("CREATE TABLE half (x)")
        raise sqlite3.OperationalError("database or disk is full")

    steps = (db.Migration(1, "one", lambda c: c.execute("CREATE TABLE one (x)")),)
    db.migrate(conn, steps, label="x")
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        db.migrate(conn, (*steps, db.Migration(2, "broken", broken)), label="x")
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master").fetchall()]
    assert names == ["one"] and conn.execute("PRAGMA user_version").fetchone()[0] == 1
    with pytest.raises(InvalidParameterError, match="numbered"):
        db.migrate(conn, (db.Migration(2, "gap", broken),), label="x")
    conn.close()


def test_a_rollback_never_hides_the_error_that_caused_it(tmp_path):
    """SQLite rolls back by itself after a full disk; the error raised is still the disk's,
    not "cannot rollback - no transaction is active"."""
    conn = db.connect(tmp_path / "x.sqlite3")
    conn.execute("CREATE TABLE t (x)")
    full = pytest.raises(sqlite3.OperationalError, match="database or disk is full")
    with full, db.transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("ROLLBACK")  # what SQLite does on some SQLITE_FULL / SQLITE_IOERR
        raise sqlite3.OperationalError("database or disk is full")
    assert not conn.in_transaction
    with pytest.raises(ValueError, match="boom"), db.transaction(conn):
        conn.execute("INSERT INTO t VALUES (2)")
        raise ValueError("boom")
    assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 0
    conn.close()


def test_a_full_store_fails_whole_and_keeps_what_it_had(tmp_path):
    """A real SQLITE_FULL (max_page_count) in add_document: the error is the disk's, no part
    of the document (nor its new collection) is kept, and it is stored once space returns."""
    store = DocumentStore(tmp_path / "rag.sqlite3", embedding_model="t")
    store.add_document("old", "a.txt", b"a", "txt", {}, [("a", 0, 1)], np.ones((1, 4), np.float32))
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")
    text = "word " * 4000
    chunks = [(text, 0, len(text))] * 20
    with pytest.raises(sqlite3.OperationalError) as caught:
        store.add_document("new", "b.txt", b"b", "txt", {}, chunks, np.ones((20, 4), np.float32))
    assert db.storage_problem(caught.value) == "full"
    assert caught.value.sqlite_errorcode & 0xFF == db.SQLITE_FULL
    assert [c["name"] for c in store.collections()] == ["old"]
    assert store.chunk_count() == 1 and not store._conn.in_transaction
    store._conn.execute("PRAGMA max_page_count = 1073741823")
    info, created = store.add_document(
        "new", "b.txt", b"b", "txt", {}, chunks, np.ones((20, 4), np.float32)
    )
    assert created and info.chunks == 20 and store.chunk_count() == 21
    store.close()


@pytest.mark.parametrize(
    ("error", "problem"),
    [
        (sqlite3.OperationalError("database or disk is full"), "full"),
        (sqlite3.OperationalError("disk I/O error"), "unavailable"),
        (sqlite3.OperationalError("database is locked"), "unavailable"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "unavailable"),
        (OSError(28, "No space left on device"), "full"),
        (OSError(5, "Input/output error"), "unavailable"),
        (sqlite3.OperationalError("no such table: x"), None),
        (sqlite3.IntegrityError("UNIQUE constraint failed"), None),
        (OSError(2, "No such file or directory"), None),
        (ValueError("database or disk is full"), None),
    ],
)
def test_storage_problems_are_told_apart(error, problem):
    assert db.storage_problem(error) == problem


def test_statements_keep_triggers_whole():
    statements = db.statements(SCHEMA)
    triggers = [s for s in statements if s.startswith("CREATE TRIGGER")]
    assert len(triggers) == 2 and all(s.endswith("END;") for s in triggers)
    assert all(sqlite3.complete_statement(s) for s in statements)
