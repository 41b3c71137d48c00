"""The document store: collections, documents and their chunks in one SQLite file.

:class:`DocumentStore` keeps the collections, documents and chunks itself and hands the
rest to one part per job, all on its one connection (:func:`companion.db.connect`)
behind its lock -- the API calls the store from worker threads:

* :mod:`companion.rag.store.vectors`: each collection's vector index (exact or IVF);
* :mod:`companion.rag.store.lexical`: the FTS5 index and its BM25 ranking;
* :mod:`companion.rag.store.ledger`: the per-document budget's spends and log;
* :mod:`companion.rag.store.schema`: the tables and their numbered migrations.

Deleted means gone: a delete purges the lexical index in the same transaction, the
saved vector index at once, and the WAL after it commits (``secure_delete`` zeroes the
freed pages), so no file under the home keeps a deleted document's words.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from companion import db
from companion.rag.index import SCORED_CANDIDATES, VectorIndex
from companion.rag.store.ledger import BudgetLedger, BudgetTransaction
from companion.rag.store.lexical import DEFAULT_FTS_TOKENIZER, LexicalIndex, check_tokenizer
from companion.rag.store.records import ChunkRow, DocumentInfo, Hit, validate_collection_name
from companion.rag.store.schema import MIGRATIONS
from companion.rag.store.vectors import VectorIndexes, normalised
from py_core.errors import InvalidParameterError

_DOC_QUERY = (
    "SELECT d.*, c.name AS collection, (SELECT COUNT(*) FROM chunks k "
    "WHERE k.document_id = d.id) AS chunks FROM documents d "
    "JOIN collections c ON c.id = d.collection_id"
)


def _info(row: sqlite3.Row) -> DocumentInfo:
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
    vectors: VectorIndexes = field(init=False, repr=False)
    lexical: LexicalIndex = field(init=False, repr=False)
    ledger: BudgetLedger = field(init=False, repr=False)
    # The WAL still to be truncated after a delete (a reader held it, or the disk was full).
    _wal_dirty: bool = field(init=False, repr=False, default=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        check_tokenizer(self.fts_tokenizer)
        self._conn = db.connect(self.path)
        try:
            with self._lock:
                version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
                db.migrate(self._conn, MIGRATIONS, label=f"the store {self.path}")
                if 0 < version < len(MIGRATIONS):
                    self._truncate_wal()  # the old pages a migration rewrote (004: names)
                self.lexical = LexicalIndex(self._conn, self._lock, self.fts_tokenizer)
                self.lexical.ensure()
                self._check_embedding_model()
        except BaseException:
            self._conn.close()
            raise
        self.vectors = VectorIndexes(self._conn, self._lock, self.path, self.ann_min_chunks)
        self.ledger = BudgetLedger(self._conn, self._lock)
        db.private(self.path)

    def _check_embedding_model(self) -> None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
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

    def close(self) -> None:
        with self._lock:
            try:
                self.save_indexes()
                if self._wal_dirty:
                    self._truncate_wal()
            finally:
                self._conn.close()

    # The parts' state under the names the benchmarks and older tests use.
    @property
    def _cache(self) -> dict[str, VectorIndex]:
        return self.vectors.cache

    def _index(self, collection: str) -> VectorIndex:
        return self.vectors.index(collection)

    def _vector_batches(
        self, collection: str, batch: int = 50_000
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return self.vectors.batches(collection, batch)

    # ---------------------------------------------------------- deleted is gone
    def _truncate_wal(self) -> None:
        """Move the WAL into the database and empty it (the old pages of deleted rows)."""
        try:
            self._wal_dirty = not db.forget_deleted(self._conn)
        except sqlite3.Error as exc:
            if db.storage_problem(exc) is None:
                raise
            self._wal_dirty = True  # the next delete or close() tries again

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
        """Delete a collection, its documents, chunks and vectors, from every file."""
        with self._lock:
            cid = self._collection_id(name, create=False)
            if cid is None:
                return False
            with db.transaction(self._conn):
                self._conn.execute("DELETE FROM collections WHERE id = ?", (cid,))
                self.lexical.purge()
            self.vectors.forget(name)
            self._truncate_wal()
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
        existing document is returned with ``created=False``.  All or nothing: a failed
        write (a full disk) leaves no part of it, nor a new empty collection.
        """
        if len(chunks) != len(vectors):
            raise InvalidParameterError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        digest = hashlib.sha256(data).hexdigest()
        vecs = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.maximum(norms, 1e-12)
        with self._lock:
            existing = self._conn.execute(
                "SELECT d.id FROM documents d JOIN collections c ON c.id = d.collection_id "
                "WHERE c.name = ? AND d.sha256 = ?",
                (validate_collection_name(collection), digest),
            ).fetchone()
            if existing is not None:
                info = self.document(int(existing["id"]))
                assert info is not None
                return info, False
            with db.transaction(self._conn):
                cid = self._collection_id(collection, create=True)
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
            self.vectors.added(collection, np.asarray(chunk_ids, np.int64), vecs)
            info = self.document(doc_id)
            assert info is not None
            return info, True

    def document(self, doc_id: int) -> DocumentInfo | None:
        with self._lock:
            row = self._conn.execute(_DOC_QUERY + " WHERE d.id = ?", (doc_id,)).fetchone()
        return None if row is None else _info(row)

    def documents(self, collection: str | None = None) -> list[DocumentInfo]:
        with self._lock:
            if collection is None:
                rows = self._conn.execute(_DOC_QUERY + " ORDER BY d.id").fetchall()
            else:
                validate_collection_name(collection)
                rows = self._conn.execute(
                    _DOC_QUERY + " WHERE c.name = ? ORDER BY d.id", (collection,)
                ).fetchall()
        return [_info(r) for r in rows]

    def document_count(self) -> int:
        """How many documents the store holds (cheap: for /healthz)."""
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def delete_document(self, doc_id: int) -> bool:
        """Delete a document with its chunks and vectors, from every file the store keeps.

        The rows, the lexical index's terms (purged in the same transaction: a full disk
        rolls the whole delete back), the saved vector index, then the WAL.
        """
        with self._lock:
            info = self.document(doc_id)
            if info is None:
                return False
            with db.transaction(self._conn):
                ids = [
                    int(r[0])
                    for r in self._conn.execute(
                        "SELECT id FROM chunks WHERE document_id = ?", (doc_id,)
                    ).fetchall()
                ]
                self._conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
                self.lexical.purge()
            self.vectors.removed(info.collection, np.asarray(ids, np.int64))
            self._truncate_wal()
            return True

    def document_names(self, collection: str) -> list[tuple[int, str]]:
        """(id, name) of every document of ``collection`` (cheap: no chunk counts)."""
        validate_collection_name(collection)
        with self._lock:
            rows = self._conn.execute(
                "SELECT d.id, d.name FROM documents d JOIN collections c "
                "ON c.id = d.collection_id WHERE c.name = ? ORDER BY d.id",
                (collection,),
            ).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def chunk_ids(self, document_ids: Sequence[int]) -> list[int]:
        """The chunks of these documents, in document then chunk order."""
        out: list[int] = []
        with self._lock:
            for doc_id in document_ids:
                rows = self._conn.execute(
                    "SELECT id FROM chunks WHERE document_id = ? ORDER BY idx", (int(doc_id),)
                ).fetchall()
                out += [int(r[0]) for r in rows]
        return out

    def chunk_count(self, collection: str | None = None) -> int:
        with self._lock:
            if collection is None:
                return int(self._conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
            return self.vectors.count(collection)

    # ------------------------------------------------------------------- search
    def save_indexes(self) -> None:
        """Write each changed approximate index beside the store (close() calls this)."""
        self.vectors.save()

    def vectors_of(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The stored (normalised, float32) vectors of these chunks, for exact re-scoring."""
        return self.vectors.vectors_of(chunk_ids)

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
        return self.vectors.ranking(collection, query, n)

    def lexical_ranking(self, collection: str, match: str, n: int) -> list[tuple[int, float]]:
        """(chunk id, BM25 score, higher better) of the ``n`` best FTS5 matches of ``match``.

        ``match`` is an FTS5 query (companion/rag/retrieval.py builds it from the words).
        """
        return self.lexical.ranking(collection, match, n)

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

    def scored_chunks(self, collection: str, query: np.ndarray, min_score: float) -> list[Hit]:
        """Every chunk of ``collection`` whose cosine score is >= ``min_score``, best first.

        Above ``ann_min_chunks`` chunks: those among the index's best
        ``SCORED_CANDIDATES`` candidates (re-scored exactly).
        """
        return self._ranked(collection, query, min_score=min_score)

    @staticmethod
    def _query(query: np.ndarray) -> np.ndarray:
        return normalised(query)

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
            index = self.vectors.index(collection)
            n = k if k is not None else (index.size if index.exact else SCORED_CANDIDATES)
            ranked = self.vectors.ranking(collection, query, max(1, n))[:n]
            if min_score is not None:
                ranked = [(i, s) for i, s in ranked if s >= min_score]
            return self.hits(collection, ranked)

    # ------------------------------------------------------------------- budget
    @contextlib.contextmanager
    def budget_transaction(self) -> Iterator[BudgetTransaction]:
        """One write transaction (``BEGIN IMMEDIATE``) over the budget tables: all or nothing."""
        with self.ledger.transaction() as tx:
            yield tx

    def budget_rows(self, collection: str | None = None) -> list[dict[str, Any]]:
        """Every document (of ``collection``) with its spend (0 if never charged)."""
        return self.ledger.rows(collection)

    def budget_log(self, limit: int = 100, sha256: str | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` rows of the budget log (of one document's content), newest first."""
        return self.ledger.log(limit, sha256)
