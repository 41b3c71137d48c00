"""k-RR per script: what a model restores of Korean and French prompts, vs everything-into-ASCII.

``veil eval scripts --out DIR [--smoke]`` generates a seeded corpus of Korean and
French notes and e-mails with planted PII in each language's formats
(:mod:`evals.scripts.corpus`), perturbs it with k-RR per script
(:mod:`py_core.alphabets`) and with the everything-into-ASCII mechanism at
eps in {2, 3, 4, 5, 6, 8}, restores it with a noisy-channel restorer over that
language's ``wordfreq`` list (:mod:`evals.scripts.restorers`), and reports
restoration of common and sensitive words against Pr[T0] per word, the
forecast's calibration check, and the measurement behind the policy for scripts
without an alphabet.  The committed full report is docs/scripts/report.md::

    veil eval scripts --out docs/scripts --write-calibration

``--write-calibration`` also writes py_core/preview_calibration_ko.json and
_fr.json (the popup's forecast for Korean and French words).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evals.common import find_row, report_with_goals
from evals.scripts.config import FULL, SMOKE, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "goal_notes", "render"]

NAME = "scripts"
PY_CORE = Path(__file__).resolve().parents[2] / "py_core"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seed", type=int, default=None, help="corpus and perturbation seed (default 0)"
    )
    parser.add_argument(
        "--write-calibration",
        action="store_true",
        help="also write py_core/preview_calibration_ko.json and _fr.json",
    )


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    from evals.common import config_for
    from evals.scripts.pipeline import run_evaluation
    from evals.scripts.report import write_report
    from py_core.errors import InvalidParameterError

    if config.smoke and getattr(args, "write_calibration", False):
        raise InvalidParameterError("refusing --write-calibration with --smoke (too few documents)")
    config = config_for(args, config, ["seed"])
    results = run_evaluation(
        config,
        args.out,
        write_calibration=PY_CORE if getattr(args, "write_calibration", False) else None,
    )
    return report_with_goals(results, args.out, write_report, goal_notes)


def render(out: Path) -> Path:
    from evals.common import read_results
    from evals.scripts.pipeline import Results
    from evals.scripts.report import write_report

    results = Results.from_dict(read_results(out))
    return report_with_goals(results, out, write_report, goal_notes, echo=False)


def goal_notes(results: Any) -> list[str]:
    """The issue's goals, met or missed, from the measured numbers."""
    notes = []
    ref = results.english_reference or {}
    eps = float(ref.get("epsilon") or 6.0)
    names = {"ko": "Korean", "fr": "French"}
    for language in results.config["languages"]:
        common = find_row(
            results.restoration, language=language, mode="scripts", epsilon=eps, group="common"
        )
        sensitive = find_row(
            results.restoration, language=language, mode="scripts", epsilon=eps, group="sensitive"
        )
        ascii_common = find_row(
            results.restoration, language=language, mode="ascii", epsilon=eps, group="common"
        )
        if not (common and sensitive and ascii_common):
            continue
        gap = 100 * (sensitive["restored"] - sensitive["pr_t0"])
        english = "70%" if ref.get("restored") is None else f"{100 * ref['restored']:.1f}%"
        notes.append(
            f"{names.get(language, language)} at ε={eps:g} (where English common words reach "
            f"{english}): common words "
            f"restored {100 * common['restored']:.1f}% per script -> "
            f"{'MET' if common['restored'] >= 0.60 else 'NOT MET'} (goal ≥ 60%); sensitive "
            f"{100 * sensitive['restored']:.1f}% vs Pr[T0] {100 * sensitive['pr_t0']:.1f}% ({gap:+.1f} points) -> "
            f"{'MET' if abs(gap) <= 10 else 'NOT MET'} (goal within 10 points); everything-into-ASCII "
            f"restores {100 * ascii_common['restored']:.1f}% of the common words."
        )
    if "fr" in results.config["languages"]:
        pairs = []
        for eps in results.config["epsilons"]:
            half = find_row(
                results.restoration, language="fr", mode="scripts", epsilon=eps / 2, group="common"
            )
            whole = find_row(
                results.restoration, language="fr", mode="ascii", epsilon=eps, group="common"
            )
            if half and whole:
                pairs.append(
                    f"{100 * half['restored']:.1f}% per script at ε={eps / 2:g} per slot vs "
                    f"{100 * whole['restored']:.1f}% into ASCII at ε={eps:g}"
                )
        if pairs:
            notes.append(
                "French at equal worst-case ε per letter: with the mark slot on, a Latin letter "
                "costs two slots (base + mark, 2ε), an ASCII-mode letter one (ε); common words "
                "restored: " + "; ".join(pairs) + ". At the same setting per-script French "
                "reads slightly better (accents survive), but per unit of ε the everything-into-"
                "ASCII mode restores French far better with this restorer: an accented letter "
                "sent as random ASCII is only a wildcard to a restorer that knows the language."
            )
    worst = [u for u in results.unsupported if u["epsilon"] <= 8.0]
    if worst:
        top = max(worst, key=lambda u: u["epsilon"])
        notes.append(
            f"Scripts without an alphabet (measured on CJK ideographs, k = {top['cjk_k']}): a character "
            f"would be kept with probability {100 * top['cjk_keep']:.1f}% at ε={top['epsilon']:g} and "
            f"the {top['n_zh_words']} most frequent Chinese words would arrive intact "
            f"{100 * top['cjk_word_pr_t0']:.2f}% of the time (a 16-bit grid leaves b ≤ "
            f"{max(u['cjk_grid_b'] for u in worst)}); such text is noise either way, and the alphabet would "
            "show the script. Policy: these characters stay uniform ASCII (script hidden, never passed "
            "through) and the receipt counts them as unsupported."
        )
    return notes
