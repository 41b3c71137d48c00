"""evals.accents: the real-sentence corpus, the fold channel of the restorer, the defaults, a smoke run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evals.accents import SMOKE, goal_notes
from evals.accents.corpus import build, sentences
from evals.accents.pipeline import choose_defaults, slot_epsilon

pytest.importorskip("wordfreq")
pytest.importorskip("faker")


def test_corpus_is_real_sentences_with_planted_pii_and_seeded() -> None:
    pool, catalogs = sentences("fr")
    if not pool:
        pytest.skip("this machine has no French gettext catalogs (the smoke run falls back)")
    assert catalogs and all(len(s.split()) >= 6 for s in pool)
    a, b = build("fr", 200, seed=0), build("fr", 200, seed=0)
    assert [d.text for d in a.documents] == [d.text for d in b.documents] and a.sha256 == b.sha256
    assert build("fr", 200, seed=1).documents[0].text != a.documents[0].text
    words = [w for d in a.documents for w in d.words]
    assert sum(not w.sensitive for w in words) >= 200
    assert {w.category for w in words if w.sensitive} <= {
        "name",
        "street",
        "city",
        "phone",
        "email",
        "date",
    }
    assert all(d.text.split(" ") == [w.text for w in d.words] for d in a.documents)
    assert any(not w.text.isascii() for w in words)


def test_the_fold_channel_reads_an_accentless_word_as_the_accented_one() -> None:
    import wordfreq

    from evals.accents.restorer import LatinRestorer

    freq = wordfreq.get_frequency_dict("fr", "large")
    top = sorted(freq, key=lambda w: -freq[w])[:6000]
    restorer = LatinRestorer("fr", {w: math.log10(freq[w] * 1e9) for w in top}, words=3000)
    # Sent in fold mode: é arrived as e, one letter then changed by k-RR.
    assert restorer.restore("ecoIe", 6.0, "fold", False) == "école"
    assert restorer.restore("tres", 6.0, "fold", False) == "très"
    # Everything into ASCII: an accented letter is a random character, the rest read as seen.
    assert restorer.restore("tr#s", 6.0, "ascii", False) == "très"


def test_defaults_follow_the_measured_common_word_rate() -> None:
    rows = [
        {"language": "fr", "mode": m, "group": "common", "letter_epsilon": e, "restored_folded": r}
        for m, e, r in [
            ("scripts", 6.0, 0.06),
            ("ascii", 6.0, 0.60),
            ("fold", 6.0, 0.62),
            ("scripts", 8.0, 0.26),
            ("ascii", 8.0, 0.90),
            ("fold", 8.0, 0.89),
        ]
    ]
    assert choose_defaults(rows, ["fr"], [6.0])["fr"]["mode"] == "fold"
    assert choose_defaults(rows, ["fr"], [8.0])["fr"]["mode"] == "ascii"
    assert slot_epsilon("scripts", 6.0) == 3.0 and slot_epsilon("fold", 6.0) == 6.0


def test_smoke_run_writes_results_and_a_report(tmp_path: Path) -> None:
    from evals.accents.pipeline import Results, run_evaluation
    from evals.accents.report import write_report

    results = run_evaluation(SMOKE, tmp_path)
    results.notes.extend(goal_notes(results))
    report = write_report(results, tmp_path).read_text(encoding="utf-8")
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert set(data["defaults"]) == set(SMOKE.languages)
    for language in SMOKE.languages:
        fold = [r for r in data["restoration"] if r["language"] == language and r["mode"] == "fold"]
        assert fold and all(r["slot_epsilon"] == r["letter_epsilon"] for r in fold)
        scripts = [
            r for r in data["restoration"] if r["language"] == language and r["mode"] == "scripts"
        ]
        assert all(r["slot_epsilon"] == r["letter_epsilon"] / 2 for r in scripts)
    assert "veil eval accents" in report and "## Default per language" in report
    again = Results.from_dict(data)
    again.notes.extend(goal_notes(again))
    assert write_report(again, tmp_path / "again").read_text(encoding="utf-8") == report
