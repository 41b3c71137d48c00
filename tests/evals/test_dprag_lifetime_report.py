"""The lifetime report never shows a note's epsilon it did not measure (issue 26)."""

from __future__ import annotations

from evals.dprag.lifetime import summary
from evals.dprag.lifetime_report import NOT_MEASURED, section


def _results(**extra):
    row = {
        "defense": "dp_answer",
        "kind": "population",
        "support": 50,
        "correct": True,
        "cached": False,
        "seconds": 1.0,
        "identifiers_found": [],
    }
    return {"lifetime": {"config": {"document_epsilon": 10.0}, "rows": [row], **extra}}


def test_a_run_stopped_before_the_notes_spend_says_not_measured(tmp_path):
    text = "\n".join(section(_results(), tmp_path))
    assert NOT_MEASURED in text
    assert "0.0000 (goal" not in text


def test_a_run_with_the_notes_spend_reports_the_largest(tmp_path):
    docs = [
        {"answers": 2, "spent_rdp": 1.0, "epsilon_filter": 3.25, "epsilon_exact": 3.0},
        {"answers": 1, "spent_rdp": 0.5, "epsilon_filter": 1.5, "epsilon_exact": 1.4},
    ]
    results = _results(documents=docs)
    s = summary(results["lifetime"])
    assert s["max_epsilon_filter"] == 3.25 and s["documents_charged"] == 2
    text = "\n".join(section(results, tmp_path))
    assert "3.2500 (goal ≤ 10.0)" in text and NOT_MEASURED not in text


def test_the_digest_by_model_table_counts_each_models_answers(tmp_path):
    def row(model, digest, none):
        return {
            "model": model,
            "digest_correct": digest,
            "none_correct": none,
            "digest_seconds": 1.0,
            "none_seconds": 2.0,
        }

    part = {
        "questions": 3,
        "strong_without_digest": 1,
        "rows": [row("a", True, True), row("a", True, False), row("a", False, True)]
        + [row("b", True, True)] * 3,
        "errors": {"c": "FileNotFoundError: not installed"},
    }
    text = "\n".join(section(_results(digest_models=part), tmp_path))
    assert "| a | 2/3 | 2/3 | 1.00 | 1.0 | 2.0 |" in text
    assert "| b | 3/3 | 3/3 | 1.00 |" in text
    assert "| c | not loaded |" in text
    assert "did not speak to (answered by dp_answer, not rerun here): 1." in text
