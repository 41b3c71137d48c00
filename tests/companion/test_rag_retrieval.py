"""Hybrid retrieval: the FTS5 index in the store, BM25 queries, fusion and the threshold."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from companion.rag.retrieval import RetrievalOptions, fts_query, identifier_query, retrieve
from companion.rag.store import DocumentStore
from py_core.errors import InvalidParameterError

NOTES = {
    "a.txt": "Patient Anna Berg, record MRN-4471203, writes from anna.berg@example.org about asthma.",
    "b.txt": "Patient Jonas Weber, record MRN-9902114, writes from j.weber@example.net about gout.",
    "c.txt": "Patient Ève Müller, record MRN-1208876, asked about a fever and a cough.",
}


def _vec(i: int, dim: int = 8) -> np.ndarray:
    v = np.zeros((1, dim), np.float32)
    v[0, i] = 1.0
    return v


def _store(tmp_path, name="s.sqlite3", **kwargs) -> DocumentStore:
    store = DocumentStore(tmp_path / name, embedding_model="test", **kwargs)
    for i, (name_, text) in enumerate(NOTES.items()):
        store.add_document(
            "notes", name_, text.encode(), "txt", {}, [(text, 0, len(text))], _vec(i)
        )
    return store


def _lexical_docs(store: DocumentStore, text: str) -> list[str]:
    ranked = store.lexical_ranking("notes", fts_query(text, store.fts_tokenizer), 10)
    return [h.document for h in store.hits("notes", ranked)]


def test_fts_index_follows_adds_and_deletes(tmp_path):
    """The FTS5 index is kept in sync by triggers: add, delete and collection cascades."""
    store = _store(tmp_path)
    assert _lexical_docs(store, "MRN-9902114") == ["b.txt"]
    assert _lexical_docs(store, "j.weber@example.net") == ["b.txt"]
    doc = next(d for d in store.documents() if d.name == "b.txt")
    assert store.delete_document(doc.id)
    assert _lexical_docs(store, "MRN-9902114") == []
    assert _lexical_docs(store, "asthma") == ["a.txt"]
    assert store.delete_collection("notes")
    count = store._conn.execute(
        "SELECT COUNT(*) FROM chunks_fts WHERE chunks_fts MATCH 'asthma'"
    ).fetchone()[0]
    assert count == 0


def test_non_english_text_and_diacritics_match(tmp_path):
    """unicode61 folds diacritics: 'Eve Muller' finds 'Ève Müller'."""
    store = _store(tmp_path)
    assert _lexical_docs(store, "Eve Muller") == ["c.txt"]


def test_trigram_tokenizer_matches_inside_words_and_rebuilds(tmp_path):
    """Reopening with another tokenizer rebuilds the index from the chunks."""
    _store(tmp_path).close()
    store = DocumentStore(tmp_path / "s.sqlite3", embedding_model="test", fts_tokenizer="trigram")
    assert _lexical_docs(store, "4471") == ["a.txt"]  # a piece of the record number
    row = store._conn.execute("SELECT value FROM meta WHERE key = 'fts_tokenizer'").fetchone()
    assert row[0] == "trigram"
    with pytest.raises(InvalidParameterError, match="unknown FTS tokenizer"):
        DocumentStore(tmp_path / "t.sqlite3", embedding_model="test", fts_tokenizer="nope")


@pytest.mark.parametrize(
    "text",
    ['"', "NEAR(a b) AND OR NOT *", "x^y {col}: -z", "(((", "'; DROP TABLE chunks; --"],
)
def test_fts_query_is_safe_for_any_text(tmp_path, text):
    """Operators, quotes and SQL in a question are only words: never an FTS5 syntax error."""
    store = _store(tmp_path)
    store.lexical_ranking("notes", fts_query(text), 5)
    assert store.chunk_count() == 3


def test_fts_query_shapes():
    """Stop words go, identifiers stay one phrase, trigram drops words under 3 characters."""
    assert fts_query("What is the e-mail of Anna?") == '"e mail" OR "anna"'
    assert fts_query("Who writes from anna.berg@example.org?") == (
        '"writes" OR "anna berg example org"'
    )
    assert fts_query("is it ok", "trigram") == ""
    assert identifier_query("record MRN-4471203 in 2019, born 1948") == (
        '"mrn 4471203" OR "2019" OR "1948"'
    )
    assert identifier_query("the 2nd visit") == ""


def test_hybrid_finds_the_identifier_that_vectors_miss(tmp_path):
    """A question naming a record number whose vector points elsewhere: vector misses,
    BM25 and hybrid rank the note with the number first."""
    store = _store(tmp_path)
    query = _vec(0)[0]  # the embedding "thinks" of a.txt
    text = "Which condition does the patient with record MRN-9902114 have?"
    vector = retrieve(store, text, query, "notes", 3, RetrievalOptions(mode="vector"))
    assert vector[0].document == "a.txt"
    bm25 = retrieve(store, text, query, "notes", 3, RetrievalOptions(mode="bm25"))
    assert bm25[0].document == "b.txt" and bm25[0].lexical_rank == 1
    for fusion in ("rrf", "weighted"):
        hybrid = retrieve(
            store, text, query, "notes", 3, RetrievalOptions(mode="hybrid", fusion=fusion)
        )
        assert hybrid[0].document in ("a.txt", "b.txt")
        assert {h.document for h in hybrid[:2]} == {"a.txt", "b.txt"}
    weighted = retrieve(
        store,
        text,
        query,
        "notes",
        3,
        RetrievalOptions(mode="hybrid", fusion="weighted", weight=0.3),
    )
    assert weighted[0].document == "b.txt"
    assert weighted[0].score == pytest.approx(0.0)  # the exact cosine, whoever found it
    assert weighted[0].vector_rank is not None and weighted[0].fused is not None


def test_relevance_threshold_retrieves_nothing_below_it(tmp_path):
    """Chunks under min_score are never returned, in any mode -- except, in bm25 and
    hybrid, the chunk that has the record number (or e-mail address) the question names."""
    store = _store(tmp_path)
    query = _vec(0)[0] * 0.2 + _vec(7)[0]  # cosine ~0.196 with a.txt, 0 with the rest
    for mode in ("vector", "bm25", "hybrid"):
        opts = RetrievalOptions(mode, min_score=0.5)
        assert retrieve(store, "asthma cough", query, "notes", 3, opts) == [], mode
    assert retrieve(store, "MRN-4471203", query, "notes", 3, RetrievalOptions("vector", 0.5)) == []
    for mode in ("bm25", "hybrid"):
        hits = retrieve(
            store, "asthma in MRN-4471203?", query, "notes", 3, RetrievalOptions(mode, 0.5)
        )
        assert [(h.document, h.names_identifier) for h in hits] == [("a.txt", True)], mode
        assert hits[0].score < 0.5
    hits = retrieve(store, "asthma", query, "notes", 3, RetrievalOptions("hybrid", min_score=0.1))
    assert [h.document for h in hits] == ["a.txt"]


def test_bad_options_are_refused():
    """Mode, fusion and threshold are checked with the allowed values named."""
    with pytest.raises(InvalidParameterError, match="vector, bm25, hybrid"):
        RetrievalOptions(mode="semantic")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="rrf, weighted"):
        RetrievalOptions(fusion="max")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="cosine score"):
        RetrievalOptions(min_score=2.0)
    assert RetrievalOptions().override("bm25", 0.3) == RetrievalOptions(mode="bm25", min_score=0.3)


def test_an_old_store_gets_page_heading_columns_and_its_fts_index(tmp_path):
    """A store made before this change (no page/heading, no FTS5) is migrated on open: its
    old chunks are found by BM25 and have no page."""
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE collections (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL
            UNIQUE, created REAL NOT NULL);
        CREATE TABLE documents (id INTEGER PRIMARY KEY AUTOINCREMENT, collection_id INTEGER
            NOT NULL REFERENCES collections(id) ON DELETE CASCADE, name TEXT NOT NULL,
            sha256 TEXT NOT NULL, kind TEXT NOT NULL, size INTEGER NOT NULL, metadata TEXT NOT
            NULL, created REAL NOT NULL, UNIQUE (collection_id, sha256));
        CREATE TABLE chunks (id INTEGER PRIMARY KEY AUTOINCREMENT, document_id INTEGER NOT NULL
            REFERENCES documents(id) ON DELETE CASCADE, idx INTEGER NOT NULL, text TEXT NOT
            NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL);
        CREATE TABLE vectors (chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE
            CASCADE, dim INTEGER NOT NULL, data BLOB NOT NULL);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('embedding_model', 'test');
        INSERT INTO collections VALUES (1, 'notes', 0);
        INSERT INTO documents VALUES (1, 1, 'old.txt', 'x', 'txt', 3, '{}', 0);
        INSERT INTO chunks VALUES (1, 1, 0, 'an old note about gout', 0, 22);
        """
    )
    conn.execute("INSERT INTO vectors VALUES (1, 8, ?)", (_vec(1)[0].tobytes(),))
    conn.commit()
    conn.close()
    store = DocumentStore(path, embedding_model="test")
    hits = retrieve(store, "gout", _vec(3)[0], "notes", 3, RetrievalOptions(mode="bm25"))
    assert [h.document for h in hits] == ["old.txt"] and hits[0].page is None
    store.add_document(
        "notes", "new.txt", b"new", "txt", {}, [("gout again", 0, 10, 2, "Notes > Gout")], _vec(1)
    )
    hits = retrieve(store, "gout again", _vec(1)[0], "notes", 3, RetrievalOptions(mode="bm25"))
    assert (hits[0].document, hits[0].page, hits[0].heading) == ("new.txt", 2, "Notes > Gout")
    store.close()
    DocumentStore(path, embedding_model="test").close()  # a second open changes nothing


