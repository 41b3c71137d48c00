"""Answers: right answers, refusals, citations and speed per model x defense x owner/guest.

``veil eval answers`` asks questions built from real Debian records on this machine
(:mod:`evals.answers.corpus`: changelog entries and machine-readable copyright files,
each question answered by exactly one document, plus questions the documents do not
answer) through the companion's own HTTP API in process (:mod:`evals.answers.runner`):
the owner with the defense named in the request, guests through guest keys.  An answer
is right when its first line holds the recorded value (or, for an unanswerable question,
declines).  Writes ``report.md``, ``results.json`` and plots to ``--out``
(:mod:`evals.common`).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from evals.answers.config import FULL, SMOKE, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "render"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument(
        "--models", nargs="+", default=None, help="model ids (GET /v1/models) to evaluate"
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="ask only the first N questions (all kinds)"
    )
    parser.add_argument(
        "--cells",
        nargs="+",
        default=None,
        metavar="WHO:DEFENSE",
        help="e.g. owner:none owner:copy_aware guest:copy_aware guest:bounded",
    )
    parser.add_argument("--max-tokens", type=int, default=None, dest="max_tokens")
    parser.add_argument(
        "--changelog-packages",
        type=int,
        default=None,
        dest="changelog_packages",
        help="packages whose changelog entries are stored (a smaller store ingests faster)",
    )
    parser.add_argument("--copyright-packages", type=int, default=None, dest="copyright_packages")


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    from evals.answers.runner import run_evaluation

    changes: dict[str, Any] = {}
    if args.models:
        changes["models"] = tuple(args.models)
    if args.limit is not None:
        changes["limit"] = args.limit
    if args.max_tokens is not None:
        changes["max_tokens"] = args.max_tokens
    for name in ("changelog_packages", "copyright_packages"):
        if getattr(args, name, None) is not None:
            changes[name] = getattr(args, name)
    if args.cells:
        changes["cells"] = tuple(tuple(c.split(":", 1)) for c in args.cells)
    return run_evaluation(
        dataclasses.replace(config, **changes), Path(args.out), threads=args.threads
    )


def render(out: Path) -> Path:
    from evals.answers.report import write_report
    from evals.common import read_results

    return write_report(read_results(out), out)
