"""DP-RAG: per-document DP answers (dp_vote) against population and record facts (veil eval dprag).

A seeded corpus of synthetic clinic notes in which invented population facts are
backed by many notes and every identifier by one; the defenses (none, no-RAG,
copy_aware, bounded and dp_vote at several epsilons) answer population and
record questions and extraction attacks with each model, a membership test
gives an AUC, and a run of many questions under the per-note lifetime filter
shows every note's total epsilon; writes ``report.md``, ``results.json`` and
plots to ``--out`` (the contract of :mod:`evals.common`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evals.dprag.config import FULL, SMOKE, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "render"]

OPTIONS = ("filter_questions", "membership", "records")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("auto", "float32", "bfloat16"),
        help="the models' precision (float32: the figures of the other evaluations)",
    )
    parser.add_argument("--records", type=int, default=None, help="notes in the corpus")
    parser.add_argument(
        "--filter-questions", type=int, default=None, help="questions in the filter run"
    )
    parser.add_argument(
        "--membership", type=int, default=None, help="members (and outsiders) asked about"
    )
    parser.add_argument(
        "--stages",
        default=None,
        help="comma-separated subset of main,membership,filter (default: all)",
    )
    parser.add_argument(
        "--lifetime",
        default="full",
        choices=("full", "reduced"),
        help="the lifetime stage's size: full (>= 300 questions, 10 facts per support level) "
        "or reduced (2 facts per level, ~20 min on two cores)",
    )
    parser.add_argument(
        "--models",
        default=None,
        help="comma-separated: smollm2-135m-instruct, gemma-3-270m (default: the config's)",
    )


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    import dataclasses

    from evals.common import config_for
    from evals.dprag.runner import STAGES, run_evaluation
    from py_core.errors import InvalidParameterError

    config = config_for(args, config, OPTIONS)
    if getattr(args, "models", None):
        config = dataclasses.replace(config, models=tuple(args.models.split(",")))
    stages = tuple(args.stages.split(",")) if getattr(args, "stages", None) else STAGES
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise InvalidParameterError(f"--stages: unknown {unknown}; choose from {', '.join(STAGES)}")
    return run_evaluation(
        config,
        Path(args.out),
        threads=args.threads,
        dtype=args.dtype,
        stages=stages,
        lifetime=getattr(args, "lifetime", "full"),
    )


def render(out: Path) -> Path:
    from evals.common import read_results
    from evals.dprag.report import write_report

    return write_report(read_results(out), out)