def test_bm25_stays_inside_the_collection(tmp_path):
    """With two collections a BM25 query finds only the asked collection's chunks (and with
    one collection, no chunk of it answers for another name)."""
    store = _store(tmp_path)
    match = fts_query("MRN-9902114")
    assert store.lexical_ranking("other", match, 5) == []  # one collection: not "other"'s
    text = "Copy of record MRN-9902114 in another collection."
    store.add_document("other", "x.txt", text.encode(), "txt", {}, [(text, 0, len(text))], _vec(5))
    other = store.hits("other", store.lexical_ranking("other", match, 5))
    notes = store.hits("notes", store.lexical_ranking("notes", match, 5))
    assert [h.document for h in other] == ["x.txt"] and [h.document for h in notes] == ["b.txt"]


def test_a_formal_defense_admits_and_charges_the_chunk_naming_the_id(tmp_path):
    """Under a formal defense (bounded), a question naming a record number whose note is
    far in embedding space: hybrid admits that note and charges its document; vector
    mode admits nothing (the note is under the budget's cosine threshold)."""
    from companion.decoding.config import DefenseConfig
    from companion.rag.budget import DocumentBudget
    from companion.rag.service import RagService
    from tests.companion.fakes import KeywordEmbedder

    rag = RagService(DocumentStore(tmp_path / "b.sqlite3"), KeywordEmbedder())
    rag.ingest("cats.txt", b"cats of record MRN-7654321 sleep all day", "med")
    rag.ingest("gout.txt", b"gout is eased by colchicine", "med")
    budget = DocumentBudget(rag.store, epsilon=200.0, delta=1e-6, threshold=0.5)
    defense = DefenseConfig.from_options("bounded", {"epsilon": 1.0})

    def ask(mode: str):
        return budget.retrieve(
            rag,
            "what about MRN-7654321?",
            "med",
            3,
            defense=defense,
            max_tokens=16,
            is_guest=False,
            answer_id=mode,
            options=RetrievalOptions(mode, min_score=0.2),
        )

    assert ask("vector").hits == [] and ask("vector").charged == []
    admission = ask("hybrid")
    assert [h.document for h in admission.hits] == ["cats.txt"]
    assert [(c.document, c.in_context) for c in admission.charged] == [("cats.txt", True)]
    assert admission.retrieval == {"mode": "hybrid", "min_score": 0.2, "found": 1}
    assert "No passage" in ask("vector").retrieval["note"]
