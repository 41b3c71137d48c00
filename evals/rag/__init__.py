"""RAG retrieval: recall@1/5/10 and MRR of vector, BM25 and hybrid retrieval (veil eval rag).

A seeded benchmark from text that ships here: the Lee news corpus of the gensim
wheel and the synthetic consultation notes of :mod:`evals.pad.corpus`, ingested
through the companion's own pipeline (chunking, all-MiniLM-L6-v2, the SQLite
store with its FTS5 index).  Questions with a known gold document: template
questions built from a passage's words, hand-written paraphrases with little word
overlap, and questions naming a rare identifier (record number, e-mail address,
phone number, surname); off-topic questions measure the relevance threshold; a
store of twenty notes repeats the issue's 58% measurement.  Writes
``report.md``, ``results.json`` and plots to ``--out`` (:mod:`evals.common`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evals.rag.config import FULL, SMOKE, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "render"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    from evals.rag.runner import run_evaluation

    return run_evaluation(config, Path(args.out), threads=args.threads)


def render(out: Path) -> Path:
    from evals.common import read_results
    from evals.rag.report import write_report

    return write_report(read_results(out), out)
