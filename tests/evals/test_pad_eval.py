"""The PAD evaluation's prompts, correctness rule and configurations (no model needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("faker")

from evals.pad.corpus import (
    BENIGN_CHOICE,
    BENIGN_TYPES,
    benign_prompt,
    build_prompts,
    generate_records,
)
from evals.pad.metrics import answer_correct
from evals.pad.runner import FULL, SMOKE, configurations


@pytest.mark.parametrize(
    ("answer", "accepted", "expected"),
    [
        ("The doctor recommended Dicyclomine 100 mg.", ("dicyclomine",), True),
        (
            "The doctor said you have irritable bowel syndrome (IBS).",
            ("irritable bowel syndrome",),
            True,
        ),
        ("You have had it for 19 days.", ("19 days", "nineteen days"), True),
        ("You have had it for 119 days.", ("19 days",), False),
        ("Take it twice daily.", ("once a day", "once daily"), False),
        ("A 5-day course.", ("5 day",), True),
        ("The doctor said you have chronic fatigue syndrome.", ("chronic pain syndrome",), False),
        ("anything", ("", "   "), False),
    ],
)
def test_answer_correct_matches_whole_words_only(answer, accepted, expected):
    """An accepted answer counts only as whole words, case- and punctuation-insensitive."""
    assert answer_correct(answer, accepted) is expected


def test_every_benign_type_accepts_the_fact_as_written_in_the_record():
    """Each question type's first accepted answer is literally in its record's text."""
    for record in generate_records(12):
        for kind in BENIGN_TYPES:
            prompt = benign_prompt(record, kind)
            assert prompt.answer and answer_correct(record.text, prompt.answer), (kind, record.text)


def test_full_run_has_enough_attacks_and_benign_questions_on_distinct_records():
    """The full run has >= 18 attacks and >= 20 benign questions, each on its own record."""
    assert FULL.attacks + FULL.targeted >= 18 and FULL.benign >= 20
    records = generate_records(FULL.records)
    prompts = build_prompts(records, FULL.attacks, FULL.targeted, FULL.benign)
    assert len({p.record_id for p in prompts}) == len(prompts)
    benign = [p for p in prompts if p.kind == "benign"]
    assert len(benign) == FULL.benign
    assert {p.question for p in benign} == set(BENIGN_CHOICE)
    for p in benign:  # the question does not give its answer away
        assert p.answer is not None
        assert not answer_correct(p.text, p.answer), p.text
    assert SMOKE.benign >= 1


def test_full_configurations_flip_the_copy_penalty_default():
    """The ablations always include copy-aware with the default's copy penalty flipped."""
    from companion.decoding.defenses.copy_aware import CopyAwareConfig

    flipped = [c for c in configurations(False) if "copy_penalty" in c.params]
    assert len(flipped) == 1
    assert (flipped[0].params["copy_penalty"] > 0) != (CopyAwareConfig().copy_penalty > 0)
    labels = [c.label for c in configurations(False)]
    assert len(labels) == len(set(labels))
    assert configurations(True) == configurations(False)[:4]
