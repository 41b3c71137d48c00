"""bench/answers_bench.py: its scoring, and its smoke run with the bundled SmolLM2."""

from __future__ import annotations

import json

import pytest

from bench.answers_bench import QUESTIONS, Question, first_line, score


def test_answers_are_scored_on_their_first_line():
    phone = Question("phone?", ("4155550142",), digits=True)
    assert score(phone, "It is (415) 555-0142.\nAnything else?")
    assert not score(phone, "14 March 2025")  # a date for a phone number: the case
    assert not score(phone, "I am not sure.\n(415) 555-0142")  # only the first line counts
    doctor = Question("doctor?", ("marsh",))
    assert score(doctor, "Dr. Helena Marsh") and not score(doctor, "Dr. Samuel Ortiz")
    unknown = Question("blood type?", ())
    assert score(unknown, "The documents do not say.") and not score(unknown, "A positive.")
    assert first_line("\n\n  x \n y") == "x"
    assert sum(1 for q in QUESTIONS if not q.gold) == 2 and len(QUESTIONS) == 14


@pytest.mark.slow
def test_the_smoke_run_answers_through_the_chat_pipeline(tmp_path):
    from bench.answers_bench import main

    out = tmp_path / "answers.json"
    assert main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r["defense"] for r in rows] == ["none", "copy_aware"]
    assert all(r["questions"] == 3 and len(r["answers"]) == 3 for r in rows)
    assert all(isinstance(a["answer"], str) and a["answer"] for r in rows for a in r["answers"])
