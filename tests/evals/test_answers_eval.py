"""veil eval answers: questions built from real Debian records, scored on the first line."""

from __future__ import annotations

import gzip

import pytest

from evals.answers import corpus as corpus_module
from evals.answers.config import FULL, SMOKE
from evals.answers.corpus import (
    Question,
    build_corpus,
    date_forms,
    declines,
    is_right,
    licence_forms,
    repeats,
)
from evals.answers.report import cells, goals, write_report

CHANGELOG = """\
foo (1.2-3) unstable; urgency=medium

  * Fix the parser crash on empty input. Closes: #1012345
  * Shared fix, see also 1.2-2. Closes: #1099999

 -- Ada Lovelace <ada@example.org>  Mon, 02 Jan 2023 13:06:21 +0100

foo (1.2-2) unstable; urgency=low

  * Rebuild. Closes: #1099999, #1054321

 -- Charles Babbage <cb@example.org>  Sat, 31 Dec 2022 11:32:01 +0100

foo (1.2-1) unstable; urgency=low

  * New upstream release.

 -- Ada Lovelace <ada@example.org>  Fri, 30 Dec 2022 10:00:00 +0100
"""

COPYRIGHT = """\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: bar
Source: https://ftp.example.net/pub/bar/

Files: *
Copyright: 1999-2020 Grace Hopper <grace@example.org>
License: GPL-2+
 This program is free software; you can redistribute it
 and/or modify it under the terms of the GNU General Public License.
 .
 Fourth line of the licence text.
 Fifth line, cut.

Files: debian/*
Copyright: 2020 Someone Else
License: MIT
"""


@pytest.fixture
def doc_root(tmp_path, monkeypatch):
    for package in ("foo", "foo2"):
        (tmp_path / package).mkdir()
        text = CHANGELOG.replace("foo", package)
        if package == "foo2":  # other bug numbers
            text = text.replace("#10", "#20")
        with gzip.open(tmp_path / package / "changelog.Debian.gz", "wt") as handle:
            handle.write(text)
    for package in ("bar", "baz"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "copyright").write_text(COPYRIGHT.replace("bar", package))
    monkeypatch.setattr(corpus_module, "DOC_ROOT", tmp_path)
    return tmp_path


def _build(**counts):
    kinds = dict(FULL.questions)
    kinds.update(counts)
    return build_corpus(
        changelog_packages=2,
        entries_per_package=3,
        copyright_packages=1,
        questions=kinds,
        seed=1,
    )


def test_questions_come_from_the_records_and_each_has_one_answer(doc_root):
    corpus = _build()
    docs = {d.name: d.text for d in corpus.documents}
    assert len([d for d in corpus.documents if d.body == "changelog"]) == 6
    bugs = {
        q.text.split("#")[1].rstrip("?"): q for q in corpus.questions if q.kind == "bug-version"
    }
    assert "1099999" not in bugs  # named by two entries: two answers, so never asked
    assert bugs["1012345"].gold == ("1.2-3",) and bugs["1054321"].gold == ("1.2-2",)
    for q in corpus.questions:
        if q.answerable:
            assert q.document in docs
            if q.kind in ("bug-version", "uploader"):
                assert q.gold[0] in docs[q.document].lower()
        else:
            assert q.document is None
    copyright_doc = next(d for d in corpus.documents if d.body == "copyright")
    assert "Fifth line" not in copyright_doc.text and "GPL-2+" in copyright_doc.text
    kinds = {q.kind for q in corpus.questions}
    assert {"licence", "holder", "source", "unanswerable-package"} <= kinds
    holder = next(q for q in corpus.questions if q.kind == "holder")
    assert holder.gold[0] == "grace hopper"
    # An unanswerable version or bug is not in any document.
    for q in corpus.questions:
        if q.kind == "unanswerable-bug":
            assert q.text.split("#")[1].rstrip("?") not in "".join(docs.values())


