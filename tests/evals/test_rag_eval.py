"""The RAG evaluation's question sets and its report (no embedder needed)."""

from __future__ import annotations

import re

import pytest

from evals.rag.config import FULL, SMOKE
from evals.rag.corpus import _grouped, changelog_store, rare_questions
from evals.rag.report import verdict
from evals.rag.runner import configurations, metrics


def test_grouped_numbers_keep_their_digits():
    assert _grouped("1024598") == "1 024 598"
    assert _grouped("875780") == "875 780"
    assert _grouped("12") == "12"


def test_changelog_questions_name_one_entry_each():
    docs, questions = changelog_store(12, 3, 6, seed=3)
    if not docs:
        pytest.skip("no Debian changelogs installed")
    texts = {d.name: d.text.lower() for d in docs}
    assert {q.detail for q in questions} <= {"surname", "email", "bug", "bug-grouped"}
    for q in questions:
        assert q.gold in texts
        if q.detail == "surname":
            word = q.text.rstrip(".").split()[-1].lower()
            holders = [n for n, t in texts.items() if re.search(rf"\b{re.escape(word)}\b", t)]
            assert holders == [q.gold], q.text
        if q.detail in ("bug", "bug-grouped"):
            digits = "".join(c for c in q.text if c.isdigit())
            holders = [n for n, t in texts.items() if f"#{digits}" in t]
            assert holders == [q.gold], q.text


def test_rare_questions_write_identifiers_otherwise_than_the_note():
    pytest.importorskip("faker")
    import random

    from evals.pad.corpus import generate_records

    notes = generate_records(12)
    qs = rare_questions(notes, 3, random.Random(1))
    kinds = {q.detail for q in qs}
    assert {"phone-glued", "mrn-spaced", "surname-only"} <= kinds
    by_name = {f"note-{r.id:04d}.txt": r for r in notes}
    for q in qs:
        note = by_name[q.gold]
        if q.detail == "phone-glued":
            glued = "".join(c for c in note.pii["phone"] if c.isdigit())
            assert glued in q.text and note.pii["phone"] not in q.text
        if q.detail == "mrn-spaced":
            assert note.pii["mrn"] not in q.text


def test_configurations_and_metrics():
    labels = [c["label"] for c in configurations(FULL.tokenizers)]
    assert "vector" in labels and "hybrid weighted 0.5/0.8 (unicode61)" in labels
    assert len(labels) == len(set(labels))
    assert len(configurations(SMOKE.tokenizers)) < len(labels)
    m = metrics([1, 2, None, 4])
    assert (
        m["recall@1"] == 0.25
        and m["recall@3"] == 0.5
        and m["mrr"] == pytest.approx((1 + 0.5 + 0.25) / 4)
    )


def test_the_verdict_holds_issue_30s_goal_to_every_rare_set():
    def row(label, mode, rare, para):
        kinds = {k: {"recall@1": rare, "recall@5": rare} for k in ("rare", "small", "changelog")}
        kinds["paraphrase"] = {"recall@1": para, "recall@5": para}
        kinds["template"] = {"recall@1": 0.5, "recall@5": 0.5}
        return {"label": label, "mode": mode, "kinds": kinds}

    results = {
        "configs": [
            row("vector", "vector", 0.1, 0.8),
            row("a", "hybrid", 0.97, 0.6),  # loses paraphrases
            row("b", "hybrid", 0.96, 0.78),
            row("c", "hybrid", 0.9, 0.8),  # misses rare identifiers
        ]
    }
    v = verdict(results)
    assert v["goal30"] == ["b"]
