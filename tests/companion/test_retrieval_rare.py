"""Every rare word a question names counts: surnames, numbers written in groups, phones."""

from __future__ import annotations

import numpy as np
import pytest

from companion.rag.retrieval import (
    RetrievalOptions,
    identifier_query,
    is_name_in,
    number_forms,
    rare_terms,
    retrieve,
)
from companion.rag.spelling import named_documents, unmentioned
from companion.rag.store import DocumentStore

NOTES = {
    "quispe.txt": "Consultation with Rosa Quispe. Health number 9473047982. Seen for a cough; "
    "salbutamol prescribed. Follow-up visit in two weeks.",
    "berg.txt": "Consultation with Anna Berg, phone (354) 574-6042. Seen for asthma; a spacer "
    "and inhaler technique reviewed. Follow-up visit in 304 days.",
    "weber.txt": "Consultation with Jonas Weber, health number 812-304-5521. Seen for gout; "
    "colchicine prescribed. Follow-up visit in a month.",
    "okafor.txt": "Consultation with Daniel Okafor, ref 304 7982. Seen for knee pain; "
    "physiotherapy booked. Follow-up visit in six weeks.",
    "lind.txt": "Consultation with Erik Lind. Seen for diabetes; metformin raised. "
    "Follow-up visit in three months, phone 020 7946 0958.",
    "moreau.txt": "Consultation with Camille Moreau. Seen for a migraine; sumatriptan at "
    "onset. Follow-up visit in two months.",
}
DOCS = list(NOTES)


def _vec(i: int, dim: int = 8) -> np.ndarray:
    v = np.zeros((1, dim), np.float32)
    v[0, i] = 1.0
    return v


@pytest.fixture
def store(tmp_path):
    s = DocumentStore(tmp_path / "s.sqlite3", embedding_model="test")
    for i, (name, text) in enumerate(NOTES.items()):
        s.add_document("notes", name, text.encode(), "txt", {}, [(text, 0, len(text))], _vec(i))
    yield s
    s.close()


def _first(store, text, *, points_to: str | None = "moreau.txt", **opts):
    """The first document retrieved while the question's vector points at another note."""
    query = _vec(DOCS.index(points_to) if points_to else 7)[0]
    hits = retrieve(store, text, query, "notes", 3, RetrievalOptions(**opts))
    return hits[0].document if hits else None, hits


@pytest.mark.parametrize("text", ["Find the note for Quispe.", "find the note for quispe"])
def test_a_surname_alone_finds_its_note_whatever_the_case(store, text):
    for opts in ({}, {"fusion": "rrf"}, {"mode": "bm25"}):
        first, _hits = _first(store, text, **opts)
        assert first == "quispe.txt", opts


def test_a_surname_passes_the_threshold_as_a_name_but_a_rare_common_word_does_not(store):
    # the question's vector is far from every note: cosine 0 < 0.5 everywhere
    first, hits = _first(store, "Find the note for Quispe.", points_to=None, min_score=0.5)
    assert first == "quispe.txt" and hits[0].names_identifier and hits[0].score < 0.5
    assert [h.document for h in hits] == ["quispe.txt"]
    # "sumatriptan" is as rare, but the note does not write it as a name
    _none, hits = _first(store, "Is sumatriptan safe?", points_to=None, min_score=0.5)
    assert hits == []


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("Whose health number is 947 304 7982?", "quispe.txt"),  # glued in the note
        ("Whose health number is 947-304-7982?", "quispe.txt"),
        ("Whose health number is 8123045521?", "weber.txt"),  # dashed in the note
        ("Who has 812 304 5521?", "weber.txt"),
        ("Who called from 3545746042?", "berg.txt"),  # (354) 574-6042 in the note
        ("Who called from 354.574.6042?", "berg.txt"),
        ("Who is on +44 20 7946 0958?", "lind.txt"),
        ("Who is on 02079460958?", "lind.txt"),
    ],
)
def test_a_number_written_in_other_groups_finds_its_note(store, text, gold):
    for points_to in DOCS:
        if points_to == gold:
            continue
        first, hits = _first(store, text, points_to=points_to, min_score=0.5)
        assert first == gold, points_to
        assert hits[0].names_identifier


def test_digit_groups_are_one_identifier_not_three():
    query = identifier_query("Whose number is 947 304 7982?")
    assert '"9473047982"' in query and '"947 304 7982"' in query
    assert '"304"' not in query and '"947"' not in query
    # a glued number is found written in groups too
    assert '"947 304 7982"' in identifier_query("Whose number is 9473047982?")
    # two readings are not one number; a year-like number is not an identifier
    assert identifier_query("between 120 and 140") == '"120" OR "140"'
    assert number_forms("1234567")[:2] == ["1234567", "12 34567"]
    assert len(number_forms("1" * 15)) <= 48


def test_rare_terms_come_from_the_index(store):
    rare = {t.phrase: t.chunks for t in rare_terms(store, "consultation for quispe or gout")}
    assert rare == {"quispe": 1, "gout": 1}  # "consultation" is in every note
    assert rare_terms(store, "Find the note for Zyxwv.") == []  # in no chunk: absent


