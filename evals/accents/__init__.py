"""Accents into ASCII: which alphabet mode reads each Latin-script language best per ε.

``veil eval accents --out DIR [--smoke]`` takes real sentences in French, German,
Spanish, Portuguese and Italian (the human translations in this machine's gettext
catalogs, :mod:`evals.accents.corpus`) with personal data from Faker's locales,
sends them in the three per-site alphabet modes at equal worst-case ε per Latin
letter -- ``scripts`` (ASCII base + mark slot, ε/2 each), ``ascii`` (everything
into ASCII: an accented letter becomes a random ASCII character) and ``fold``
(accents into ASCII, :mod:`py_core.accents`) -- restores them with the exact Bayes
restorer over each language's ``wordfreq`` list (:mod:`evals.accents.restorer`),
and reports common-word recovery and the sensitive words against Pr[T0], and the
mode each language's default follows.  The committed report is
docs/accents/report.md::

    veil eval accents --out docs/accents
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evals.accents.config import FULL, SMOKE, Config
from evals.common import find_row, report_with_goals

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "goal_notes", "render"]

NAME = "accents"
NAMES = {"fr": "French", "de": "German", "es": "Spanish", "pt": "Portuguese", "it": "Italian"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=None, help="corpus and draws seed (default 0)")


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    from evals.accents.pipeline import run_evaluation
    from evals.accents.report import write_report
    from evals.common import config_for

    config = config_for(args, config, ["seed"])
    results = run_evaluation(config, args.out)
    return report_with_goals(results, args.out, write_report, goal_notes)


def render(out: Path) -> Path:
    from evals.accents.pipeline import Results
    from evals.accents.report import write_report
    from evals.common import read_results

    results = Results.from_dict(read_results(out))
    return report_with_goals(results, out, write_report, goal_notes, echo=False)


def goal_notes(results: Any) -> list[str]:
    """Per language: the default chosen, and the sensitive words against Pr[T0] at ε 6."""
    notes = []
    rows = results.restoration
    for language in results.config["languages"]:
        name = NAMES.get(language, language)
        choice = results.defaults.get(language, {}).get("mode")
        at = {
            m: find_row(rows, language=language, mode=m, letter_epsilon=6.0, group="common")
            for m in ("scripts", "ascii", "fold")
        }
        sensitive = find_row(
            rows, language=language, mode="fold", letter_epsilon=6.0, group="sensitive"
        )
        fold, ascii_, scripts = at["fold"], at["ascii"], at["scripts"]
        if fold is None or ascii_ is None or scripts is None or sensitive is None:
            continue
        gap = 100 * (sensitive["restored_folded"] - sensitive["pr_t0"])
        notes.append(
            f"{name} at ε 6 per letter: common words read as meant {100 * fold['restored_folded']:.1f}% "
            f"with accents into ASCII, {100 * ascii_['restored_folded']:.1f}% everything into ASCII, "
            f"{100 * scripts['restored_folded']:.1f}% per script (3 per slot) -> default {choice}; "
            f"sensitive words {100 * sensitive['restored_folded']:.1f}% vs Pr[T0] "
            f"{100 * sensitive['pr_t0']:.1f}% ({gap:+.1f} points: "
            f"{'within' if abs(gap) <= 10 else 'NOT within'} 10)."
        )
    return notes
