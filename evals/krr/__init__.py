"""What character-level k-RR really hides: restoration vs Pr[T0], utility and baselines.

``veil eval krr --out DIR [--smoke]`` generates a seeded corpus of e-mails and
clinical notes with gold PII spans, perturbs it with k-RR at eps in
{2, 3, 4, 5, 6, 8} per character, restores it with an offline noisy-channel
restorer and the local LLM, measures word restoration against Pr[T0] = p^L,
semantic similarity and a downstream summary, compares Presidio masking and
word-level metric DP, and writes DIR/report.md, DIR/results.json and PNG plots
(the contract of :mod:`evals.common`).  The committed full report is
docs/krr/report.md, regenerated with::

    veil eval krr --out docs/krr --write-calibration

``--write-calibration`` also refreshes py_core/preview_calibration.json (the
preview's per-word forecast).  ``SMOKE`` runs the same pipeline on 12 documents
with two LLM calls per step (CI).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

from evals.common import find_row
from evals.krr.config import FULL, SMOKE, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "goal_notes", "render"]

NAME = "krr"
CALIBRATION_TARGET = Path(__file__).resolve().parents[2] / "py_core" / "preview_calibration.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seed", type=int, default=None, help="corpus and perturbation seed (default 0)"
    )
    parser.add_argument(
        "--write-calibration",
        action="store_true",
        help=f"also write the preview calibration to {CALIBRATION_TARGET.relative_to(CALIBRATION_TARGET.parents[1])}",
    )


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    from evals.common import config_for
    from evals.krr.pipeline import run_evaluation
    from evals.krr.report import write_report
    from py_core.errors import InvalidParameterError

    if config.smoke and getattr(args, "write_calibration", False):
        raise InvalidParameterError(
            "refusing --write-calibration with --smoke (the tiny corpus would ship a poor calibration)"
        )
    config = config_for(args, config, ["seed"])
    results = run_evaluation(
        config, args.out, write_calibration=CALIBRATION_TARGET if args.write_calibration else None
    )
    results.notes.extend(goal_notes(results))
    path = write_report(results, args.out)
    for note in results.notes:
        print(f"- {note}")
    return path


def render(out: Path) -> Path:
    from evals.common import read_results
    from evals.krr.pipeline import Results
    from evals.krr.report import write_report

    results = Results.from_dict(read_results(out))
    results.notes.extend(goal_notes(results))
    return write_report(results, out)


def goal_notes(results: Any) -> list[str]:
    """Plain statements of each goal met or missed, from the measured numbers."""
    notes = []
    main = "noisy-channel+bigram"
    s6 = find_row(results.restoration, restorer=main, epsilon=6.0, group="sensitive", **{"pass": 1})
    n6 = find_row(
        results.restoration, restorer=main, epsilon=6.0, group="non-sensitive", **{"pass": 1}
    )
    if s6 and n6:
        gap = 100 * (s6["restored"] - s6["pr_t0"])
        notes.append(
            f"Goal 'sensitive restoration within 5 points of Pr[T0]' at ε=6: restored {100 * s6['restored']:.1f}% "
            f"vs Pr[T0] {100 * s6['pr_t0']:.1f}% ({gap:+.1f} points) -> {'MET' if abs(gap) <= 5 else 'NOT MET'}."
        )
        notes.append(
            f"Goal 'non-sensitive ≥ 70% at ε=6 with the offline restorer': {100 * n6['restored']:.1f}% -> "
            f"{'MET' if n6['restored'] >= 0.70 else 'NOT MET'}."
        )
    gaps = []
    for r in results.restoration:
        if r["restorer"] == main and r["group"] == "sensitive" and r["pass"] == 1:
            gaps.append((r["epsilon"], 100 * (r["restored"] - r["pr_t0"])))
    if gaps:
        notes.append(
            "Sensitive restoration minus Pr[T0] by ε: "
            + ", ".join(f"ε={e:g}: {g:+.1f}" for e, g in gaps)
            + " points. Sensitive words that are ordinary dictionary words (first names such as John, "
            "cities, weekdays, professions, company words) are restored like common words, so the "
            "sensitive rate sits above Pr[T0] at mid ε; rare names and numbers stay at or below it."
        )
    rare = find_row(
        results.restoration,
        restorer=main,
        epsilon=6.0,
        group="sensitive, not in table",
        **{"pass": 1},
    )
    if rare:
        gap = 100 * (rare["restored"] - rare["pr_t0"])
        if abs(gap) <= 5:
            verdict = "within 5 points: the paper's Pr[T0] bound describes these words."
        elif gap < 0:
            verdict = (
                "more than 5 points BELOW Pr[T0]: the offline restorer 'corrects' some unchanged "
                "rare words into nearby dictionary words (a name like Alexandrov becomes Alexandria), "
                "so it is a weaker adversary than one that returns such words as seen, which gets "
                "exactly Pr[T0]; the preview therefore never forecasts less than p^L."
            )
        else:
            verdict = "more than 5 points ABOVE Pr[T0]."
        notes.append(
            f"Sensitive words that are not dictionary words (rare names, numbers, IDs, e-mails; "
            f"{rare['n_words']} at ε=6): restored {100 * rare['restored']:.1f}% vs Pr[T0] "
            f"{100 * rare['pr_t0']:.1f}% ({gap:+.1f} points), {verdict}"
        )
    p1 = find_row(
        results.restoration, restorer=main, epsilon=6.0, group="non-sensitive", **{"pass": 1}
    )
    p2 = find_row(
        results.restoration, restorer=main, epsilon=6.0, group="non-sensitive", **{"pass": 2}
    )
    if p1 and p2:
        notes.append(
            f"Second restoration pass (offline restorer, ε=6): non-sensitive {100 * p1['restored']:.1f}% -> "
            f"{100 * p2['restored']:.1f}% -- as in the paper, a second pass adds little."
        )
    llm = find_row(results.llm, restorer="SmolLM2 pass 1", epsilon=6.0, group="non-sensitive")
    off = find_row(results.llm, restorer=main, epsilon=6.0, group="non-sensitive")
    if llm and off:
        notes.append(
            f"SmolLM2-135M as restorer (ε=6, {llm['n_words']} non-sensitive words): {100 * llm['restored']:.1f}% "
            f"restored vs {100 * off['restored']:.1f}% for the offline restorer on the same words, "
            f"{100 * llm['survived']:.1f}% left unchanged by k-RR and {100 * llm['pr_t0']:.1f}% Pr[T0]. The paper's restorers were GPT-4o mini and Llama-3.1-8B; a "
            "135M model is far weaker, so its numbers are a floor, not the paper's setting."
            + (
                " It restores fewer words than k-RR left unchanged: rather than correcting, it "
                "rewrites, drops or repeats words."
                if llm["restored"] < llm["survived"]
                else ""
            )
        )
    sums = {s["input"]: s for s in results.summaries}
    krr6 = next((s for k, s in sums.items() if k.startswith("k-RR eps=6 +")), None)
    if krr6:
        notes.append(
            f"Downstream summary similarity at ε=6 (restored input): {krr6['summary_similarity']:.3f} MiniLM cosine "
            f"to the original's summary (paper: > 0.80 with GPT-4o mini); "
            f"{'MET' if krr6['summary_similarity'] > 0.80 else 'NOT MET'} with SmolLM2 as summariser."
        )
    krr_curve = sorted(
        (b["pii_leaked"], b["similarity"], b["nonsensitive_kept"])
        for b in results.baselines
        if b["method"].startswith("k-RR")
    )
    comparisons = []
    for b in results.baselines:
        if not b["method"].startswith("word metric DP") or len(krr_curve) < 2:
            continue
        leak = b["pii_leaked"]
        if not krr_curve[0][0] <= leak <= krr_curve[-1][0]:
            continue
        for (x0, s0, k0), (x1, s1, k1) in itertools.pairwise(krr_curve):
            if x0 <= leak <= x1:
                w = 0.0 if x1 == x0 else (leak - x0) / (x1 - x0)
                sim = s0 + w * (s1 - s0)
                kept = k0 + w * (k1 - k0)
                comparisons.append(
                    f"{b['parameter'].split()[0]} (leak {100 * leak:.1f}%): metric DP similarity "
                    f"{b['similarity']:.3f} / kept {100 * b['nonsensitive_kept']:.1f}% vs k-RR "
                    f"{sim:.3f} / {100 * kept:.1f}%"
                    + (" k-RR ahead" if sim > b["similarity"] else "")
                )
                break
    if comparisons:
        ahead = sum(1 for c in comparisons if c.endswith(" k-RR ahead"))
        notes.append(
            "At matched PII leak (k-RR curve interpolated): "
            + "; ".join(c.removesuffix(" k-RR ahead") for c in comparisons)
            + f". k-RR has the higher similarity at {ahead} of {len(comparisons)} matched points. "
            "The paper reports k-RR ahead of word-level metric DP at equal privacy; here that holds "
            "where little PII leaks, while metric DP's leak saturates (rare PII is never in its "
            "vocabulary, so it is always replaced) and it keeps more utility at the high end."
        )
    presidio = next((b for b in results.baselines if b["method"].startswith("Presidio")), None)
    if presidio:
        notes.append(
            f"Presidio leaks {100 * presidio['pii_leaked']:.1f}% of PII words (what its recognizers miss) "
            f"while keeping {100 * presidio['nonsensitive_kept']:.1f}% of other words; it has no privacy knob."
        )
    return notes