def test_a_question_of_common_words_is_ranked_by_its_vector(store):
    # every note has "consultation", "seen" and "visit": BM25 has nothing to say
    for gold in DOCS:
        first, _hits = _first(store, "consultation seen visit", points_to=gold)
        assert first == gold


def test_names_are_capitalised_inside_a_sentence():
    assert is_name_in("quispe", "Consultation with Rosa Quispe.")
    assert is_name_in("muller", "Seen by Dr. Müller today")
    assert not is_name_in("cough", "Seen for a cough.")
    assert not is_name_in("cough", "Cough for two weeks.")  # a sentence's first word
    assert not is_name_in("battle", "Battle lines. The battle went on.")  # not everywhere
    assert is_name_in("quispe", "Quispe, Rosa. Seen today.")  # a record's heading
    # the address beside the name is lower case, the name still is one
    assert is_name_in("kitterman", " -- Scott Kitterman <scott@kitterman.com>  Mon")


@pytest.mark.parametrize(
    ("question", "passages", "absent"),
    [
        # a bug number, a version, an e-mail address the passages do not have
        ("Which version closed bug #209157?", ["Closes: #209158, #20915"], ["#209157"]),
        ("Who uploaded foo version 1.2.0-9?", ["foo (1.2.0-90) unstable", "1.2.0.8"], ["1.2.0-9"]),
        ("Write to jo.smith@example.org", ["mail jo.smyth@example.org"], ["jo.smith@example.org"]),
        # a package name with a coined part
        ("Which licence has libtirpc-common?", ["libtirpc3: BSD-3-clause"], ["libtirpc-common"]),
        ("Which licence has libz3-4?", ["libz3 4.8: MIT"], []),
        ("Which licence has libz3-4?", ["libzip4: BSD"], ["libz3-4"]),
        ("Which licence has libgles1?", ["libgles2: MIT"], ["libgles1"]),
        ("Who maintains python3?", ["Python 3 is maintained by the PSF"], []),
        # the same identifiers as the passages write them: nothing is missing
        ("Which version closed bug #209157?", ["  * Fix crash (Closes: #209157)"], []),
        ("Who uploaded foo version 1.2.0-9?", ["foo (1.2.0-9) unstable; urgency=low"], []),
        ("Call 947 304 7982 today", ["phone: (947) 304-7982"], []),
        ("Which licence has libtirpc-common?", ["Package: LIBTIRPC-COMMON"], []),
        # words that have other spellings, and short numbers, are never asked for
        ("Is this a well-known state-of-the-art method?", ["a famous new method"], []),
        ("C'est peut-être vrai, n'est-ce pas ?", ["rien"], []),
        ("What is the dose for a child under 12?", ["children: 5 mg/kg"], []),
        ("Is a 5mg dose of vitamin B12 enough?", ["B-12: 5 mg"], []),
        ("Find the note for Quispe.", ["Dr. Mamani's note"], []),
    ],
)
def test_unmentioned_names_the_identifiers_no_passage_has(question, passages, absent):
    assert unmentioned(question, passages) == absent


def test_a_question_that_names_a_file_finds_it_by_its_name(tmp_path):
    """'The copyright of libmagic1' is the file libmagic1.copyright.txt, whose text says
    only 'file'; a name several files share, or a common word, does not pick one."""
    s = DocumentStore(tmp_path / "n.sqlite3", embedding_model="test")
    files = {
        "libmagic1.copyright.txt": "Upstream-Name: file. License: BSD-2-clause.",
        "libz3-4.copyright.txt": "Upstream-Name: z3. License: MIT.",
        "python3-blinker.copyright.txt": "Upstream-Name: blinker. License: BSD-3-clause.",
        "time.copyright.txt": "Upstream-Name: time. License: GPL-3+.",
        "perl_5.36.0-7.changelog.txt": "perl (5.36.0-7) unstable; urgency=medium",
    }
    for i, (name, text) in enumerate(files.items()):
        s.add_document("pkgs", name, text.encode(), "txt", {}, [(text, 0, len(text))], _vec(i))
    far = _vec(7)[0]  # the question's vector points at none of them
    try:
        for question, gold in [
            ("Under which licence are the files of libmagic1 distributed?", "libmagic1"),
            ("Who holds the copyright of python3-blinker's files?", "python3-blinker"),
            ("Which licence has libz3-4?", "libz3-4"),
            ("Who uploaded perl 5.36.0-7?", "perl_5.36.0-7"),
        ]:
            hits = retrieve(s, question, far, "pkgs", 2, RetrievalOptions(min_score=0.2))
            assert hits and hits[0].document.startswith(gold), (question, hits)
        # "time" is a word, not a name: no document is picked by its name
        hits = retrieve(
            s, "How much time is left?", far, "pkgs", 2, RetrievalOptions(min_score=0.2)
        )
        assert all(h.document != "time.copyright.txt" or h.names_identifier is False for h in hits)
        assert named_documents(s, "pkgs", "What does libfoo9 say?") == []
    finally:
        s.close()
