"""The vector side of the document store: each collection's index, cached, saved, re-scored.

Vectors are float32 blobs in the ``vectors`` table, L2-normalised on insert, so cosine
similarity is a dot product.  A collection under ``ann_min_chunks`` chunks is searched
exactly (:class:`companion.rag.index.ExactIndex`, a matrix kept in memory and dropped on
every write); a larger one through faiss IVF (:class:`companion.rag.index.IvfIndex`) whose
candidates are re-scored exactly from the float32 vectors.  The IVF index is saved beside
the store at close (``<store>.ivf/<collection>.faiss`` and its ``.json``: the chunks it
holds -- count, id sum, largest id -- and ``nprobe``); any write removes the saved copy
at once, so a deleted document's vectors are in no file, and the copy written at close
holds only the chunks that are still there.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from companion.rag.index import ExactIndex, IvfIndex, VectorIndex
from py_core.errors import InvalidParameterError

log = logging.getLogger("veil.store")


def normalised(query: np.ndarray) -> np.ndarray:
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    return q / max(float(np.linalg.norm(q)), 1e-12)


class VectorIndexes:
    """The collections' vector indexes over the store's connection (and under its lock)."""

    def __init__(
        self, conn: sqlite3.Connection, lock: threading.RLock, path: Path, ann_min_chunks: int
    ) -> None:
        self.conn = conn
        self.lock = lock
        self.path = path
        self.ann_min_chunks = ann_min_chunks
        self.cache: dict[str, VectorIndex] = {}
        self.unsaved: set[str] = set()

    # ------------------------------------------------------------------ building
    def count(self, collection: str) -> int:
        return int(
            self.conn.execute(
                "SELECT COUNT(*) FROM chunks k JOIN documents d ON d.id = k.document_id "
                "JOIN collections c ON c.id = d.collection_id WHERE c.name = ?",
                (collection,),
            ).fetchone()[0]
        )

    def index(self, collection: str) -> VectorIndex:
        """The collection's vector index: exact below ``ann_min_chunks``, else IVF (cached)."""
        with self.lock:
            cached = self.cache.get(collection)
            if cached is not None:
                return cached
            count = self.count(collection)
            index: VectorIndex
            if count >= self.ann_min_chunks:
                loaded = self._load_ivf(collection)
                if loaded is None:
                    index = IvfIndex.build(count, lambda: self.batches(collection))
                    self.unsaved.add(collection)
                else:
                    index = loaded
            else:
                ids, mat = [], []
                for batch_ids, batch in self.batches(collection):
                    ids.append(batch_ids)
                    mat.append(batch)
                index = ExactIndex(
                    np.concatenate(ids) if ids else np.zeros(0, np.int64),
                    np.concatenate(mat) if mat else np.zeros((0, 0), np.float32),
                )
            self.cache[collection] = index
            return index

    def batches(
        self, collection: str, batch: int = 50_000
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The collection's (chunk ids, float32 vectors), in id order, ``batch`` rows at a time."""
        last = 0
        while True:
            rows = self.conn.execute(
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

    # ------------------------------------------------------------------- writes
    def added(self, collection: str, ids: np.ndarray, vecs: np.ndarray) -> None:
        self.drop_saved(collection)
        index = self.cache.get(collection)
        if index is not None and not index.add(ids, vecs):
            self.cache.pop(collection, None)
        elif index is not None:
            self.unsaved.add(collection)

    def removed(self, collection: str, ids: np.ndarray) -> None:
        self.drop_saved(collection)
        index = self.cache.get(collection)
        if index is not None and not index.remove(ids):
            self.cache.pop(collection, None)
        elif index is not None:
            self.unsaved.add(collection)

    def forget(self, collection: str) -> None:
        """A deleted collection: no index in memory, none on disk."""
        self.cache.pop(collection, None)
        self.unsaved.discard(collection)
        self.drop_saved(collection)

    # ------------------------------------------------------------ saved copies
    def ivf_paths(self, collection: str) -> tuple[Path, Path]:
        folder = self.path.with_name(self.path.name + ".ivf")
        return folder / f"{collection}.faiss", folder / f"{collection}.json"

    def fingerprint(self, collection: str) -> list[int]:
        row = self.conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(k.id), 0), COALESCE(MAX(k.id), 0) FROM chunks k "
            "JOIN documents d ON d.id = k.document_id JOIN collections c "
            "ON c.id = d.collection_id WHERE c.name = ?",
            (collection,),
        ).fetchone()
        return [int(row[0]), int(row[1]), int(row[2])]

    def _load_ivf(self, collection: str) -> IvfIndex | None:
        data, meta = self.ivf_paths(collection)
        if not (data.is_file() and meta.is_file()):
            return None
        try:
            saved = json.loads(meta.read_text())
            if saved.get("chunks") != self.fingerprint(collection):
                self.drop_saved(collection)
                return None
            return IvfIndex.load(data, int(saved["nprobe"]))
        except Exception:  # a damaged copy: rebuilt from the store
            self.drop_saved(collection)
            return None

    def drop_saved(self, collection: str) -> None:
        data, meta = self.ivf_paths(collection)
        for file in (data, meta, data.with_name(data.name + ".partial")):
            file.unlink(missing_ok=True)

    def save(self) -> None:
        """Write each changed approximate index beside the store (close() calls this)."""
        with self.lock:
            for collection in sorted(self.unsaved):
                index = self.cache.get(collection)
                if not isinstance(index, IvfIndex):
                    continue
                data, meta = self.ivf_paths(collection)
                try:
                    data.parent.mkdir(mode=0o700, exist_ok=True)
                    index.save(data)
                    meta.write_text(
                        json.dumps({"chunks": self.fingerprint(collection), "nprobe": index.nprobe})
                    )
                    os.chmod(meta, 0o600)
                except OSError as exc:  # a full disk: the next open rebuilds it from the store
                    self.drop_saved(collection)
                    log.warning("the approximate vector index was not saved (%s)", exc.strerror)
            self.unsaved.clear()

    # ------------------------------------------------------------------- search
    def vectors_of(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The stored (normalised, float32) vectors of these chunks, for exact re-scoring."""
        out: dict[int, np.ndarray] = {}
        ids = [int(i) for i in chunk_ids]
        with self.lock:
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                rows = self.conn.execute(
                    f"SELECT chunk_id, data FROM vectors WHERE chunk_id IN "
                    f"({', '.join('?' for _ in part)})",
                    part,
                ).fetchall()
                for r in rows:
                    out[int(r[0])] = np.frombuffer(r[1], dtype=np.float32)
        return out

    def ranking(self, collection: str, query: np.ndarray, n: int) -> list[tuple[int, float]]:
        """(chunk id, exact cosine) of the ``n`` best chunks by vector, best first."""
        q = normalised(query)
        with self.lock:
            index = self.index(collection)
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
