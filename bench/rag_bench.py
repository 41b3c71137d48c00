"""The document store at scale: ingest throughput, index size, search latency, memory.

    python bench/rag_bench.py                      # 10k, 100k and 1M chunks
    python bench/rag_bench.py --sizes 10000        # what CI runs

Synthetic 384-dimension vectors (no embedder: the scale, not the quality, is
measured; ``veil eval rag`` measures quality on real text): clustered around 2,000
random topics so that a query has true neighbours, each chunk a short text of
words drawn from a 5,000-word vocabulary for the FTS5 index.  For each size it
prints ingest throughput (chunks/s into SQLite, vectors and FTS5 included), the
store's size on disk and the vector index's size in memory, the time to build the
index, p50/p95 latency of ``DocumentStore.search`` (top 10: the index, exact
re-scoring, the chunks' rows) and of a hybrid ``retrieve``, recall@10 of the
approximate index against exact cosine, and the process's resident memory
(current after searching, and peak).  Single-threaded (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import contextlib
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from companion.rag.retrieval import RetrievalOptions, retrieve
from companion.rag.store import DocumentStore

DIM = 384
TOPICS = 2000
DOC_CHUNKS = 1000  # chunks per synthetic document
VOCAB = 5000
QUERIES = 200
RECALL_QUERIES = 50


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MiB (Linux /proc)."""
    cur = peak = float("nan")
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return cur, peak


