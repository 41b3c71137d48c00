"""The vector indexes behind :class:`companion.rag.store.DocumentStore`.

* :class:`ExactIndex`: every vector in a float32 matrix, scored by one matrix
  product -- exact, and fine up to some tens of thousands of chunks (1,000,000
  chunks of 384 dimensions would take 1.5 GB).
* :class:`IvfIndex`: faiss's inverted-file index with 8-bit scalar-quantised
  vectors (``IndexIVFScalarQuantizer``): 384 bytes per 384-dimension chunk, a
  query scans ``nprobe`` of ``nlist`` clusters.  Its scores are approximate, so
  the store re-scores its ``candidates`` exactly from the float32 vectors it keeps
  in SQLite.  Trained once on a sample when built; later documents are added to
  the trained clusters and deleted ones removed, without a rebuild.  The store saves
  it beside itself when it closes and loads it again on the next first search if the
  collection's chunks are still the same ones (their count, id sum and largest id:
  ids are never reused); a write removes the saved copy at once, so a deleted
  document's vectors do not stay on disk, and the copy written at close holds only the
  chunks still there (``remove_ids`` takes a deleted chunk's code out of its list).

``bench/rag_bench.py`` measures both at 10k / 100k / 1M chunks
(docs/rag/scale.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from py_core.errors import InvalidParameterError

# The best-by-index chunks re-scored when every chunk over a score is asked for
# (DocumentStore.scored_chunks) on an approximate index.
SCORED_CANDIDATES = 1000
# Candidates re-scored exactly per asked-for result (at least RESCORE_MIN).  SQ8 scores
# are within ~1% of the exact ones, so few extra candidates recover the exact order;
# each costs a read of its float32 vector from SQLite (the hybrid asks for 50).
RESCORE_FACTOR = 2
RESCORE_MIN = 100


class VectorIndex(Protocol):
    exact: bool

    @property
    def size(self) -> int: ...

    @property
    def dim(self) -> int: ...

    def search(self, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]: ...

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> bool: ...

    def remove(self, ids: np.ndarray) -> bool: ...


@dataclass
class ExactIndex:
    """Exact cosine over a float32 matrix of normalised vectors."""

    ids: np.ndarray
    vectors: np.ndarray
    exact: bool = True

    @property
    def size(self) -> int:
        return int(self.ids.size)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1]) if self.vectors.ndim == 2 else 0

    def search(self, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        scores = self.vectors @ query
        if n < scores.size:
            top = np.argpartition(-scores, n - 1)[:n]
            # ties in id order, like a stable sort of the whole ranking
            order = top[np.lexsort((top, -scores[top]))]
        else:
            order = np.argsort(-scores, kind="stable")
        return self.ids[order], scores[order]

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> bool:
        return False  # dropped from the cache and rebuilt: cheap at this size

    def remove(self, ids: np.ndarray) -> bool:
        return False


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise InvalidParameterError(
            "this collection is large enough for the approximate vector index, which needs "
            "faiss: pip install faiss-cpu (scripts/setup.sh installs it)"
        ) from None
    return faiss


@dataclass
class IvfIndex:
    """faiss IVF over 8-bit scalar-quantised vectors; inner product (= cosine) scores."""

    index: Any
    dimension: int
    nprobe: int
    exact: bool = False

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return self.dimension

    @staticmethod
    def lists_for(count: int) -> int:
        """Clusters for ``count`` vectors: about sqrt(count), 16..4096."""
        return int(min(4096, max(16, round(math.sqrt(max(count, 1))))))

    @classmethod
    def build(
        cls,
        count: int,
        batches: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
        *,
        nlist: int | None = None,
        nprobe: int | None = None,
        train_per_list: int = 40,
        seed: int = 0,
    ) -> IvfIndex:
        """Train on an evenly spread sample of the ``count`` vectors, then add them all.

        ``batches()`` yields (ids, float32 vectors) and is called twice (sample, add),
        so the float32 vectors are never all in memory at once.  ``seed`` only fixes
        faiss's k-means initialisation (clustering, nothing that protects anyone).
        """
        faiss = _faiss()
        nlist = nlist or cls.lists_for(count)
        wanted = min(count, nlist * train_per_list)
        step = max(1, count // max(wanted, 1))
        sample: list[np.ndarray] = []
        seen = 0
        dim = 0
        for _ids, vecs in batches():
            dim = vecs.shape[1]
            offset = (-seen) % step
            sample.append(np.ascontiguousarray(vecs[offset::step], dtype=np.float32))
            seen += len(vecs)
        if not sample or dim == 0:
            raise InvalidParameterError("an approximate index needs at least one vector")
        train = np.concatenate(sample)
        nlist = min(nlist, max(1, len(train) // 4))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFScalarQuantizer(
            quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
        index.cp.seed = seed
        index.train(train)
        del train, sample
        for ids, vecs in batches():
            index.add_with_ids(np.ascontiguousarray(vecs, dtype=np.float32), ids)
        probe = nprobe or max(8, nlist // 16)
        index.nprobe = min(probe, nlist)
        return cls(index, dim, index.nprobe)

    def save(self, path: Path) -> None:
        """Write the index to ``path`` (0600: quantised vectors are the documents' too)."""
        faiss = _faiss()
        partial = path.with_name(path.name + ".partial")
        try:
            faiss.write_index(self.index, str(partial))
            os.chmod(partial, 0o600)
            os.replace(partial, path)
        except BaseException:  # a full disk: no half-written copy of the vectors stays
            partial.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path, nprobe: int) -> IvfIndex:
        faiss = _faiss()
        index = faiss.read_index(str(path))
        index.nprobe = nprobe
        return cls(index, int(index.d), nprobe)

    def search(self, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        want = max(RESCORE_MIN, n * RESCORE_FACTOR) if n < SCORED_CANDIDATES else n
        scores, ids = self.index.search(query.reshape(1, -1).astype(np.float32), want)
        keep = ids[0] >= 0
        return ids[0][keep], scores[0][keep]

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> bool:
        if len(ids):
            self.index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)
        return True

    def remove(self, ids: np.ndarray) -> bool:
        if len(ids):
            self.index.remove_ids(np.ascontiguousarray(ids, dtype=np.int64))
        return True


def batched(
    ids: np.ndarray, vectors: np.ndarray, size: int = 50_000
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids, vectors) in slices of ``size`` rows (for :meth:`IvfIndex.build` from arrays)."""
    for start in range(0, len(ids), size):
        yield ids[start : start + size], vectors[start : start + size]
