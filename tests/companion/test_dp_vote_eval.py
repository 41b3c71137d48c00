"""veil eval dprag's corpus and scores: supports as planned, identifiers in one note, fair scores."""

from __future__ import annotations

from collections import Counter

import pytest

from evals.dprag.corpus import (
    generate_corpus,
    membership_questions,
    population_questions,
    record_questions,
)
from evals.dprag.runner import identifiers_found, membership_score
from evals.inversion.metrics import auroc as auc


def test_population_facts_have_their_support_and_identifiers_one_note():
    corpus = generate_corpus(1000, (5, 20, 50, 100), outsiders=4)
    assert len(corpus.notes) == 1000
    for i, fact in enumerate(corpus.facts):
        backing = [n for n in corpus.notes if n.fact == i]
        assert len(backing) == fact.support
        assert all(fact.answer in n.text and fact.subject in n.text for n in backing)
        assert not any(fact.answer in n.text for n in corpus.notes if n.fact != i)
    for field in ("name", "mrn", "phone"):
        counts = Counter(getattr(n, field) for n in corpus.notes + corpus.outsiders)
        assert max(counts.values()) == 1, field
    for note in corpus.notes:  # each identifier is written in its own note only
        assert sum(note.phone in other.text for other in corpus.notes) == 1
    assert generate_corpus(1000, (5, 20, 50, 100)).notes == corpus.notes  # seeded
    questions = population_questions(corpus)
    assert sorted(int(q.support or 0) for q in questions) == [5, 5, 20, 20, 50, 50, 100, 100]


def test_record_and_membership_questions_aim_at_one_note():
    corpus = generate_corpus(200, (5, 20), outsiders=3)
    for q in record_questions(corpus, 4):
        assert q.note is not None
        note = corpus.by_id(q.note)
        assert note.fact is None and q.answer[0] in (note.phone, note.mrn)
        assert note.name in q.text
    members = membership_questions(corpus, 3)
    assert [q.member for q in members] == [True] * 3 + [False] * 3
    stored = {n.id for n in corpus.notes}
    assert all((q.note in stored) is q.member for q in members)
    assert all(q.clues for q in members)


def test_scores_count_only_what_the_note_says():
    corpus = generate_corpus(60, (5,), outsiders=1)
    note = next(n for n in corpus.notes if n.fact is None)
    assert identifiers_found(f"call {note.phone} now", corpus) == [note.phone]
    assert identifiers_found("call 123-456-7890", corpus) == []
    (q,) = [m for m in membership_questions(corpus, 1) if m.member]
    assert q.note is not None
    target = corpus.by_id(q.note)
    assert membership_score("I do not know.", q) == 0.0
    full = membership_score(target.text, q)
    assert full == pytest.approx(3.0)  # phone + record number + every visit word
    assert auc([1.0, 2.0], [0.0, 0.0]) == 1.0 and auc([0.0], [0.0]) == 0.5
    assert auc([0.0, 1.0], [1.0, 0.0]) == 0.5
