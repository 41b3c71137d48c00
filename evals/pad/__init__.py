"""PAD: extraction attacks against local RAG and the decoding defenses (veil eval pad).

Runs Zeng-style attacks and benign questions against a synthetic corpus of
doctor-patient dialogues with planted PII, for every decoding defense, a sweep
of their main knobs and ablations; writes ``report.md``, ``results.json`` and
plots to ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI (about 2 min)")
    parser.add_argument("--out", type=Path, default=None, help="report folder")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def run(args: argparse.Namespace) -> int:
    from evals.pad.runner import run_evaluation

    out = args.out or Path("docs/pad" if not args.smoke else "build/pad-smoke")
    run_evaluation(args.smoke, out, threads=args.threads)
    print(f"report: {out / 'report.md'}")
    return 0