def reset_peak() -> None:
    """Start VmHWM afresh (Linux >= 4.0: write 5 to clear_refs)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


class Synthetic:
    """Seeded clustered unit vectors and short texts, regenerated batch by batch."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.centers = rng.normal(size=(TOPICS, DIM)).astype(np.float32)
        self.centers /= np.linalg.norm(self.centers, axis=1, keepdims=True)
        self.words = np.array([f"w{i:04d}" for i in range(VOCAB)])
        self.seed = seed

    def batch(self, start: int, count: int) -> tuple[np.ndarray, list[str]]:
        rng = np.random.default_rng((self.seed, start))
        topic = rng.integers(0, TOPICS, size=count)
        vecs = self.centers[topic] + 0.03 * rng.normal(size=(count, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        words = rng.integers(0, VOCAB, size=(count, 12))
        texts = [" ".join(self.words[w]) for w in words]
        return vecs.astype(np.float32), texts


def ingest(store: DocumentStore, size: int, data: Synthetic) -> float:
    start = time.perf_counter()
    for doc, first in enumerate(range(0, size, DOC_CHUNKS)):
        n = min(DOC_CHUNKS, size - first)
        vecs, texts = data.batch(first, n)
        chunks = [(t, 0, len(t)) for t in texts]
        store.add_document("bench", f"doc{doc}.txt", f"{doc}".encode(), "txt", {}, chunks, vecs)
    return time.perf_counter() - start


def exact_top(store: DocumentStore, queries: np.ndarray, k: int = 10) -> list[set[int]]:
    best = [(np.full(0, -2.0, np.float32), np.zeros(0, np.int64)) for _ in queries]
    for ids, vecs in store._vector_batches("bench"):
        scores = vecs @ queries.T
        for j in range(len(queries)):
            s = np.concatenate([best[j][0], scores[:, j]])
            i = np.concatenate([best[j][1], ids])
            top = np.argsort(-s)[:k]
            best[j] = (s[top], i[top])
    return [set(b[1].tolist()) for b in best]


def run(size: int, ann_min_chunks: int | None, tmp: Path) -> dict[str, float | int | str]:
    data = Synthetic(seed=size)
    path = tmp / f"bench-{size}.sqlite3"
    kwargs = {} if ann_min_chunks is None else {"ann_min_chunks": ann_min_chunks}
    store = DocumentStore(path, embedding_model="synthetic", **kwargs)
    store._conn.execute("PRAGMA synchronous = NORMAL")  # a bench: no power cut to survive
    seconds = ingest(store, size, data)
    gc.collect()
    reset_peak()
    start = time.perf_counter()
    index = store._index("bench")
    build = time.perf_counter() - start
    rng = np.random.default_rng(size + 1)
    qvecs, qtexts = data.batch(10**9, QUERIES)
    qvecs = qvecs + 0.03 * rng.normal(size=qvecs.shape).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    store.search("bench", qvecs[0], 10)  # warm
    lat = []
    found: list[set[int]] = []
    for q in qvecs:
        t = time.perf_counter()
        hits = store.search("bench", q, 10)
        lat.append(time.perf_counter() - t)
        found.append({h.chunk_id for h in hits})
    options = RetrievalOptions(mode="hybrid", fusion="weighted", weight=0.6)
    hyb = []
    for q, text in zip(qvecs[:50], qtexts[:50], strict=True):
        words = " ".join(text.split()[:3])
        t = time.perf_counter()
        retrieve(store, words, q, "bench", 10, options)
        hyb.append(time.perf_counter() - t)
    cur, peak = rss_mb()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    truth = exact_top(store, qvecs[:RECALL_QUERIES])
    recall = float(np.mean([len(found[i] & truth[i]) / 10 for i in range(RECALL_QUERIES)]))
    store.close()  # writes an approximate index beside the store
    disk = sum(p.stat().st_size for p in tmp.glob(f"bench-{size}.sqlite3*") if p.is_file())
    saved = path.with_name(path.name + ".ivf") / "bench.faiss"
    reload_s = float("nan")
    if saved.is_file():  # a restart: the first search loads the saved index
        again = DocumentStore(path, embedding_model="synthetic", **kwargs)
        t = time.perf_counter()
        again.search("bench", qvecs[0], 10)
        reload_s = time.perf_counter() - t
        again.close()
    index_mb = (
        index.size * (DIM + 8) / 2**20 if not index.exact else index.size * (DIM * 4 + 8) / 2**20
    )
    result: dict[str, float | int | str] = {
        "chunks": size,
        "index": "exact float32" if index.exact else f"IVF-SQ8 nprobe {index.nprobe}",
        "ingest_chunks_per_s": round(size / seconds),
        "store_mb": round(disk / 2**20, 1),
        "index_mb": round(index_mb, 1),
        "build_s": round(build, 2),
        "restart_first_search_s": round(reload_s, 2),
        "search_p50_ms": round(1000 * float(np.percentile(lat, 50)), 2),
        "search_p95_ms": round(1000 * float(np.percentile(lat, 95)), 2),
        "hybrid_p50_ms": round(1000 * float(np.percentile(hyb, 50)), 2),
        "hybrid_p95_ms": round(1000 * float(np.percentile(hyb, 95)), 2),
        "recall_at_10": round(recall, 3),
        "rss_mb": round(cur, 1),
        "rss_peak_mb": round(peak, 1),
        "load_average": round(load, 2),  # other processes share the cores: latencies vary
    }
    path.unlink(missing_ok=True)
    for extra in tmp.glob(f"bench-{size}.sqlite3-*"):
        extra.unlink()
    shutil.rmtree(path.with_name(path.name + ".ivf"), ignore_errors=True)
    del index, store
    gc.collect()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="10000,100000,1000000", help="comma-separated chunk counts"
    )
    parser.add_argument(
        "--ann-min-chunks",
        type=int,
        default=None,
        help="use the approximate index from this many chunks (default: the store's, 50,000)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the temporary stores")
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="veil-rag-bench-", dir=args.dir) as tmp:
        for size in sizes:
            row = run(size, args.ann_min_chunks, Path(tmp))
            rows.append(row)
            print(
                f"rag store {row['chunks']:>9,} chunks [{row['index']}]: ingest "
                f"{row['ingest_chunks_per_s']:,} chunks/s, store {row['store_mb']} MB on disk, "
                f"index {row['index_mb']} MB, build {row['build_s']} s (after a restart: first "
                f"search {row['restart_first_search_s']} s); search p50 "
                f"{row['search_p50_ms']} ms p95 {row['search_p95_ms']} ms (hybrid p50 "
                f"{row['hybrid_p50_ms']} p95 {row['hybrid_p95_ms']} ms), recall@10 "
                f"{row['recall_at_10']}; RSS {row['rss_mb']} MB (peak from the index build on "
                f"{row['rss_peak_mb']} MB); load average {row['load_average']}",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
