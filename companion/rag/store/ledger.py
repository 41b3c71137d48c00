"""The budget ledger of the document store: each content's spend and the append-only log.

A document's spend is keyed by its content (sha256), so it follows the same bytes across
collections and survives deleting and re-adding them; every change to a spend is one row
of ``budget_log``, written in the same transaction (``BEGIN IMMEDIATE``: all or nothing).
:mod:`companion.rag.budget` decides what to charge; this module only keeps the books.

The log keeps no names: a row names its document by id (and content hash), and reading
the log gives the names of the documents that still exist, from their own rows.  So a
deleted document's name leaves the store with the document (deleted means gone, issue
24), while its spend stays with its content hash and its log rows stay as written.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from companion.db import transaction
from companion.rag.store.records import validate_collection_name


class BudgetLedger:
    """The budget tables on the store's connection (and under its lock)."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock) -> None:
        self.conn = conn
        self.lock = lock

    @contextlib.contextmanager
    def transaction(self) -> Iterator[BudgetTransaction]:
        """One write transaction (``BEGIN IMMEDIATE``) over the budget tables: all or nothing."""
        with self.lock, transaction(self.conn):
            yield BudgetTransaction(self.conn)

    def rows(self, collection: str | None = None) -> list[dict[str, Any]]:
        """Every document (of ``collection``) with its spend (0 if never charged)."""
        query = (
            "SELECT d.id AS document_id, d.name AS document, c.name AS collection, d.sha256, "
            "COALESCE(s.spent_rdp, 0.0) AS spent_rdp, COALESCE(s.answers, 0) AS answers, "
            "s.updated AS updated FROM documents d JOIN collections c ON c.id = d.collection_id "
            "LEFT JOIN budget_spend s ON s.sha256 = d.sha256"
        )
        with self.lock:
            if collection is None:
                rows = self.conn.execute(query + " ORDER BY d.id").fetchall()
            else:
                validate_collection_name(collection)
                rows = self.conn.execute(
                    query + " WHERE c.name = ? ORDER BY d.id", (collection,)
                ).fetchall()
        return [dict(r) for r in rows]

    def log(self, limit: int = 100, sha256: str | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` rows of the budget log (of one document's content), newest
        first; ``document`` and ``collection`` are the names of the row's document if it
        still exists, else None (with ``document_deleted`` true)."""
        query = (
            "SELECT l.id, l.ts, l.kind, l.sha256, l.document_id, d.name AS document, "
            "c.name AS collection, l.answer_id, l.charge_rdp, l.spent_before, l.spent_after, "
            "l.detail, (l.document_id IS NOT NULL AND d.id IS NULL) AS document_deleted "
            "FROM budget_log l LEFT JOIN documents d ON d.id = l.document_id "
            "LEFT JOIN collections c ON c.id = d.collection_id"
        )
        with self.lock:
            if sha256 is None:
                rows = self.conn.execute(query + " ORDER BY l.id DESC LIMIT ?", (limit,)).fetchall()
            else:
                rows = self.conn.execute(
                    query + " WHERE l.sha256 = ? ORDER BY l.id DESC LIMIT ?", (sha256, limit)
                ).fetchall()
        return [
            {
                **dict(r),
                "document_deleted": bool(r["document_deleted"]),
                "detail": json.loads(r["detail"]),
            }
            for r in rows
        ]


@dataclass(frozen=True, slots=True)
class BudgetTransaction:
    """The budget tables inside one open write transaction (see ``BudgetLedger.transaction``)."""

    conn: sqlite3.Connection

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))

    def spent(self, shas: Sequence[str]) -> dict[str, tuple[float, int]]:
        """(spent RDP, answers charged) of each content hash (absent: never charged)."""
        result: dict[str, tuple[float, int]] = {}
        for sha in set(shas):
            row = self.conn.execute(
                "SELECT spent_rdp, answers FROM budget_spend WHERE sha256 = ?", (sha,)
            ).fetchone()
            if row is not None:
                result[sha] = (float(row["spent_rdp"]), int(row["answers"]))
        return result

    def document_shas(self, document_ids: Sequence[int]) -> dict[int, sqlite3.Row]:
        rows = {}
        for doc_id in set(document_ids):
            row = self.conn.execute(
                "SELECT d.id, d.name, d.sha256, c.name AS collection FROM documents d "
                "JOIN collections c ON c.id = d.collection_id WHERE d.id = ?",
                (int(doc_id),),
            ).fetchone()
            if row is not None:
                rows[int(doc_id)] = row
        return rows

    def log(self, kind: str, detail: dict[str, Any], **columns: Any) -> int:
        """Append one row.  A ``document`` or ``collection`` name given is not written: the
        row keeps the document's id, and :meth:`BudgetLedger.log` reads the names of the
        documents that still exist (a deleted one's name is then in no file)."""
        columns.pop("document", None)
        columns.pop("collection", None)
        names = ["ts", "kind", "detail", *columns]
        values = [time.time(), kind, json.dumps(detail, sort_keys=True), *columns.values()]
        cur = self.conn.execute(
            f"INSERT INTO budget_log ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
            values,
        )
        return int(cur.lastrowid or 0)

    def set_spent(
        self,
        sha: str,
        *,
        kind: str,
        spent_after: float,
        answers: int,
        detail: dict[str, Any],
        **columns: Any,
    ) -> int:
        """Change one spend and append its log row (same transaction); the log row's id."""
        before = self.spent([sha]).get(sha, (0.0, 0))[0]
        log_id = self.log(
            kind, detail, sha256=sha, spent_before=before, spent_after=spent_after, **columns
        )
        self.conn.execute(
            "INSERT INTO budget_spend (sha256, spent_rdp, answers, last_log_id, updated) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (sha256) DO UPDATE SET "
            "spent_rdp = excluded.spent_rdp, answers = excluded.answers, "
            "last_log_id = excluded.last_log_id, updated = excluded.updated",
            (sha, spent_after, answers, log_id, time.time()),
        )
        return log_id
