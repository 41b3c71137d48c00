"""docs/accents/report.md from results.json (tables only)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evals.common import command, describe_environment, markdown_table
from evals.common import write_report as _write

__all__ = ["write_report"]

_NAMES = {"fr": "French", "de": "German", "es": "Spanish", "pt": "Portuguese", "it": "Italian"}
_MODES = {
    "scripts": "per script (base + mark slot)",
    "ascii": "everything into ASCII",
    "fold": "accents into ASCII",
}


def _pct(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{100 * value:.1f}%"


def write_report(results: Any, out: Path) -> Path:
    cfg = results.config
    rows = results.restoration
    lines = [
        "# Accents into ASCII: Latin-script languages at equal ε per letter",
        "",
        "Three per-site alphabet modes, each at the same worst-case ε per Latin letter: "
        "**per script** (`scripts`: ASCII base slot + mark slot, ε/2 each, the mark slot on for "
        "the whole prompt once it has an accented letter), **everything into ASCII** (`ascii`: "
        "an accented letter becomes a uniformly random ASCII character), **accents into ASCII** "
        "(`fold`, `py_core.accents`: an accented letter is sent as its ASCII base letter, then "
        "k-RR over ASCII, one slot of ε; Hangul, Cyrillic and Greek keep their alphabets as in "
        "`scripts`). Restorer: exact Bayes decoding of each mode's channel, word by word, over "
        "the language's `wordfreq` list (data CC BY-SA 4.0), an out-of-vocabulary hypothesis "
        "returning the word as seen. *Read as meant*: the restored word equals the original up "
        "to its accents (`fold(restored) == fold(original)`: é and e are one input in `fold`, "
        "and a reader of the language reads `ecole` as école); *exact*: with its accents. "
        "Pr[T0]: the receipt's chance that the word (in `fold`, the folded word) arrives "
        "unchanged.",
        "",
        "Corpus: real sentences -- the human translations of Debian's program messages in this "
        "machine's gettext catalogs (`/usr/share/locale/LANG/LC_MESSAGES/*.mo`: coreutils, "
        "apt, dpkg, git, GTK, PostgreSQL, ...; messages of six or more words of letters only; "
        "technical prose) -- with "
        f"{cfg['pii_per_document']} values from Faker's locale providers (names, streets, "
        "cities, phone numbers, e-mail addresses, dates) planted between the sentences of each "
        f"document of about {cfg['document_words']} words; seed {cfg['seed']}.",
        "",
    ]
    corpus_rows = [
        (
            _NAMES.get(lang, lang),
            c["documents"],
            c["words"],
            c["sensitive"],
            _pct(c["accented_words"] / c["words"]) if c["words"] else "-",
            f"{c['sentences_available']} from {c['catalogs']} catalogs",
            c["sentences_sha256"][:12],
        )
        for lang, c in results.corpus.items()
    ]
    lines += [
        markdown_table(
            (
                "language",
                "documents",
                "words",
                "sensitive",
                "words with an accent",
                "sentences available",
                "sha256 of those used",
            ),
            corpus_rows,
        ),
        "",
        "## Findings",
        "",
        *(f"- {note}" for note in results.notes),
        "",
        "## Default per language",
        "",
        "Chosen by the measurement: the mode whose common words are read as meant most often, "
        f"summed over ε per letter in {', '.join(f'{e:g}' for e in cfg['letter_epsilons'])}.",
        "",
        markdown_table(
            ("language", "default", *(_MODES[m] for m in _MODES)),
            [
                (
                    _NAMES.get(lang, lang),
                    f"`{d['mode']}`",
                    *(f"{d['score'][m]:.3f}" for m in _MODES),
                )
                for lang, d in results.defaults.items()
            ],
        ),
        "",
    ]
    for lang in results.corpus:
        table = []
        for eps in cfg["letter_epsilons"]:
            for mode in _MODES:
                common = next(
                    (
                        r
                        for r in rows
                        if (r["language"], r["mode"], r["letter_epsilon"], r["group"])
                        == (lang, mode, eps, "common")
                    ),
                    None,
                )
                sensitive = next(
                    (
                        r
                        for r in rows
                        if (r["language"], r["mode"], r["letter_epsilon"], r["group"])
                        == (lang, mode, eps, "sensitive")
                    ),
                    None,
                )
                if common is None or sensitive is None:
                    continue
                table.append(
                    (
                        f"{eps:g}",
                        f"{_MODES[mode]} ({common['slot_epsilon']:g}/slot)",
                        _pct(common["restored_folded"]),
                        _pct(common["restored"]),
                        _pct(common["pr_t0"]),
                        _pct(sensitive["restored_folded"]),
                        _pct(sensitive["pr_t0"]),
                        f"{100 * (sensitive['restored_folded'] - sensitive['pr_t0']):+.1f}",
                    )
                )
        cats = [
            r
            for r in rows
            if r["language"] == lang
            and r["mode"] == "fold"
            and r["group"].startswith("sensitive: ")
        ]
        lines += [
            f"## {_NAMES.get(lang, lang)}",
            "",
            markdown_table(
                (
                    "ε per letter",
                    "mode",
                    "common: read as meant",
                    "common: exact",
                    "common Pr[T0]",
                    "sensitive: read as meant",
                    "sensitive Pr[T0]",
                    "gap (points)",
                ),
                table,
            ),
            "",
            "Sensitive words by category, accents into ASCII, read as meant / Pr[T0]: "
            + "; ".join(
                f"{r['group'][11:]} at ε {r['letter_epsilon']:g}: {_pct(r['restored_folded'])} / "
                f"{_pct(r['pr_t0'])} (n={r['n_words']})"
                for r in cats
            )
            + ".",
            "",
        ]
    lines += ["## Examples (ε 6 per letter, first document)", ""]
    lines.append(
        markdown_table(
            ("language", "mode", "original", "sent", "restored"),
            [
                (
                    _NAMES.get(e["language"], e["language"]),
                    e["mode"],
                    *(e[k].replace("|", "\\|") for k in ("original", "sent", "restored")),
                )
                for e in results.examples
            ],
        )
    )
    total = sum(results.timings.values())
    lines += [
        "",
        "## How this was run",
        "",
        f"`{command('accents', out, smoke=cfg['smoke'])}`",
        "",
        f"Time: {total:.0f} s in all.",
        "",
        f"Environment: {describe_environment(results.environment)}",
        "",
    ]
    return _write(out, "\n".join(lines))
