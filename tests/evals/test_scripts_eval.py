"""evals.scripts: the Korean/French corpus, the restorers, the smoke run, the goal notes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evals.scripts import SMOKE, goal_notes
from evals.scripts.corpus import generate
from py_core import alphabets

pytest.importorskip("wordfreq")


def test_corpus_is_seeded_and_marks_pii_in_each_language() -> None:
    """The same seed gives the same documents; PII tokens carry their category."""
    for language in ("ko", "fr"):
        a, b = generate(language, 4, 0), generate(language, 4, 0)
        assert [d.text for d in a] == [d.text for d in b]
        assert generate(language, 4, 1)[0].text != a[0].text
        words = [w for d in a for w in d.words]
        assert {w.category for w in words if w.sensitive} >= {"name", "phone", "address"}
        assert all(d.text.split(" ") == [w.text for w in d.words] for d in a)
    assert any(alphabets.script_of(c) == "hangul" for c in generate("ko", 1, 0)[0].text)
    assert alphabets.has_latin_marks(" ".join(d.text for d in generate("fr", 4, 0)))


@pytest.fixture(scope="module")
def korean():  # type: ignore[no-untyped-def]
    import wordfreq

    from evals.scripts.restorers import KoreanRestorer

    freq = {
        w: math.log10(f * 1e9)
        for w, f in wordfreq.get_frequency_dict("ko", "small").items()
        if f > 0
    }
    return KoreanRestorer(freq, stems=300, suffixes=60)


def test_korean_restorer_fixes_one_changed_slot_and_keeps_a_random_name(korean) -> None:  # type: ignore[no-untyped-def]
    """병원 with its vowel changed comes back at ε 6; an unchanged rare name stays as seen."""
    s = ord("원") - 0xAC00
    changed = chr(0xAC00 + (s // 588) * 588 + ((s // 28 % 21 + 3) % 21) * 28 + s % 28)
    assert korean.restore_word("병" + changed, 6.0) == "병원"
    assert korean.restore_word("뷁퉯", 6.0) == "뷁퉯"
    assert korean.restore_word("병원.", 6.0) == "병원."
    # Into ASCII, a Korean word is unrecoverable: the ASCII garbage comes back as seen.
    assert korean.restore_word("x7", 6.0, ascii_mode=True) == "x7"


def test_smoke_run_writes_results_and_a_report(tmp_path: Path) -> None:
    """The smoke configuration runs end to end and its results re-render the same report."""
    from evals.scripts.pipeline import run_evaluation
    from evals.scripts.report import write_report

    results = run_evaluation(SMOKE, tmp_path)
    results.notes.extend(goal_notes(results))
    report = write_report(results, tmp_path).read_text(encoding="utf-8")
    assert report.startswith("# k-RR per script")
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    modes = {(r["language"], r["mode"]) for r in data["restoration"]}
    assert modes == {("ko", "scripts"), ("ko", "ascii"), ("fr", "scripts"), ("fr", "ascii")}
    ascii_ko = [
        r
        for r in data["restoration"]
        if r["language"] == "ko" and r["mode"] == "ascii" and r["group"] == "common"
    ]
    assert all(r["restored"] < 0.05 for r in ascii_ko)  # everything-into-ASCII: Korean is noise
    for r in data["restoration"]:
        if r["n_words"]:
            assert 0.0 <= r["pr_t0"] <= 1.0 and 0.0 <= r["restored"] <= 1.0


def test_goal_notes_state_met_or_not_from_the_numbers() -> None:
    """goal_notes reads the rows at the English reference ε and says MET / NOT MET."""

    from types import SimpleNamespace

    rows = [
        {
            "language": "ko",
            "mode": "scripts",
            "epsilon": 6.0,
            "group": "common",
            "restored": 0.7,
            "pr_t0": 0.6,
        },
        {
            "language": "ko",
            "mode": "scripts",
            "epsilon": 6.0,
            "group": "sensitive",
            "restored": 0.2,
            "pr_t0": 0.4,
        },
        {
            "language": "ko",
            "mode": "ascii",
            "epsilon": 6.0,
            "group": "common",
            "restored": 0.0,
            "pr_t0": 0.0,
        },
    ]
    results = SimpleNamespace(
        config={"languages": ["ko"]},
        english_reference={"epsilon": 6.0, "restored": 0.79},
        unsupported=[],
        restoration=rows,
    )
    (note,) = goal_notes(results)
    assert "70.0% per script -> MET" in note and "(-20.0 points) -> NOT MET" in note