@pytest.mark.parametrize(
    ("question", "answer", "right"),
    [
        (Question("v?", ("1.2-3",), "bug-version", "c", "d"), "Version 1.2-3 fixed it.", True),
        (Question("v?", ("1.2-3",), "bug-version", "c", "d"), "It was 1.2-3+deb12u1.", False),
        (Question("v?", ("1.2-3",), "bug-version", "c", "d"), "It was 11.2-3.", False),
        (Question("v?", ("1.2-3",), "bug-version", "c", "d"), "Nothing.\n1.2-3", False),
        (Question("who?", ("ada lovelace", "lovelace"), "uploader", "c", "d"), "Lovelace.", True),
        (Question("who?", ("ada lovelace", "lovelace"), "uploader", "c", "d"), "Babbage", False),
        (
            Question("when?", date_forms("Mon, 02 Jan 2023 13:06:21"), "date", "c", "d"),
            "On January 2nd, 2023.",
            True,
        ),
        (
            Question("when?", date_forms("Mon, 02 Jan 2023 13:06:21"), "date", "c", "d"),
            "Mon, 02 Jan 2023",
            True,
        ),
        (
            Question("when?", date_forms("Mon, 02 Jan 2023 13:06:21"), "date", "c", "d"),
            "2023-01-02",
            True,
        ),
        (
            Question("when?", date_forms("Mon, 02 Jan 2023 13:06:21"), "date", "c", "d"),
            "3 Jan 2023",
            False,
        ),
        (Question("lic?", licence_forms("GPL-2+"), "licence", "c", "d"), "GPLv2 or later", True),
        (Question("lic?", licence_forms("GPL-2+"), "licence", "c", "d"), "GPL-3+", False),
        (
            Question("lic?", licence_forms("GPL-3"), "licence", "c", "d"),
            "They are under the GNU General Public License (GPL) version 3 or later.",
            True,
        ),
        (
            Question("lic?", licence_forms("GPL-3"), "licence", "c", "d"),
            "The GNU General Public License (GPL) version 2.",
            False,
        ),
        (
            Question("lic?", licence_forms("GPL-3"), "licence", "c", "d"),
            "The GNU General Public License (GPL).",  # no version: not the file's licence
            False,
        ),
        (Question("lic?", licence_forms("GPL-2"), "licence", "c", "d"), "LGPL-2.1", False),
        (
            Question("lic?", licence_forms("LGPL-2.1"), "licence", "c", "d"),
            "the GNU Lesser General Public License, version 2.1",
            True,
        ),
        (
            Question("lic?", licence_forms("Apache-2.0"), "licence", "c", "d"),
            "The Apache License, Version 2.0.",
            True,
        ),
        (Question("x?", (), "unanswerable-bug", "c", None), "The documents do not say.", True),
        (Question("x?", (), "unanswerable-bug", "c", None), "There is no bug #5 listed.", True),
        (Question("x?", (), "unanswerable-bug", "c", None), "Version 1.2-3.", False),
        (Question("v?", ("1.2-3",), "bug-version", "c", "d"), "I don't know; 1.2-3?", False),
    ],
)
def test_an_answer_is_scored_on_its_first_line(question, answer, right):
    assert is_right(question, answer) is right


def test_declines_and_repetition_loops_are_recognised():
    assert declines("The context does not mention that bug.")
    assert declines("I'm not sure.") and not declines("Version 2 was uploaded by Ada.")
    assert repeats("the cat is here " * 4) and not repeats("one two three four five six")


def test_the_smoke_and_full_configurations_fit_their_jobs():
    assert SMOKE.smoke and not FULL.smoke
    assert sum(n for _, n in FULL.questions) >= 200
    assert sum(n for k, n in FULL.questions if k.startswith("unanswerable")) >= 30
    assert ("owner", "none") in FULL.cells and any(w == "guest" for w, _ in FULL.cells)
    assert len(SMOKE.models) == 1 and sum(n for _, n in SMOKE.questions) <= 10


@pytest.mark.skipif(
    not any(corpus_module.DOC_ROOT.glob("*/changelog.Debian.gz")),
    reason="needs Debian's /usr/share/doc",
)
def test_this_machine_gives_at_least_200_questions_over_two_bodies():
    full = corpus_module.corpus_for(FULL)
    assert len(full.questions) >= 200
    assert {q.body for q in full.questions} == {"changelog", "copyright"}
    assert sum(not q.answerable for q in full.questions) >= 30


def test_the_report_counts_each_cell_and_states_the_goals(tmp_path):
    def row(principal, defense, kind, answerable, right, **extra):
        return {
            "model": "m",
            "principal": principal,
            "defense": defense,
            "q": 0,
            "kind": kind,
            "body": "changelog",
            "answerable": answerable,
            "answer": "x",
            "right": right,
            "declined": not answerable and right,
            "cited": True if answerable else None,
            "citations": 1,
            "repeats": extra.get("repeats", False),
            "finish_reason": extra.get("finish", "stop"),
            "first_token_s": 1.0,
            "tokens_per_s": 6.0,
            "epsilon": None,
        }

    answers = [
        row("owner", "none", "uploader", True, True),
        row("owner", "none", "uploader", True, True),
        row("owner", "none", "date", True, False),
        row("owner", "none", "unanswerable-bug", False, True),
        row("guest", "bounded", "uploader", True, False, repeats=True, finish="length"),
    ]
    results = {
        "config": {"smoke": True, "models": ["m"], "cells": [], "max_tokens": 8, "limit": None},
        "environment": None,
        "packages": {"changelog": ["foo"], "copyright": []},
        "documents": {"changelog": 1, "copyright": 0},
        "questions_built": 4,
        "questions": [{"text": "q", "kind": "uploader", "body": "c", "gold": ["a"], "doc": "d"}],
        "models": [
            {
                "model": "m",
                "parameters": 1e6,
                "dtype": "float32",
                "load_s": 1,
                "rss_gb": 1,
                "description": "",
            }
        ],
        "answers": answers,
        "notes": [],
    }
    summary = cells(results)
    owner = next(c for c in summary if c["principal"] == "owner")
    assert (owner["right"], owner["answerable"], owner["declined"]) == (2, 3, 1)
    notes = goals(results)
    assert "67% of answerable questions right (goal 80%: not met)" in notes[0]
    assert "100% of unanswerable ones declined (goal 90%: met)" in notes[0]
    assert notes[-1].startswith("answers that ran to max_tokens repeating themselves: 1")
    results["notes"] = notes
    text = write_report(results, tmp_path).read_text()
    assert "| m | owner | none | 2/3 (67%) | 1/1 (100%) |" in text
    assert (tmp_path / "answers.png").is_file() and (tmp_path / "speed.png").is_file()
