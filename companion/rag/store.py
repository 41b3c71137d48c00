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

from companion.rag.index import SCORED_CANDIDATES, ExactIndex, IvfIndex, VectorIndex
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


# The lexical index (SQLite FTS5, BM25): an external-content table over chunks(text,
# heading) kept in sync by triggers -- foreign-key cascades (a deleted document or
# collection) fire them too.  Made after the migrations above, which rebuild `chunks`.
FTS_TOKENIZERS = {
    # Words of letters and digits in any script, diacritics folded: an e-mail address or
    # an id becomes a run of tokens that a phrase query matches in order.
    "unicode61": "unicode61 remove_diacritics 2",
    # Every 3-character substring: matches inside words (stems, glued ids), bigger index.
    "trigram": "trigram",
    # English stemming on top of unicode61.
    "porter": "porter unicode61 remove_diacritics 2",
}
DEFAULT_FTS_TOKENIZER = "unicode61"
FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, heading, content='chunks', content_rowid='id', tokenize='{tokenize}'
);
CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text, heading) VALUES (new.id, new.text, new.heading);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, heading)
    VALUES ('delete', old.id, old.text, old.heading);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_update AFTER UPDATE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, heading)
    VALUES ('delete', old.id, old.text, old.heading);
    INSERT INTO chunks_fts (rowid, text, heading) VALUES (new.id, new.text, new.heading);
END;
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
    score: float  # exact cosine similarity of the chunk's vector and the query's
    page: int | None = None  # 1-based page of a PDF (None: the format has no pages)
    heading: str | None = None  # "Title > Section > Subsection" (None: no heading)
    # How the hybrid retrieval found it (companion/rag/retrieval.py): 1-based ranks in the
    # vector and the BM25 rankings (None: not among that ranking's candidates), the fused
    # score that ordered the result, and the raw BM25 score (higher is better).
    vector_rank: int | None = None
    lexical_rank: int | None = None
    fused: float | None = None
    bm25: float | None = None
    names_identifier: bool = False  # has an e-mail address / number the question names


ChunkRow = tuple[str, int, int] | tuple[str, int, int, int | None, str | None]


