"""The document store's tables and its numbered migrations (:func:`companion.db.migrate`).

A store written before numbered migrations has ``user_version`` 0 and any of the shapes
Veil has written, so each step accepts all of them: 001 makes what is missing, 002 gives
the tables of a store made before AUTOINCREMENT ids their AUTOINCREMENT (ids kept), 003
adds the ``page`` and ``heading`` columns of page-aware chunks.  The lexical index is
not a migration: its tokenizer is a setting (:mod:`companion.rag.store.lexical`).
"""

from __future__ import annotations

import sqlite3

from companion.db import Migration, run_script

SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    kind TEXT NOT NULL,
    size INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    created REAL NOT NULL,
    UNIQUE (collection_id, sha256)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    text TEXT NOT NULL,
    start INTEGER NOT NULL,
    "end" INTEGER NOT NULL,
    page INTEGER,
    heading TEXT
);
CREATE TABLE IF NOT EXISTS vectors (
    chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
    dim INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_document ON chunks(document_id);
CREATE INDEX IF NOT EXISTS documents_collection ON documents(collection_id);
-- The per-document privacy budget (companion/rag/budget.py).  A document's spend is
-- keyed by its content (sha256), so it follows the same bytes across collections
-- and survives deleting and re-adding them; every change to a spend is one row of
-- the append-only log, written in the same transaction.
CREATE TABLE IF NOT EXISTS budget_spend (
    sha256 TEXT PRIMARY KEY,
    spent_rdp REAL NOT NULL CHECK (spent_rdp >= 0),
    answers INTEGER NOT NULL CHECK (answers >= 0),
    last_log_id INTEGER NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS budget_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('setup', 'charge', 'reset')),
    sha256 TEXT,
    document_id INTEGER,
    document TEXT,  -- unused since migration 004: names are read from documents
    collection TEXT,  -- unused since migration 004
    answer_id TEXT,
    charge_rdp REAL,
    spent_before REAL,
    spent_after REAL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS budget_log_sha ON budget_log(sha256);
CREATE TRIGGER IF NOT EXISTS budget_log_no_update BEFORE UPDATE ON budget_log
BEGIN SELECT RAISE(ABORT, 'the budget log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS budget_log_no_delete BEFORE DELETE ON budget_log
BEGIN SELECT RAISE(ABORT, 'the budget log is append-only'); END;
"""

# How far ids jump at the AUTOINCREMENT migration (more than were ever deleted, in practice).
_MIGRATION_MARGIN = {"collections": 1000, "documents": 1000, "chunks": 1_000_000}


def _tables(conn: sqlite3.Connection) -> None:
    """001: every table, index and trigger that is missing."""
    run_script(conn, SCHEMA)


def _autoincrement(conn: sqlite3.Connection) -> None:
    """002: a store made before AUTOINCREMENT ids gets its AUTOINCREMENT tables, ids kept.

    Without AUTOINCREMENT SQLite reuses the largest id after a delete, so a stale page
    could delete the wrong document.  Each table is rebuilt the way SQLite's
    documentation prescribes (foreign keys off, copy, drop, rename, check: the
    migration's ``foreign_keys_off``).
    """
    tables = [
        name
        for name in ("collections", "documents", "chunks")
        if "AUTOINCREMENT"
        not in conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        )
        .fetchone()["sql"]
        .upper()
    ]
    for name in tables:
        create = SCHEMA.split(f"CREATE TABLE IF NOT EXISTS {name} (", 1)[1]
        create = create.split("\n);", 1)[0]
        columns = [r["name"] for r in conn.execute(f"PRAGMA table_info({name})").fetchall()]
        listed = ", ".join(f'"{c}"' for c in columns)
        conn.execute(f"CREATE TABLE {name}__autoinc ({create}\n)")
        conn.execute(f"INSERT INTO {name}__autoinc ({listed}) SELECT {listed} FROM {name}")
        conn.execute(f"DROP TABLE {name}")
        conn.execute(f"ALTER TABLE {name}__autoinc RENAME TO {name}")
        # Ids deleted before the migration above the largest kept one are unknown:
        # continue after a margin, so none of them is handed out again.
        top = conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {name}").fetchone()
        seq = int(top[0]) + _MIGRATION_MARGIN[name]
        conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", (name,))
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, seq))
    if tables:
        run_script(conn, SCHEMA)  # the indexes dropped with the old tables


def _chunk_pages(conn: sqlite3.Connection) -> None:
    """003: a store made before page-aware chunks gets the ``page`` and ``heading`` columns.

    Old chunks keep NULL there (their citations show no page); re-ingesting a document
    gives it pages and headings.
    """
    have = {r["name"] for r in conn.execute("PRAGMA table_info(chunks)").fetchall()}
    for column, kind in (("page", "INTEGER"), ("heading", "TEXT")):
        if column not in have:
            conn.execute(f"ALTER TABLE chunks ADD COLUMN {column} {kind}")


def _log_names(conn: sqlite3.Connection) -> None:
    """004: the budget log keeps no names (companion/rag/store/ledger.py): the names its
    rows were written with are cleared -- the names of documents deleted before it too.

    Only ``document`` and ``collection`` change (the accounting columns are as written);
    the no-update trigger is lifted for this one statement, inside the migration's
    transaction, and ``secure_delete`` zeroes the old rows' bytes."""
    conn.execute("DROP TRIGGER IF EXISTS budget_log_no_update")
    conn.execute(
        "UPDATE budget_log SET document = NULL, collection = NULL "
        "WHERE document IS NOT NULL OR collection IS NOT NULL"
    )
    run_script(conn, SCHEMA)  # the trigger again


MIGRATIONS = (
    Migration(1, "tables", _tables),
    Migration(2, "autoincrement_ids", _autoincrement, foreign_keys_off=True),
    Migration(3, "chunk_pages", _chunk_pages),
    Migration(4, "budget_log_names", _log_names),
)
