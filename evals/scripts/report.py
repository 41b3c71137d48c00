"""docs/scripts/report.md from results.json (no plots: the tables say it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evals.common import command, describe_environment, markdown_table
from evals.common import write_report as _write

__all__ = ["write_report"]

_NAMES = {"ko": "Korean", "fr": "French"}


def _pct(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{100 * value:.1f}%"


def _row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), {})


def write_report(results: Any, out: Path) -> Path:
    cfg = results.config
    lines = [
        "# k-RR per script: Korean and French prompts a model can still read",
        "",
        "Each character is perturbed among characters of its own script "
        "(`py_core.alphabets`: Hangul as 19/21/28 jamo slots, Latin as ASCII base + mark slot, "
        "Cyrillic, Greek); which script each character is in is visible, like word boundaries. "
        "The same texts are also sent through the everything-into-ASCII mechanism (the "
        "per-site `ascii` option). Restorer: exact Bayes decoding of each mechanism's channel "
        "over that language's word list from the `wordfreq` package (data CC BY-SA 4.0); a word "
        "counts as restored only when it comes back exactly. Pr[T0] is each word's own chance of "
        "arriving unchanged (the product of its characters' keep probabilities, as in the receipt).",
        "",
        f"Corpus: {cfg['n_documents']} seeded documents per language (half clinical notes, half "
        "e-mails) with planted names, ID numbers, phone numbers, addresses, e-mails and dates in "
        "that language's formats; seed "
        f"{cfg['seed']}.",
        "",
    ]
    corpus_rows = [
        (
            _NAMES.get(lang, lang),
            c["documents"],
            c["words"],
            c["sensitive"],
            _pct(c["in_table"] / c["words"]) if c["words"] else "-",
            results.restorers.get(lang, "-"),
        )
        for lang, c in results.corpus.items()
    ]
    lines += [
        markdown_table(
            ("language", "documents", "words", "sensitive", "in the forecast's table", "restorer"),
            corpus_rows,
        ),
        "",
        "## Goals",
        "",
    ]
    lines += [f"- {note}" for note in results.notes] + [""]
    ref = results.english_reference or {}
    if ref:
        lines += [
            f"English reference: common words restored "
            f"{_pct(ref.get('restored'))} at ε={ref.get('epsilon'):g} ({ref.get('source')}).",
            "",
        ]
    for lang in cfg["languages"]:
        name = _NAMES.get(lang, lang)
        lines += [f"## {name}: restoration by ε", ""]
        rows = []
        for eps in cfg["epsilons"]:
            cells: list[object] = [f"{eps:g}"]
            for mode in ("scripts", "ascii"):
                common = _row(
                    results.restoration, language=lang, mode=mode, epsilon=eps, group="common"
                )
                sens = _row(
                    results.restoration, language=lang, mode=mode, epsilon=eps, group="sensitive"
                )
                cells += [
                    _pct(common.get("restored")),
                    _pct(common.get("pr_t0")),
                    _pct(sens.get("restored")),
                    _pct(sens.get("pr_t0")),
                ]
            rare = _row(
                results.restoration,
                language=lang,
                mode="scripts",
                epsilon=eps,
                group="sensitive, not in table",
            )
            cells += [f"{_pct(rare.get('restored'))} / {_pct(rare.get('pr_t0'))}"]
            rows.append(cells)
        lines += [
            markdown_table(
                (
                    "ε",
                    "per script: common restored",
                    "common Pr[T0]",
                    "sensitive restored",
                    "sensitive Pr[T0]",
                    "into ASCII: common restored",
                    "common Pr[T0]",
                    "sensitive restored",
                    "sensitive Pr[T0]",
                    "per script, sensitive not in the word list: restored / Pr[T0]",
                ),
                rows,
            ),
            "",
        ]
        cats = [c for c in results.by_category if c["language"] == lang]
        if cats:
            epsilons = sorted({c["epsilon"] for c in cats})
            categories = sorted({c["category"] for c in cats})
            lines += ["Sensitive words by category (per script), restored / Pr[T0]:", ""]
            lines += [
                markdown_table(
                    ("category", *[f"ε {e:g}" for e in epsilons]),
                    [
                        (
                            cat,
                            *[
                                (
                                    f"{_pct(r['restored'])} / {_pct(r['pr_t0'])} (n={r['n_words']})"
                                    if (r := _row(cats, category=cat, epsilon=e))
                                    else "-"
                                )
                                for e in epsilons
                            ],
                        )
                        for cat in categories
                    ],
                ),
                "",
            ]
        check = results.calibration.get(lang, {}).get("check", {})
        if check.get("n"):
            lines += [
                f"Forecast (popup) for {name}, fitted on {cfg['calibration_fraction']:.0%} of the "
                f'documents and checked on the rest ({check["n"]} words): the label "likely '
                f'restored / likely hidden" is right for {_pct(check["accuracy"])} of the words '
                f"(Pr[T0] alone: {_pct(check['accuracy_pr_t0_only'])}).",
                "",
            ]
    if results.examples:
        lines += ["## Examples (ε 6, first document)", ""]
        lines += [
            markdown_table(
                ("language", "mode", "original", "sent", "restored"),
                [
                    (
                        _NAMES.get(e["language"], e["language"]),
                        e["mode"],
                        e["original"].replace("|", "/"),
                        e["sent"].replace("|", "/"),
                        e["restored"].replace("|", "/"),
                    )
                    for e in results.examples
                ],
            ),
            "",
        ]
    if results.unsupported:
        lines += [
            "## Scripts without an alphabet: the measurement behind the policy",
            "",
            "If CJK ideographs (U+4E00..U+9FFF) were one k-RR alphabet, each would be kept with "
            "the ideal probability below; the last column but one is the mean Pr[T0] of the most "
            "frequent Chinese words (`wordfreq`'s zh list). On Veil's 16-bit grid the weight `b` "
            "of each other character would be at most the value shown (so ε would be coarsely "
            "quantised as well). For comparison, a Hangul syllable and an ASCII character at the "
            "same ε.",
            "",
            markdown_table(
                (
                    "ε",
                    "CJK keep p (k = 20992)",
                    "Chinese word Pr[T0]",
                    "grid b",
                    "Hangul syllable keep",
                    "ASCII keep",
                ),
                [
                    (
                        f"{u['epsilon']:g}",
                        _pct(u["cjk_keep"]),
                        f"{100 * u['cjk_word_pr_t0']:.3f}%",
                        u["cjk_grid_b"],
                        _pct(u["hangul_keep"]),
                        _pct(u["ascii_keep"]),
                    )
                    for u in results.unsupported
                ],
            ),
            "",
            "Decision: characters of scripts without an alphabet (CJK, emoji, symbols, other "
            "scripts) are replaced by uniformly random ASCII characters, as in the `ascii` mode: "
            "ε-LDP at any ε, the script stays hidden among ASCII, nothing passes through, and the "
            "receipt counts them (`unsupported_chars`) so the popup can say the model cannot read "
            "them.",
            "",
        ]
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in results.timings.items() if "build" in k)
    total = sum(results.timings.values())
    lines += [
        "## How this was run",
        "",
        f"`{command('scripts', out, *(() if cfg['smoke'] else ('--write-calibration',)), smoke=cfg['smoke'])}`"
        + (" (smoke configuration: too small for conclusions)" if cfg["smoke"] else ""),
        "",
        f"Time: {total:.0f} s in all ({timings}).",
    ]
    env = describe_environment(results.environment)
    if env:
        lines += ["", f"Environment: {env}."]
    return _write(out, "\n".join(lines) + "\n")
