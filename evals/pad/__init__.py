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
    parser.add_argument(
        "--shard", default=None, help="I/N: run every N-th configuration from I (parallel runs)"
    )
    parser.add_argument("--merge", action="store_true", help="merge shard results into a report")
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16"),
        help="the chat model's precision (auto, as the companion: bfloat16 where fast)",
    )


def run(args: argparse.Namespace) -> int:
    from evals.pad.runner import merge_shards, run_evaluation
    from py_core.errors import InvalidParameterError

    out = args.out or Path("docs/pad" if not args.smoke else "build/pad-smoke")
    if args.merge:
        merge_shards(out)
        print(f"report: {out / 'report.md'}")
        return 0
    shard = None
    if args.shard:
        try:
            i, n = (int(x) for x in args.shard.split("/"))
        except ValueError:
            raise InvalidParameterError(f"--shard must look like 0/3; got {args.shard!r}") from None
        if not 0 <= i < n:
            raise InvalidParameterError(f"--shard {args.shard!r}: need 0 <= I < N")
        shard = (i, n)
    run_evaluation(args.smoke, out, threads=args.threads, shard=shard, dtype=args.dtype)
    if shard is not None:
        return 0
    print(f"report: {out / 'report.md'}")
    return 0
