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
preview's per-word forecast).  ``--only repeat`` runs only the repeated-disclosure
attack (:mod:`evals.krr.repeat`) and adds it to an existing ``DIR/results.json``,
re-rendering the report (the other sections keep their numbers).  ``SMOKE`` runs the same pipeline on 12 documents
with two LLM calls per step (CI).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

from evals.common import find_row, report_with_goals
from evals.krr.config import FULL, SMOKE, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "goal_notes", "render", "repeat_notes"]

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
    parser.add_argument(
        "--only",
        choices=["repeat"],
        default=None,
        help="run only this section and add it to OUT/results.json from an earlier full run "
        "(repeat: the repeated-disclosure attack); the other sections keep their numbers",
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
    if getattr(args, "only", None) == "repeat":
        return _only_repeat(args, config)
    results = run_evaluation(
        config, args.out, write_calibration=CALIBRATION_TARGET if args.write_calibration else None
    )
    return report_with_goals(results, args.out, write_report, goal_notes)


def _only_repeat(args: argparse.Namespace, config: Config) -> Path:
    """Run the repeated-disclosure attack alone and add it to OUT/results.json."""
    import dataclasses
    import time

    from evals.common import RESULTS, display_path, environment, read_results
    from evals.krr.corpus import generate_corpus, words_of
    from evals.krr.pipeline import Results
    from evals.krr.repeat import repeat_section
    from evals.krr.report import write_report
    from evals.krr.restorers import NoisyChannelRestorer
    from py_core.errors import InvalidParameterError
    from py_core.wordfreq import zipf_frequency

    if args.write_calibration:
        raise InvalidParameterError(
            "--only repeat does not fit the preview calibration; drop --write-calibration"
        )
    if not (args.out / RESULTS).is_file():
        raise InvalidParameterError(
            f"--only repeat adds to {display_path(args.out / RESULTS)} from an earlier run, "
            f"and there is none; run `veil eval krr --out {display_path(args.out)}` first"
        )
    results = Results.from_dict(read_results(args.out))
    stored = results.config
    if stored.smoke != config.smoke or stored.seed != config.seed:
        raise InvalidParameterError(
            f"{display_path(args.out / RESULTS)} is a {'smoke' if stored.smoke else 'full'} run "
            f"with seed {stored.seed}; --only repeat was asked for a "
            f"{'smoke' if config.smoke else 'full'} run with seed {config.seed}: use the same"
        )
    fields = [f.name for f in dataclasses.fields(Config) if f.name.startswith("repeat_")]
    results.config = dataclasses.replace(stored, **{f: getattr(config, f) for f in fields})
    docs = generate_corpus(stored.n_documents, seed=stored.seed)
    n = min(config.repeat_documents, len(docs))
    docs = docs[:n]
    doc_words = [words_of(d) for d in docs]
    doc_zipfs = [[zipf_frequency(w.text) for w in ws] for ws in doc_words]
    env = environment(device="cpu")  # at the start, like the full run's
    t0 = time.perf_counter()
    results.repeat = repeat_section(
        results.config, docs, doc_words, doc_zipfs, NoisyChannelRestorer(context=True)
    )
    results.repeat["environment"] = env
    results.repeat["run"] = (
        f"`veil eval krr --out {display_path(args.out)} --only repeat`, started {env['started']}: "
        "added to the results of the run described above"
    )
    results.timings["repeat_s"] = time.perf_counter() - t0
    return report_with_goals(results, args.out, write_report, goal_notes)


def render(out: Path) -> Path:
    from evals.common import read_results
    from evals.krr.pipeline import Results
    from evals.krr.report import write_report

    results = Results.from_dict(read_results(out))
    return report_with_goals(results, out, write_report, goal_notes, echo=False)


def goal_notes(results: Any) -> list[str]:
    """Plain statements of each goal met or missed, from the measured numbers."""
    notes: list[str] = []
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
    notes.extend(repeat_notes(results.repeat))
    return notes


def repeat_notes(repeat: dict[str, Any]) -> list[str]:
    """The repeated-disclosure goal (issue 13): flat in q with the memo, the leak without."""
    rows = repeat.get("rows") if repeat else None
    if not rows:
        return []
    qs = repeat["sends"]
    q1, qn = qs[0], qs[-1]
    flat, failures = 0, []
    checked = 0
    for r in rows:
        if not r["memo"] or r["q"] != qn or r["adversary"] == "-":
            continue
        base = find_row(
            rows, memo=True, epsilon=r["epsilon"], q=q1, adversary=r["adversary"], group=r["group"]
        )
        if base is None:
            continue
        checked += 1
        bound = 2 * (base["se"] ** 2 + r["se"] ** 2) ** 0.5
        if abs(r["recovered"] - base["recovered"]) <= bound:
            flat += 1
        else:
            failures.append(
                f"ε={r['epsilon']:g} {r['group']} ({r['adversary']}): "
                f"{100 * base['recovered']:.1f}% -> {100 * r['recovered']:.1f}%"
            )
    notes = [
        f"Goal 'with the memo, recovery at q={qn} equals q={q1} within two standard errors': "
        f"{flat} of {checked} (ε, word group, adversary) cells flat -> "
        + ("MET" if checked and flat == checked else "NOT MET")
        + (f" ({'; '.join(failures)})" if failures else "")
        + "."
    ]
    leak = []
    for group in ("sensitive", "non-sensitive"):
        for eps in repeat["epsilons"]:
            if eps != 5.0:
                continue
            a = find_row(
                rows, memo=False, epsilon=eps, q=q1, adversary="vote + restorer", group=group
            )
            b = find_row(
                rows, memo=False, epsilon=eps, q=qn, adversary="vote + restorer", group=group
            )
            best = max(
                (
                    r
                    for r in rows
                    if not r["memo"]
                    and r["epsilon"] == eps
                    and r["q"] == qn
                    and r["group"] == group
                ),
                key=lambda r: r["recovered"],
                default=None,
            )
            if a and b and best:
                leak.append(
                    f"{group} {100 * a['recovered']:.1f}% at q={q1} -> {100 * b['recovered']:.1f}% "
                    f"at q={qn} (strongest adversary, {best['adversary']}: {100 * best['recovered']:.1f}%)"
                )
    if leak:
        notes.append(
            "Without the memo (fresh draw per send, ε=5, vote + restorer): " + "; ".join(leak) + "."
        )
    word = [w for w in repeat.get("single_word", []) if w["q"] in (1, 9)]
    if word:
        parts = [
            f"{'memo' if w['memo'] else 'fresh'} q={w['q']}: {100 * w['recovered']:.1f}%"
            for w in word
        ]
        notes.append(
            f"The issue's single-word check ('{word[0]['word']}', ε=5, vote alone, "
            f"{word[0]['trials']} trials): "
            + ", ".join(parts)
            + " (the issue measured 96.7% at q=9 "
            "vs 2.4% from one send without the memo)."
        )
    return notes
