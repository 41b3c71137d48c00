"""Build the stores once (the companion's own ingest), then rank every question every way."""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from evals.common import REPORT, environment, model_identity, write_results
from evals.rag.config import Config
from evals.rag.corpus import (
    Document,
    Question,
    changelog_store,
    documents,
    lee_articles,
    offtopic_questions,
    overlap,
    paraphrase_questions,
    rare_questions,
    small_store,
    template_questions,
)

KS = (1, 3, 5, 10)
DEPTH = 30  # chunks retrieved per question (more than 10 distinct documents)
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(0, 13))
COLLECTION = "bench"


# The vector ranking's share in the weighted fusion when the question names a rare word
# or an identifier of the store (weight), and when it names none (common weight).
WEIGHTS = (0.3, 0.5, 0.7)
COMMON_WEIGHTS = (0.5, 0.8, 1.0)
DEFAULT_COMMON = 0.8


def configurations(tokenizers: tuple[str, ...]) -> list[dict[str, Any]]:
    """vector; per tokenizer bm25, rrf and the weighted fusion at the default common weight;
    for the first tokenizer the grid of weights and common weights too."""
    configs: list[dict[str, Any]] = [
        {"label": "vector", "mode": "vector", "tokenizer": None, "fusion": "rrf", "weight": 0.5}
    ]
    for tok in tokenizers:
        configs.append(
            {
                "label": f"bm25 ({tok})",
                "mode": "bm25",
                "tokenizer": tok,
                "fusion": "rrf",
                "weight": 0.5,
            }
        )
        configs.append(
            {
                "label": f"hybrid rrf ({tok})",
                "mode": "hybrid",
                "tokenizer": tok,
                "fusion": "rrf",
                "weight": 0.5,
            }
        )
        grid = [(w, c) for w in WEIGHTS for c in COMMON_WEIGHTS]
        if tok != tokenizers[0]:
            grid = [(w, DEFAULT_COMMON) for w in WEIGHTS]
        for w, c in grid:
            configs.append(
                {
                    "label": f"hybrid weighted {w}/{c} ({tok})",
                    "mode": "hybrid",
                    "tokenizer": tok,
                    "fusion": "weighted",
                    "weight": w,
                    "common_weight": c,
                }
            )
    return configs


def _ingest(rag: Any, docs: list[Document]) -> float:
    start = time.perf_counter()
    for doc in docs:
        rag.ingest(doc.name, doc.text.encode("utf-8"), COLLECTION)
    return time.perf_counter() - start


def _ranked_docs(
    store: Any, question: Question, vector: np.ndarray, options: Any
) -> list[list[Any]]:
    """[document, cosine of its best chunk, whether a chunk of it has an id the question
    names (which passes any threshold)] in ranked order, without a threshold."""
    from companion.rag.retrieval import retrieve

    # min_score -1 keeps every chunk but marks the ones naming the question's id
    hits = retrieve(
        store, question.text, vector, COLLECTION, DEPTH, replace(options, min_score=-1.0)
    )
    seen: dict[str, list[Any]] = {}
    for h in hits:
        if h.document not in seen:
            seen[h.document] = [h.document, round(h.score, 4), h.names_identifier]
        else:
            seen[h.document][2] = seen[h.document][2] or h.names_identifier
    return list(seen.values())


def _passes(entry: list[Any], min_score: float) -> bool:
    return bool(entry[1] >= min_score or entry[2])


def _rank(ranked: list[list[Any]], gold: str | None, min_score: float = -1.0) -> int | None:
    kept = [e[0] for e in ranked if _passes(e, min_score)]
    if gold in kept[:10]:
        return kept.index(gold) + 1
    return None


def metrics(ranks: list[int | None]) -> dict[str, float]:
    n = max(len(ranks), 1)
    out = {f"recall@{k}": sum(1 for r in ranks if r is not None and r <= k) / n for k in KS}
    out["mrr"] = sum(1.0 / r for r in ranks if r is not None) / n
    out["n"] = len(ranks)
    return out


