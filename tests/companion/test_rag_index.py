"""The approximate vector index (faiss IVF-SQ8) behind large collections, re-scored exactly."""

from __future__ import annotations

import numpy as np
import pytest

from companion.rag.index import ExactIndex, IvfIndex, batched
from companion.rag.store import DocumentStore

faiss = pytest.importorskip("faiss")


def clustered(n: int, dim: int = 32, topics: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(topics, dim))
    vecs = centers[rng.integers(0, topics, n)] + 0.15 * rng.normal(size=(n, dim))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32)


def test_ivf_finds_the_exact_neighbours():
    """On clustered vectors the IVF candidates hold the exact top 10 (recall@10 >= 0.9)."""
    vecs = clustered(4000)
    ids = np.arange(1, 4001, dtype=np.int64)
    ivf = IvfIndex.build(len(ids), lambda: batched(ids, vecs, 1000))
    exact = ExactIndex(ids, vecs)
    queries = clustered(30, seed=1)
    recall = []
    for q in queries:
        truth = set(exact.search(q, 10)[0].tolist())
        got = ivf.search(q, 10)[0]
        scores = vecs[got - 1] @ q  # the exact re-scoring the store does
        top = set(got[np.argsort(-scores)[:10]].tolist())
        recall.append(len(truth & top) / 10)
    assert np.mean(recall) >= 0.9
    assert ivf.size == 4000 and ivf.dim == 32 and not ivf.exact


def _doc(store: DocumentStore, name: str, vecs: np.ndarray) -> int:
    chunks = [(f"{name} chunk {i}", 0, 10) for i in range(len(vecs))]
    info, _ = store.add_document("big", name, name.encode(), "txt", {}, chunks, vecs)
    return info.id


def test_store_uses_the_ivf_index_and_keeps_it_in_sync(tmp_path):
    """Above ann_min_chunks the store searches through IVF; later adds and deletes change
    the cached index in place (no rebuild) and results are exact cosines."""
    store = DocumentStore(tmp_path / "s.sqlite3", embedding_model="t", ann_min_chunks=500)
    vecs = clustered(1200, seed=2)
    first = _doc(store, "a.txt", vecs[:600])
    _doc(store, "b.txt", vecs[600:])
    query = vecs[10] + 0.01
    hits = store.search("big", query, 5)
    index = store._cache["big"]
    assert isinstance(index, IvfIndex)
    assert hits[0].document == "a.txt" and hits[0].index == 10
    q = query / np.linalg.norm(query)
    assert hits[0].score == pytest.approx(float(vecs[10] @ q), abs=1e-5)  # exact, not SQ8
    new = clustered(5, seed=3)
    _doc(store, "c.txt", new)
    assert store._cache["big"] is index and index.size == 1205
    assert store.search("big", new[0], 1)[0].document == "c.txt"
    assert store.delete_document(first)
    assert store._cache["big"] is index and index.size == 605
    assert all(h.document != "a.txt" for h in store.search("big", query, 20))
    over = store.scored_chunks("big", new[0], 0.99)
    assert [h.document for h in over] == ["c.txt"]


def test_small_collections_stay_exact(tmp_path):
    """Under ann_min_chunks the matrix is exact (the top-k of a brute-force computation)."""
    store = DocumentStore(tmp_path / "s.sqlite3", embedding_model="t")
    vecs = clustered(300, seed=4)
    _doc(store, "a.txt", vecs)
    store.search("big", vecs[0], 3)
    assert isinstance(store._cache["big"], ExactIndex)


def test_the_ivf_index_is_saved_at_close_and_loaded_after_a_restart(tmp_path, monkeypatch):
    """close() writes the index (0600) beside the store; the next first search loads it
    instead of rebuilding; any write removes the saved copy at once (a deleted document's
    vectors do not stay on disk) and a stale copy is never used."""
    import stat

    path = tmp_path / "s.sqlite3"
    store = DocumentStore(path, embedding_model="t", ann_min_chunks=500)
    vecs = clustered(900, seed=5)
    _doc(store, "a.txt", vecs[:450])
    second = _doc(store, "b.txt", vecs[450:])
    before = [h.chunk_id for h in store.search("big", vecs[3], 5)]
    store.close()
    data, meta = tmp_path / "s.sqlite3.ivf" / "big.faiss", tmp_path / "s.sqlite3.ivf" / "big.json"
    assert data.is_file() and stat.S_IMODE(data.stat().st_mode) == 0o600
    assert stat.S_IMODE(meta.stat().st_mode) == 0o600

    def no_build(*args, **kwargs):
        raise AssertionError("rebuilt although a saved index matched")

    monkeypatch.setattr(IvfIndex, "build", no_build)
    again = DocumentStore(path, embedding_model="t", ann_min_chunks=500)
    assert [h.chunk_id for h in again.search("big", vecs[3], 5)] == before
    assert again.delete_document(second)
    assert not data.exists() and not meta.exists()  # removed with the document
    again.close()
    assert data.is_file()  # saved again, without b.txt
    monkeypatch.undo()
    # Another writer that never searched: its write drops the saved copy too.
    other = DocumentStore(path, embedding_model="t", ann_min_chunks=500)
    _doc(other, "c.txt", clustered(5, seed=6))
    assert not data.exists()
    other.close()
    third = DocumentStore(path, embedding_model="t", ann_min_chunks=500)
    assert third.search("big", vecs[3], 1)[0].document == "a.txt"
    assert third.delete_collection("big") and not data.exists()
    third.close()
