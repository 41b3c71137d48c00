"""A persistent document store in SQLite: collections, documents, chunks, vectors.

Vectors are float32 blobs, L2-normalised on insert, so cosine similarity is a
dot product; search is exact (every chunk of the collection is scored) with a
per-collection matrix cached in memory and dropped on every write.  One
connection guarded by a lock: the API calls the store from worker threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from py_core.errors import InvalidParameterError

SCHEMA = """
PRAGMA foreign_keys = ON;
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
    "end" INTEGER NOT NULL
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
    document TEXT,
    collection TEXT,
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


def _private(path: Path) -> None:
    """The store and its WAL files are the person's alone (0600), whatever the umask."""
    for suffix in ("", "-wal", "-shm"):
        file = path.with_name(path.name + suffix)
        if file.exists():
            os.chmod(file, 0o600)


_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def validate_collection_name(name: str) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 64 or set(name) - _NAME_OK:
        raise InvalidParameterError(
            f"collection name must be 1-64 characters of letters, digits, '-', '_' or '.'; "
            f"got {name!r}"
        )
    return name


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    id: int
    collection: str
    name: str
    sha256: str
    kind: str
    size: int
    chunks: int
    metadata: dict[str, Any]
    created: float


@dataclass(frozen=True, slots=True)
class Hit:
    chunk_id: int
    document_id: int
    document: str
    collection: str
    index: int
    text: str
    start: int
    end: int
    score: float


@dataclass
class _Matrix:
    ids: np.ndarray
    vectors: np.ndarray