def run_evaluation(config: Config, out: Path, *, threads: int = 1) -> Path:
    import torch

    from companion.models import embedder_path, load_embedder
    from companion.rag.retrieval import RetrievalOptions
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore
    from evals.pad.corpus import generate_records
    from evals.rag.report import write_report

    torch.set_num_threads(threads)
    rng = random.Random(config.seed)
    lee = lee_articles(config.lee_docs)
    notes = generate_records(config.notes)
    docs = documents(lee, notes)
    texts = {d.name: d.text for d in docs}
    questions = (
        template_questions(lee, config.template_questions, rng)
        + paraphrase_questions(lee)
        + rare_questions(notes, config.rare_questions, rng)
        + offtopic_questions()
    )
    small_docs, small_questions = small_store(config.small_store_notes, seed=config.seed)
    cl_docs, cl_questions = changelog_store(
        config.changelog_packages, config.changelog_entries, config.changelog_questions, config.seed
    )
    embedder = load_embedder("cpu")
    results: dict[str, Any] = {
        "meta": {
            "config": {
                "lee_docs": config.lee_docs,
                "notes": config.notes,
                "template_questions": config.template_questions,
                "rare_questions_per_kind": config.rare_questions,
                "small_store_notes": config.small_store_notes,
                "changelog_packages": config.changelog_packages,
                "changelog_entries": config.changelog_entries,
                "tokenizers": list(config.tokenizers),
                "seed": config.seed,
                "smoke": config.smoke,
            },
            "embedder": model_identity(embedder_path(), name="all-MiniLM-L6-v2"),
            "environment": environment(device="cpu"),
        },
        "questions": {},
        "overlap": {},
    }
    for kind in ("template", "paraphrase", "rare"):
        qs = [q for q in questions if q.kind == kind]
        results["questions"][kind] = len(qs)
        results["overlap"][kind] = (
            statistics.mean(overlap(q.text, texts[q.gold]) for q in qs if q.gold) if qs else None
        )
    results["questions"]["offtopic"] = len(offtopic_questions())
    results["questions"]["small"] = len(small_questions)
    results["questions"]["changelog"] = len(cl_questions)
    results["changelog_documents"] = len(cl_docs)
    with tempfile.TemporaryDirectory(prefix="veil-eval-rag-") as tmp:
        base = Path(tmp) / "unicode61.sqlite3"
        rag = RagService(DocumentStore(base, fts_tokenizer="unicode61"), embedder)
        seconds = _ingest(rag, docs)
        results["ingest"] = {
            "documents": len(docs),
            "chunks": rag.store.chunk_count(),
            "seconds": round(seconds, 2),
        }
        rag.store.close()
        small_path = Path(tmp) / "small.sqlite3"
        small_rag = RagService(DocumentStore(small_path, fts_tokenizer="unicode61"), embedder)
        _ingest(small_rag, small_docs)
        small_rag.store.close()
        cl_path = Path(tmp) / "changelog.sqlite3"
        cl_rag = RagService(DocumentStore(cl_path, fts_tokenizer="unicode61"), embedder)
        _ingest(cl_rag, cl_docs)
        results["ingest"]["changelog_chunks"] = cl_rag.store.chunk_count()
        cl_rag.store.close()
        every = questions + small_questions + cl_questions
        vectors = np.asarray(embedder.encode([q.text for q in every], batch_size=32), np.float32)
        qvec = {id(q): v for q, v in zip(every, vectors, strict=True)}
        stores: dict[str, Any] = {}
        small_stores: dict[str, Any] = {}
        cl_stores: dict[str, Any] = {}
        for tok in config.tokenizers:
            path, spath, cpath = base, small_path, cl_path
            if tok != "unicode61":
                path, spath = Path(tmp) / f"{tok}.sqlite3", Path(tmp) / f"small-{tok}.sqlite3"
                cpath = Path(tmp) / f"changelog-{tok}.sqlite3"
                shutil.copy(base, path)
                shutil.copy(small_path, spath)
                shutil.copy(cl_path, cpath)
            stores[tok] = DocumentStore(path, fts_tokenizer=tok)
            small_stores[tok] = DocumentStore(spath, fts_tokenizer=tok)
            cl_stores[tok] = DocumentStore(cpath, fts_tokenizer=tok)
            results.setdefault("fts_bytes", {})[tok] = fts_bytes(stores[tok])
        rows = []
        ranked_by: dict[str, dict[str, list[list[Any]]]] = {}
        for cfg in configurations(config.tokenizers):
            tok = cfg["tokenizer"] or config.tokenizers[0]
            options = RetrievalOptions(
                mode=cfg["mode"],
                fusion=cfg["fusion"],
                weight=cfg["weight"],
                common_weight=cfg.get("common_weight", DEFAULT_COMMON),
                min_score=None,
            )
            start = time.perf_counter()
            ranked = {q.text: _ranked_docs(stores[tok], q, qvec[id(q)], options) for q in questions}
            latency = (time.perf_counter() - start) / max(len(questions), 1)
            ranked_small = {
                q.text: _ranked_docs(small_stores[tok], q, qvec[id(q)], options)
                for q in small_questions
            }
            ranked_cl = {
                q.text: _ranked_docs(cl_stores[tok], q, qvec[id(q)], options) for q in cl_questions
            }
            ranked_by[cfg["label"]] = ranked
            row: dict[str, Any] = {**cfg, "latency_ms": round(1000 * latency, 2), "kinds": {}}
            for kind in ("template", "paraphrase", "rare"):
                qs = [q for q in questions if q.kind == kind]
                row["kinds"][kind] = metrics([_rank(ranked[q.text], q.gold) for q in qs])
                if kind == "rare":
                    for detail in sorted({q.detail for q in qs}):
                        row["kinds"][f"rare:{detail}"] = metrics(
                            [_rank(ranked[q.text], q.gold) for q in qs if q.detail == detail]
                        )
            row["kinds"]["small"] = metrics(
                [_rank(ranked_small[q.text], q.gold) for q in small_questions]
            )
            for detail in ("mrn", "email", "surname"):
                row["kinds"][f"small:{detail}"] = metrics(
                    [
                        _rank(ranked_small[q.text], q.gold)
                        for q in small_questions
                        if q.detail == detail
                    ]
                )
            row["kinds"]["changelog"] = metrics(
                [_rank(ranked_cl[q.text], q.gold) for q in cl_questions]
            )
            for detail in sorted({q.detail for q in cl_questions}):
                row["kinds"][f"changelog:{detail}"] = metrics(
                    [_rank(ranked_cl[q.text], q.gold) for q in cl_questions if q.detail == detail]
                )
            # the threshold as the chat applies it (0.2 unless the chunk names the question's
            # id or name): right document first
            row["kinds"]["rare@0.2"] = metrics(
                [_rank(ranked[q.text], q.gold, 0.2) for q in questions if q.kind == "rare"]
            )
            rows.append(row)
        for s in list(stores.values()) + list(small_stores.values()) + list(cl_stores.values()):
            s.close()
    results["configs"] = rows
    results["defaults"] = companion_defaults()
    results["thresholds"] = threshold_sweep(questions, ranked_by)
    write_results(out, results)
    write_report(results, out)
    return out / REPORT