@dataclass
class DocumentStore:
    path: Path
    embedding_model: str = "all-MiniLM-L6-v2"
    fts_tokenizer: str = DEFAULT_FTS_TOKENIZER
    # Collections of at least this many chunks are searched through an approximate
    # index (companion/rag/index.py) with exact re-scoring; smaller ones exactly.
    ann_min_chunks: int = 50_000
    _conn: sqlite3.Connection = field(init=False, repr=False)
    _lock: threading.RLock = field(init=False, repr=False, default_factory=threading.RLock)
    _cache: dict[str, VectorIndex] = field(init=False, repr=False, default_factory=dict)
    _unsaved: set[str] = field(init=False, repr=False, default_factory=set)

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
            self._migrate_columns()
            self._ensure_fts()
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

    def _migrate_columns(self) -> None:
        """Give a store made before page-aware chunks the ``page`` and ``heading`` columns.

        Old chunks keep NULL there (their citations show no page); re-ingesting a
        document gives it pages and headings.
        """
        have = {r["name"] for r in self._conn.execute("PRAGMA table_info(chunks)").fetchall()}
        for column, kind in (("page", "INTEGER"), ("heading", "TEXT")):
            if column not in have:
                self._conn.execute(f"ALTER TABLE chunks ADD COLUMN {column} {kind}")

    def _ensure_fts(self) -> None:
        """The FTS5 index over the chunks, made (and filled from them) when missing.

        The tokenizer is fixed when the index is made; another one asked for rebuilds it.
        """
        if self.fts_tokenizer not in FTS_TOKENIZERS:
            raise InvalidParameterError(
                f"unknown FTS tokenizer {self.fts_tokenizer!r}; one of "
                + ", ".join(sorted(FTS_TOKENIZERS))
            )
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'fts_tokenizer'").fetchone()
        exists = self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chunks_fts'"
        ).fetchone()
        if exists is not None and (row is None or row["value"] != self.fts_tokenizer):
            self._conn.execute("DROP TABLE chunks_fts")
            exists = None
        self._conn.executescript(
            FTS_SCHEMA.format(tokenize=FTS_TOKENIZERS[self.fts_tokenizer])
        )  # the triggers too: a rebuilt chunks table lost them
        if exists is None:
            self._conn.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild')")
            self._conn.execute(
                "INSERT INTO meta (key, value) VALUES ('fts_tokenizer', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (self.fts_tokenizer,),
            )

    def close(self) -> None:
        with self._lock:
            self.save_indexes()
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
            self._unsaved.discard(name)
            self._drop_saved(name)
            return True

    # ---------------------------------------------------------------- documents
    def add_document(
        self,
        collection: str,
        name: str,
        data: bytes,
        kind: str,
        metadata: dict[str, Any],
        chunks: Sequence[ChunkRow],
        vectors: np.ndarray,
    ) -> tuple[DocumentInfo, bool]:
        """Store a document with its chunks and vectors; (info, created).

        A chunk is ``(text, start, end)`` or ``(text, start, end, page, heading)``.

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
                chunk_ids = []
                for i, (chunk, vec) in enumerate(zip(chunks, vecs, strict=True)):
                    text, start, end = chunk[:3]
                    page, heading = (chunk[3], chunk[4]) if len(chunk) == 5 else (None, None)
                    ccur = self._conn.execute(
                        'INSERT INTO chunks (document_id, idx, text, start, "end", page, '
                        "heading) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (doc_id, i, text, start, end, page, heading),
                    )
                    chunk_ids.append(int(ccur.lastrowid or 0))
                    self._conn.execute(
                        "INSERT INTO vectors (chunk_id, dim, data) VALUES (?, ?, ?)",
                        (chunk_ids[-1], int(vec.shape[0]), vec.tobytes()),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._index_added(collection, np.asarray(chunk_ids, np.int64), vecs)
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
            ids = [
                int(r[0])
                for r in self._conn.execute(
                    "SELECT id FROM chunks WHERE document_id = ?", (doc_id,)
                ).fetchall()
            ]
            self._conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
            self._index_removed(info.collection, np.asarray(ids, np.int64))
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
    def _index(self, collection: str) -> VectorIndex:
        """The collection's vector index: exact below ``ann_min_chunks``, else IVF (cached)."""
        cached = self._cache.get(collection)
        if cached is not None:
            return cached
        count = self.chunk_count(collection)
        index: VectorIndex
        if count >= self.ann_min_chunks:
            loaded = self._load_ivf(collection)
            if loaded is None:
                index = IvfIndex.build(count, lambda: self._vector_batches(collection))
                self._unsaved.add(collection)
            else:
                index = loaded
        else:
            ids, mat = [], []
            for batch_ids, batch in self._vector_batches(collection):
                ids.append(batch_ids)
                mat.append(batch)
            index = ExactIndex(
                np.concatenate(ids) if ids else np.zeros(0, np.int64),
                np.concatenate(mat) if mat else np.zeros((0, 0), np.float32),
            )
        self._cache[collection] = index
        return index

    def _vector_batches(
        self, collection: str, batch: int = 50_000
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The collection's (chunk ids, float32 vectors), in id order, ``batch`` rows at a time."""
        last = 0
        while True:
            rows = self._conn.execute(
                "SELECT v.chunk_id, v.data FROM vectors v JOIN chunks k ON k.id = v.chunk_id "
                "JOIN documents d ON d.id = k.document_id JOIN collections c "
                "ON c.id = d.collection_id WHERE c.name = ? AND v.chunk_id > ? "
                "ORDER BY v.chunk_id LIMIT ?",
                (collection, last, batch),
            ).fetchall()
            if not rows:
                return
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
            yield ids, vecs.reshape(len(rows), -1)
            last = int(ids[-1])

    def _index_added(self, collection: str, ids: np.ndarray, vecs: np.ndarray) -> None:
        self._drop_saved(collection)
        index = self._cache.get(collection)
        if index is not None and not index.add(ids, vecs):
            self._cache.pop(collection, None)
        elif index is not None:
            self._unsaved.add(collection)

    def _index_removed(self, collection: str, ids: np.ndarray) -> None:
        self._drop_saved(collection)
        index = self._cache.get(collection)
        if index is not None and not index.remove(ids):
            self._cache.pop(collection, None)
        elif index is not None:
            self._unsaved.add(collection)

    # The approximate index on disk: <store>.ivf/<collection>.faiss and its .json (the
    # chunks it holds: count, id sum, largest id; nprobe).  Written at close().
    def _ivf_paths(self, collection: str) -> tuple[Path, Path]:
        folder = self.path.with_name(self.path.name + ".ivf")
        return folder / f"{collection}.faiss", folder / f"{collection}.json"

    def _fingerprint(self, collection: str) -> list[int]:
        row = self._conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(k.id), 0), COALESCE(MAX(k.id), 0) FROM chunks k "
            "JOIN documents d ON d.id = k.document_id JOIN collections c "
            "ON c.id = d.collection_id WHERE c.name = ?",
            (collection,),
        ).fetchone()
        return [int(row[0]), int(row[1]), int(row[2])]

    def _load_ivf(self, collection: str) -> IvfIndex | None:
        data, meta = self._ivf_paths(collection)
        if not (data.is_file() and meta.is_file()):
            return None
        try:
            saved = json.loads(meta.read_text())
            if saved.get("chunks") != self._fingerprint(collection):
                self._drop_saved(collection)
                return None
            return IvfIndex.load(data, int(saved["nprobe"]))
        except Exception:  # a damaged copy: rebuilt from the store
            self._drop_saved(collection)
            return None

    def _drop_saved(self, collection: str) -> None:
        for file in self._ivf_paths(collection):
            file.unlink(missing_ok=True)

    def save_indexes(self) -> None:
        """Write each changed approximate index beside the store (close() calls this)."""
        with self._lock:
            for collection in sorted(self._unsaved):
                index = self._cache.get(collection)
                if not isinstance(index, IvfIndex):
                    continue
                data, meta = self._ivf_paths(collection)
                data.parent.mkdir(mode=0o700, exist_ok=True)
                index.save(data)
                meta.write_text(
                    json.dumps({"chunks": self._fingerprint(collection), "nprobe": index.nprobe})
                )
                os.chmod(meta, 0o600)
            self._unsaved.clear()

    def vectors_of(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The stored (normalised, float32) vectors of these chunks, for exact re-scoring."""
        out: dict[int, np.ndarray] = {}
        ids = [int(i) for i in chunk_ids]
        with self._lock:
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                rows = self._conn.execute(
                    f"SELECT chunk_id, data FROM vectors WHERE chunk_id IN "
                    f"({', '.join('?' for _ in part)})",
                    part,
                ).fetchall()
                for r in rows:
                    out[int(r[0])] = np.frombuffer(r[1], dtype=np.float32)
        return out

    def search(self, collection: str, query: np.ndarray, k: int = 4) -> list[Hit]:
        """The cosine top-``k`` chunks of ``collection`` for the query vector.

        Exact for collections under ``ann_min_chunks`` chunks; above, the approximate
        index proposes candidates and they are re-scored exactly.
        """
        if k < 1:
            raise InvalidParameterError(f"top_k must be >= 1; got {k!r}")
        return self._ranked(collection, query, k=k)

    def vector_ranking(self, collection: str, query: np.ndarray, n: int) -> list[tuple[int, float]]:
        """(chunk id, exact cosine) of the ``n`` best chunks by vector, best first."""
        q = self._query(query)
        with self._lock:
            index = self._index(collection)
            if index.size == 0:
                return []
            if index.dim != q.shape[0]:
                raise InvalidParameterError(
                    f"query has {q.shape[0]} dimensions, the store {index.dim}"
                )
            ids, scores = index.search(q, n)
            if not index.exact:  # re-score the candidates exactly
                vecs = self.vectors_of(ids.tolist())
                exact = [(int(i), float(vecs[int(i)] @ q)) for i in ids if int(i) in vecs]
                exact.sort(key=lambda t: -t[1])
                return exact[:n]
            return [(int(i), float(s)) for i, s in zip(ids, scores, strict=True)]

    def lexical_ranking(self, collection: str, match: str, n: int) -> list[tuple[int, float]]:
        """(chunk id, BM25 score, higher better) of the ``n`` best FTS5 matches of ``match``.

        ``match`` is an FTS5 query (companion/rag/retrieval.py builds it from the words).
        """
        validate_collection_name(collection)
        if not match:
            return []
        with self._lock:
            names = self._conn.execute("SELECT name FROM collections LIMIT 2").fetchall()
            try:
                if [r[0] for r in names] == [collection]:  # the store's only collection
                    rows = self._conn.execute(
                        "SELECT rowid, bm25(chunks_fts, 1.0, 0.5) AS s FROM chunks_fts "
                        "WHERE chunks_fts MATCH ? ORDER BY s LIMIT ?",
                        (match, n),
                    ).fetchall()
                else:
                    rows = self._conn.execute(
                        "SELECT f.rowid, bm25(chunks_fts, 1.0, 0.5) AS s FROM chunks_fts f "
                        "JOIN chunks k ON k.id = f.rowid JOIN documents d "
                        "ON d.id = k.document_id JOIN collections c ON c.id = d.collection_id "
                        "WHERE chunks_fts MATCH ? AND c.name = ? ORDER BY s LIMIT ?",
                        (match, collection, n),
                    ).fetchall()
            except sqlite3.OperationalError as exc:
                raise InvalidParameterError(f"the lexical query could not be run ({exc})") from None
        return [(int(r[0]), -float(r[1])) for r in rows]

    def hits(self, collection: str, ranked: Sequence[tuple[int, float]]) -> list[Hit]:
        """The chunks of ``(chunk id, cosine score)`` pairs as hits, in the given order."""
        hits = []
        with self._lock:
            for chunk_id, score in ranked:
                row = self._conn.execute(
                    'SELECT k.id, k.document_id, k.idx, k.text, k.start, k."end", k.page, '
                    "k.heading, d.name FROM chunks k JOIN documents d ON d.id = k.document_id "
                    "WHERE k.id = ?",
                    (int(chunk_id),),
                ).fetchone()
                if row is None:
                    continue
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
                        score=float(score),
                        page=None if row["page"] is None else int(row["page"]),
                        heading=row["heading"],
                    )
                )
        return hits

    # ------------------------------------------------------------------- budget
    def scored_chunks(self, collection: str, query: np.ndarray, min_score: float) -> list[Hit]:
        """Every chunk of ``collection`` whose cosine score is >= ``min_score``, best first.

        Above ``ann_min_chunks`` chunks: those among the index's best
        ``SCORED_CANDIDATES`` candidates (re-scored exactly).
        """
        return self._ranked(collection, query, min_score=min_score)

    @staticmethod
    def _query(query: np.ndarray) -> np.ndarray:
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        return q / max(float(np.linalg.norm(q)), 1e-12)

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
        with self._lock:
            index = self._index(collection)
            n = k if k is not None else (index.size if index.exact else SCORED_CANDIDATES)
            ranked = self.vector_ranking(collection, query, max(1, n))[:n]
            if min_score is not None:
                ranked = [(i, s) for i, s in ranked if s >= min_score]
            return self.hits(collection, ranked)

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
