"""The repeated-disclosure attack of ``veil eval krr`` (evals/krr/repeat.py)."""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

import pytest

from companion.cli import main
from evals import common
from evals.krr import SMOKE, evaluate, repeat_notes
from evals.krr.corpus import Document, Span, words_of
from evals.krr.repeat import (
    cluster_rate,
    repeated_sends,
    run_repeat,
    vote,
    voted_keep_probability,
)
from py_core.errors import InvalidParameterError


class _Identity:
    """A restorer that returns what it is given: the tests measure the vote itself."""

    name = "identity"

    def restore_one(self, text: str, epsilon: float) -> str:
        return text


def test_vote_is_the_plurality_per_character_and_ties_are_drawn() -> None:
    assert vote(["abc", "abd", "xbd"], random.Random(0)) == "abd"
    # A tie (one of each) is drawn among the tied characters, with the given generator.
    drawn = {vote(["ab", "cd"], random.Random(i)) for i in range(40)}
    assert drawn == {"ab", "ad", "cb", "cd"}
    assert vote(["ab", "cd"], random.Random(3)) == vote(["ab", "cd"], random.Random(3))
    with pytest.raises(InvalidParameterError, match="equal lengths"):
        vote(["abc", "ab"], random.Random(0))
    with pytest.raises(InvalidParameterError, match="at least one"):
        vote([], random.Random(0))


def test_without_the_memo_more_sends_recover_more() -> None:
    """Fresh draws average out: a 9-send vote recovers far more words than one send."""
    text = "Lovelace wrote to Babbage about invoice INV-4471 and Dr Okonkwo"
    words = text.split()
    recovered = {}
    for q in (1, 9):
        hits = 0
        for t in range(40):
            copies = repeated_sends(text, 5.0, q, memo=False, seed=t, tag="t")
            voted = vote(copies, random.Random(t)).split()
            hits += sum(a == b for a, b in zip(voted, words, strict=True))
        recovered[q] = hits / (40 * len(words))
    assert recovered[1] < 0.35
    assert recovered[9] > 0.85
    assert recovered[9] > recovered[1] + 0.4


def test_with_the_memo_the_copies_are_identical_and_the_vote_is_one_send() -> None:
    text = "Lovelace wrote to Babbage about invoice INV-4471, and Lovelace again"
    copies = repeated_sends(text, 5.0, 27, memo=True, seed=1, tag="t")
    assert len(copies) == 27 and len(set(copies)) == 1
    assert copies[0] != text  # it was perturbed, once
    assert vote(copies, random.Random(0)) == copies[0]
    fresh = repeated_sends(text, 5.0, 27, memo=False, seed=1, tag="t")
    assert len(set(fresh)) == 27  # the control: without the memo every send differs
    # The first send is the same draw either way, but for the repeated word.
    memo_words, fresh_words = copies[0].split(" "), fresh[0].split(" ")
    assert memo_words[8] == memo_words[0] != fresh_words[8]
    assert [w for i, w in enumerate(memo_words) if i != 8] == [
        w for i, w in enumerate(fresh_words) if i != 8
    ]


def test_sends_are_seeded() -> None:
    a = repeated_sends("Ada Lovelace", 4.0, 3, memo=False, seed=5, tag="x")
    assert a == repeated_sends("Ada Lovelace", 4.0, 3, memo=False, seed=5, tag="x")
    assert a != repeated_sends("Ada Lovelace", 4.0, 3, memo=False, seed=6, tag="x")
    with pytest.raises(InvalidParameterError, match="positive integer"):
        repeated_sends("Ada", 4.0, 0, memo=False, seed=5)


def test_voted_keep_probability_grows_with_q() -> None:
    p = voted_keep_probability(5.0, (1, 3, 9), trials=3000, seed=0)
    assert 0.58 < p[1] < 0.65  # one send: the mechanism's keep probability, 0.615
    assert p[1] < p[3] < p[9] and p[9] > 0.98


def test_cluster_rate() -> None:
    rate, se = cluster_rate([1, 1], [2, 2])
    assert (rate, se) == (0.5, 0.0)  # every document at the mean: no spread
    rate, se = cluster_rate([2, 0], [2, 2])
    assert rate == 0.5 and se == pytest.approx(0.5)
    assert cluster_rate([1], [2]) == (0.5, 0.0)


def test_run_repeat_flat_with_memo_and_growing_without() -> None:
    text = "Dear Dr Okonkwo, invoice INV-4471 for Ada Lovelace is attached."
    start = text.index("Okonkwo")
    doc = Document(
        "email-0000",
        "email",
        text,
        (Span(start, start + 8, "PERSON"), Span(text.index("INV"), text.index("INV") + 8, "ID")),
    )
    docs = [doc, doc]
    words = [words_of(d) for d in docs]
    zipfs = [[None] * len(ws) for ws in words]
    out = run_repeat(
        docs,
        words,
        zipfs,
        _Identity(),
        epsilons=(5.0,),
        sends=(1, 3, 9),
        seed=0,
        keep_trials=500,
        word_trials=20,
    )
    rows = out["rows"]

    def rate(memo: bool, q: int, group: str) -> float:
        return next(
            r["recovered"]
            for r in rows
            if r["memo"] is memo
            and r["q"] == q
            and r["adversary"] == "vote"
            and r["group"] == group
        )

    for group in ("sensitive", "non-sensitive"):
        assert rate(True, 9, group) == rate(True, 1, group)
        assert rate(False, 9, group) > rate(False, 1, group)
    notes = repeat_notes(out)
    assert notes[0].startswith("Goal 'with the memo") and "-> MET" in notes[0]
    lovelace = {(w["memo"], w["q"]): w["recovered"] for w in out["single_word"]}
    assert lovelace[(True, 9)] == lovelace[(True, 1)]
    assert lovelace[(False, 9)] > lovelace[(False, 1)]


def test_only_repeat_needs_a_matching_earlier_run(tmp_path: Path) -> None:
    """--only repeat adds to an earlier results.json of the same kind, or says what is wrong."""
    assert main(["eval", "krr", "--only", "repeat", "--smoke", "--out", str(tmp_path)]) == 2
    shutil.copy(common.ROOT / "docs" / "krr" / common.RESULTS, tmp_path / common.RESULTS)
    with pytest.raises(InvalidParameterError, match="is a full run with seed 0"):
        evaluate(
            argparse.Namespace(
                out=tmp_path, smoke=True, seed=None, write_calibration=False, only="repeat"
            ),
            SMOKE,
        )