def companion_defaults() -> dict[str, Any]:
    """The retrieval defaults the companion ships (companion/settings.py, the store's)."""
    from companion.rag.store import DEFAULT_FTS_TOKENIZER
    from companion.settings import Settings

    fields = Settings.model_fields
    names = (
        "retrieval_mode",
        "retrieval_fusion",
        "retrieval_weight",
        "retrieval_common_weight",
        "retrieval_min_score",
    )
    return {
        **{n: fields[n].default for n in names if n in fields},
        "fts_tokenizer": DEFAULT_FTS_TOKENIZER,
    }


def fts_bytes(store: Any) -> int | None:
    """Bytes of the store's FTS5 tables (SQLite's dbstat, where it is compiled in)."""
    try:
        row = store._conn.execute(
            "SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'chunks_fts%'"
        ).fetchone()
    except Exception:  # no dbstat in this SQLite build
        return None
    return None if row is None or row[0] is None else int(row[0])


def threshold_sweep(
    questions: list[Question], ranked_by: dict[str, dict[str, list[list[Any]]]]
) -> dict[str, list[dict[str, float]]]:
    """Per configuration and cosine threshold: recall@5 of the answerable questions and the
    share of off-topic questions that retrieve nothing."""
    sweep: dict[str, list[dict[str, float]]] = {}
    answerable = [q for q in questions if q.gold is not None]
    offtopic = [q for q in questions if q.gold is None]
    for label, ranked in ranked_by.items():
        points = []
        for t in THRESHOLDS:
            ranks = [_rank(ranked[q.text], q.gold, t) for q in answerable]
            empty = [not any(_passes(e, t) for e in ranked[q.text]) for q in offtopic]
            points.append(
                {
                    "threshold": t,
                    "recall@5": sum(1 for r in ranks if r is not None and r <= 5) / len(ranks),
                    "offtopic_empty": sum(empty) / max(len(empty), 1),
                }
            )
        sweep[label] = points
    return sweep