@dataclass
class DocumentStore:
    path: Path
    embedding_model: str = "all-MiniLM-L6-v2"
    _conn: sqlite3.Connection = field(init=False, repr=False)
    _lock: threading.RLock = field(init=False, repr=False, default_factory=threading.RLock)
    _cache: dict[str, _Matrix] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        with self._lock:
            self._conn.execute("PRAGMA journal_mode = WAL")
            # Budget charges must survive a power cut, not only a killed process.
            self._conn.execute("PRAGMA synchronous = FULL")
            self._conn.executescript(SCHEMA)
            self._migrate_autoincrement()
            row = self._conn.execute(
                "SELECT value FROM meta WHERE key = 'embedding_model'"
            ).fetchone()
            if row is None:
                self._conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('embedding_model', ?)",
                    (self.embedding_model,),
                )
            elif row["value"] != self.embedding_model:
                raise InvalidParameterError(
                    f"the store {self.path} holds vectors of {row['value']!r}, not "
                    f"{self.embedding_model!r}; use another store path or re-ingest"
                )
        _private(self.path)

    def _migrate_autoincrement(self) -> None:
        """Give a store made before AUTOINCREMENT ids its AUTOINCREMENT tables, ids kept.

        Without AUTOINCREMENT SQLite reuses the largest id after a delete, so a stale
        page could delete the wrong document.  Each table is rebuilt the way SQLite's
        documentation prescribes (foreign keys off, copy, drop, rename, check).
        """
        tables = [
            name
            for name in ("collections", "documents", "chunks")
            if "AUTOINCREMENT"
            not in self._conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
            )
            .fetchone()["sql"]
            .upper()
        ]
        if not tables:
            return
        self._conn.execute("PRAGMA foreign_keys = OFF")
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            for name in tables:
                create = SCHEMA.split(f"CREATE TABLE IF NOT EXISTS {name} (", 1)[1]
                create = create.split("\n);", 1)[0]
                columns = [
                    r["name"] for r in self._conn.execute(f"PRAGMA table_info({name})").fetchall()
                ]
                listed = ", ".join(f'"{c}"' for c in columns)
                self._conn.execute(f"CREATE TABLE {name}__autoinc ({create}\n)")
                self._conn.execute(
                    f"INSERT INTO {name}__autoinc ({listed}) SELECT {listed} FROM {name}"
                )
                self._conn.execute(f"DROP TABLE {name}")
                self._conn.execute(f"ALTER TABLE {name}__autoinc RENAME TO {name}")
                # Ids deleted before the migration above the largest kept one are unknown:
                # continue after a margin, so none of them is handed out again.
                top = self._conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {name}").fetchone()
                seq = int(top[0]) + _MIGRATION_MARGIN[name]
                self._conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", (name,))
                self._conn.execute(
                    "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, seq)
                )
            problems = self._conn.execute("PRAGMA foreign_key_check").fetchall()
            if problems:
                raise InvalidParameterError(
                    f"the store {self.path} has {len(problems)} broken references; "
                    "it was left unchanged"
                )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        finally:
            self._conn.execute("PRAGMA foreign_keys = ON")
        self._conn.executescript(SCHEMA)  # the indexes dropped with the old tables

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -------------------------------------------------------------- collections
    def _collection_id(self, name: str, *, create: bool) -> int | None:
        validate_collection_name(name)
        row = self._conn.execute("SELECT id FROM collections WHERE name = ?", (name,)).fetchone()
        if row is not None:
            return int(row["id"])
        if not create:
            return None
        cur = self._conn.execute(
            "INSERT INTO collections (name, created) VALUES (?, ?)", (name, time.time())
        )
        return int(cur.lastrowid or 0)

    def collections(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT c.name, c.created, COUNT(d.id) AS documents FROM collections c "
                "LEFT JOIN documents d ON d.collection_id = c.id GROUP BY c.id ORDER BY c.name"
            ).fetchall()
        return [dict(r) for r in rows]

    def delete_collection(self, name: str) -> bool:
        with self._lock:
            cid = self._collection_id(name, create=False)
            if cid is None:
                return False
            self._conn.execute("DELETE FROM collections WHERE id = ?", (cid,))
            self._cache.pop(name, None)
            return True

    # ---------------------------------------------------------------- documents
    def add_document(
        self,
        collection: str,
        name: str,
        data: bytes,
        kind: str,
        metadata: dict[str, Any],
        chunks: Sequence[tuple[str, int, int]],
        vectors: np.ndarray,
    ) -> tuple[DocumentInfo, bool]:
        """Store a document with its chunks and vectors; (info, created).

        The same bytes already in the collection are not stored twice: the
        existing document is returned with ``created=False``.
        """
        if len(chunks) != len(vectors):
            raise InvalidParameterError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        digest = hashlib.sha256(data).hexdigest()
        vecs = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.maximum(norms, 1e-12)
        with self._lock:
            cid = self._collection_id(collection, create=True)
            existing = self._conn.execute(
                "SELECT id FROM documents WHERE collection_id = ? AND sha256 = ?", (cid, digest)
            ).fetchone()
            if existing is not None:
                info = self.document(int(existing["id"]))
                assert info is not None
                return info, False
            self._conn.execute("BEGIN")
            try:
                cur = self._conn.execute(
                    "INSERT INTO documents (collection_id, name, sha256, kind, size, metadata, "
                    "created) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (cid, name, digest, kind, len(data), json.dumps(metadata), time.time()),
                )
                doc_id = int(cur.lastrowid or 0)
                for i, ((text, start, end), vec) in enumerate(zip(chunks, vecs, strict=True)):
                    ccur = self._conn.execute(
                        'INSERT INTO chunks (document_id, idx, text, start, "end") '
                        "VALUES (?, ?, ?, ?, ?)",
                        (doc_id, i, text, start, end),
                    )
                    self._conn.execute(
                        "INSERT INTO vectors (chunk_id, dim, data) VALUES (?, ?, ?)",
                        (int(ccur.lastrowid or 0), int(vec.shape[0]), vec.tobytes()),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._cache.pop(collection, None)
            info = self.document(doc_id)
            assert info is not None
            return info, True

    def _info(self, row: sqlite3.Row) -> DocumentInfo:
        return DocumentInfo(
            id=int(row["id"]),
            collection=row["collection"],
            name=row["name"],
            sha256=row["sha256"],
            kind=row["kind"],
            size=int(row["size"]),
            chunks=int(row["chunks"]),
            metadata=json.loads(row["metadata"]),
            created=float(row["created"]),
        )

    _DOC_QUERY = (
        "SELECT d.*, c.name AS collection, (SELECT COUNT(*) FROM chunks k "
        "WHERE k.document_id = d.id) AS chunks FROM documents d "
        "JOIN collections c ON c.id = d.collection_id"
    )

    def document(self, doc_id: int) -> DocumentInfo | None:
        with self._lock:
            row = self._conn.execute(self._DOC_QUERY + " WHERE d.id = ?", (doc_id,)).fetchone()
        return None if row is None else self._info(row)

    def documents(self, collection: str | None = None) -> list[DocumentInfo]:
        with self._lock:
            if collection is None:
                rows = self._conn.execute(self._DOC_QUERY + " ORDER BY d.id").fetchall()
            else:
                validate_collection_name(collection)
                rows = self._conn.execute(
                    self._DOC_QUERY + " WHERE c.name = ? ORDER BY d.id", (collection,)
                ).fetchall()
        return [self._info(r) for r in rows]

    def document_count(self) -> int:
        """How many documents the store holds (cheap: for /healthz)."""
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def delete_document(self, doc_id: int) -> bool:
        with self._lock:
            info = self.document(doc_id)
            if info is None:
                return False
            self._conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
            self._cache.pop(info.collection, None)
            return True

    def chunk_count(self, collection: str | None = None) -> int:
        with self._lock:
            if collection is None:
                return int(self._conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
            return int(
                self._conn.execute(
                    "SELECT COUNT(*) FROM chunks k JOIN documents d ON d.id = k.document_id "
                    "JOIN collections c ON c.id = d.collection_id WHERE c.name = ?",
                    (collection,),
                ).fetchone()[0]
            )

    # ------------------------------------------------------------------- search
    def _matrix(self, collection: str) -> _Matrix:
        cached = self._cache.get(collection)
        if cached is not None:
            return cached
        rows = self._conn.execute(
            "SELECT v.chunk_id, v.dim, v.data FROM vectors v JOIN chunks k ON k.id = v.chunk_id "
            "JOIN documents d ON d.id = k.document_id JOIN collections c "
            "ON c.id = d.collection_id WHERE c.name = ? ORDER BY v.chunk_id",
            (collection,),
        ).fetchall()
        if rows:
            ids = np.array([r["chunk_id"] for r in rows], dtype=np.int64)
            mat = np.stack([np.frombuffer(r["data"], dtype=np.float32) for r in rows])
        else:
            ids, mat = np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        matrix = _Matrix(ids, mat)
        self._cache[collection] = matrix
        return matrix

    def search(self, collection: str, query: np.ndarray, k: int = 4) -> list[Hit]:
        """Exact cosine top-``k`` chunks of ``collection`` for the query vector."""
        if k < 1:
            raise InvalidParameterError(f"top_k must be >= 1; got {k!r}")
        return self._ranked(collection, query, k=k)

    # ------------------------------------------------------------------- budget
    def scored_chunks(self, collection: str, query: np.ndarray, min_score: float) -> list[Hit]:
        """Every chunk of ``collection`` whose cosine score is >= ``min_score``, best first."""
        return self._ranked(collection, query, min_score=min_score)

    def _ranked(
        self,
        collection: str,
        query: np.ndarray,
        *,
        k: int | None = None,
        min_score: float | None = None,
    ) -> list[Hit]:
        """Chunks by exact cosine score, best first: the top ``k`` and/or those >= ``min_score``."""
        validate_collection_name(collection)
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        with self._lock:
            matrix = self._matrix(collection)
            if matrix.ids.size == 0:
                return []
            if matrix.vectors.shape[1] != q.shape[0]:
                raise InvalidParameterError(
                    f"query has {q.shape[0]} dimensions, the store {matrix.vectors.shape[1]}"
                )
            scores = matrix.vectors @ q
            order = [int(i) for i in np.argsort(-scores, kind="stable")[:k]]
            if min_score is not None:
                order = [i for i in order if scores[i] >= min_score]
            hits = []
            for i in order:
                row = self._conn.execute(
                    'SELECT k.id, k.document_id, k.idx, k.text, k.start, k."end", d.name '
                    "FROM chunks k JOIN documents d ON d.id = k.document_id WHERE k.id = ?",
                    (int(matrix.ids[i]),),
                ).fetchone()
                hits.append(
                    Hit(
                        chunk_id=int(row["id"]),
                        document_id=int(row["document_id"]),
                        document=row["name"],
                        collection=collection,
                        index=int(row["idx"]),
                        text=row["text"],
                        start=int(row["start"]),
                        end=int(row["end"]),
                        score=float(scores[i]),
                    )
                )
        return hits

    @contextlib.contextmanager
    def budget_transaction(self) -> Iterator[BudgetTransaction]:
        """One write transaction (``BEGIN IMMEDIATE``) over the budget tables: all or nothing."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield BudgetTransaction(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def budget_rows(self, collection: str | None = None) -> list[dict[str, Any]]:
        """Every document (of ``collection``) with its spend (0 if never charged)."""
        query = (
            "SELECT d.id AS document_id, d.name AS document, c.name AS collection, d.sha256, "
            "COALESCE(s.spent_rdp, 0.0) AS spent_rdp, COALESCE(s.answers, 0) AS answers, "
            "s.updated AS updated FROM documents d JOIN collections c ON c.id = d.collection_id "
            "LEFT JOIN budget_spend s ON s.sha256 = d.sha256"
        )
        with self._lock:
            if collection is None:
                rows = self._conn.execute(query + " ORDER BY d.id").fetchall()
            else:
                validate_collection_name(collection)
                rows = self._conn.execute(
                    query + " WHERE c.name = ? ORDER BY d.id", (collection,)
                ).fetchall()
        return [dict(r) for r in rows]

    def budget_log(self, limit: int = 100, sha256: str | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` rows of the budget log (of one document's content), newest first."""
        with self._lock:
            if sha256 is None:
                rows = self._conn.execute(
                    "SELECT * FROM budget_log ORDER BY id DESC LIMIT ?", (limit,)
                ).fetchall()
            else:
                rows = self._conn.execute(
                    "SELECT * FROM budget_log WHERE sha256 = ? ORDER BY id DESC LIMIT ?",
                    (sha256, limit),
                ).fetchall()
        return [{**dict(r), "detail": json.loads(r["detail"])} for r in rows]


@dataclass(frozen=True, slots=True)
class BudgetTransaction:
    """The budget tables inside one open write transaction (see ``budget_transaction``)."""

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
