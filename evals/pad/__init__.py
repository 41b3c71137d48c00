"""PAD: extraction attacks against local RAG and the decoding defenses (veil eval pad).

Runs Zeng-style attacks and benign questions against a synthetic corpus of
doctor-patient dialogues with planted PII, for every decoding defense, a sweep
of their main knobs and ablations; writes ``report.md``, ``results.json`` and
plots to ``--out`` (the contract of :mod:`evals.common`).  A full run can be
split into shards run in parallel (``--shard I/N``) and combined with
``--merge-shards``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evals.pad.config import FULL, SMOKE, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "render"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--shard",
        default=None,
        help="I/N: run every N-th configuration from I into OUT/shards/ (parallel runs)",
    )
    parser.add_argument(
        "--merge-shards",
        action="store_true",
        help="combine OUT/shards/*.json into OUT/results.json and the report",
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16"),
        help="the chat model's precision (auto, as the companion: bfloat16 where fast)",
    )


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    from evals.common import REPORT
    from evals.pad.runner import merge_shards, run_evaluation
    from py_core.errors import InvalidParameterError

    out = Path(args.out)
    if args.merge_shards:
        merge_shards(out)
        return out / REPORT
    shard = None
    if args.shard:
        try:
            i, n = (int(x) for x in args.shard.split("/"))
        except ValueError:
            raise InvalidParameterError(f"--shard must look like 0/3; got {args.shard!r}") from None
        if not 0 <= i < n:
            raise InvalidParameterError(f"--shard {args.shard!r}: need 0 <= I < N")
        shard = (i, n)
    run_evaluation(config, out, threads=args.threads, shard=shard, dtype=args.dtype)
    if shard is not None:
        return out / "shards" / f"shard-{shard[0]}-of-{shard[1]}.json"
    return out / REPORT


def render(out: Path) -> Path:
    from evals.common import read_results
    from evals.pad.report import write_report

    return write_report(read_results(out), out)
