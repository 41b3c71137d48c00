"""Ingest, chunking and the SQLite document store (exact cosine top-k, persistence, delete)."""

from __future__ import annotations

import numpy as np
import pytest

from companion.rag.chunking import chunk_text
from companion.rag.ingest import extract_text
from companion.rag.store import DocumentStore
from py_core.errors import InvalidParameterError
from tests.companion.fakes import pdf_pages


@pytest.mark.parametrize(
    ("name", "data", "expected", "kind"),
    [
        ("a.txt", b"Plain text about asthma.", "Plain text about asthma.", "txt"),
        ("a.md", b"# Title\n\nSome *notes*.", "Some *notes*.", "md"),
        (
            "a.html",
            b"<html><head><title>T</title><script>x=1</script></head><body><p>Hello"
            b" &amp; welcome</p></body></html>",
            "Hello & welcome",
            "html",
        ),
        (
            "a.eml",
            b"From: dr@example.org\nSubject: Results\n\nYour HbA1c is 6.1%.\n",
            "Your HbA1c is 6.1%.",
            "eml",
        ),
        ("a.pdf", pdf_pages(["Lab report for the clinic"]), "Lab report for the clinic", "pdf"),
    ],
)
def test_extract_text_reads_every_supported_format(name, data, expected, kind):
    """Each supported file type yields its text; scripts and markup are dropped."""
    result = extract_text(name, data)
    assert expected in result.text and result.kind == kind
    assert "x=1" not in result.text


def test_eml_keeps_headers_as_metadata():
    """An e-mail's subject becomes its title and its headers stay in the text."""
    result = extract_text("m.eml", b"From: a@b.org\nSubject: Hi there\n\nBody.\n")
    assert result.metadata["title"] == "Hi there" and "From: a@b.org" in result.text


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("a.xlsx", b"x", "unsupported file type"),
        ("a.docx", b"x", "not a readable Word document"),
        ("a.txt", b"   \n ", "no text"),
        ("a.pdf", b"not a pdf", "not a readable PDF"),
    ],
)
def test_bad_files_get_a_clear_error(name, data, message):
    """Unsupported, empty and broken files raise InvalidParameterError naming the file."""
    with pytest.raises(InvalidParameterError, match=message):
        extract_text(name, data)


def test_chunks_overlap_and_cover_the_text():
    """Consecutive chunks share `overlap` words and together cover every word."""
    text = " ".join(f"w{i}" for i in range(250))
    chunks = chunk_text(text, size=100, overlap=20)
    assert [len(c.text.split()) for c in chunks] == [100, 100, 90]
    assert chunks[0].text.split()[-20:] == chunks[1].text.split()[:20]
    assert text[chunks[1].start : chunks[1].end] == chunks[1].text
    covered = {w for c in chunks for w in c.text.split()}
    assert covered == set(text.split())


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (10, 10), (10, -1)])
def test_bad_chunk_parameters_are_refused(size, overlap):
    """A non-positive size or an overlap not smaller than the size is refused."""
    with pytest.raises(InvalidParameterError):
        chunk_text("a b c", size=size, overlap=overlap)


def _store(tmp_path, name="s.sqlite3"):
    return DocumentStore(tmp_path / name)


def test_store_search_is_exact_cosine_top_k(tmp_path):
    """Search returns the exact cosine top-k of a brute-force computation."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(40, 16)).astype(np.float32)
    store = _store(tmp_path)
    chunks = [(f"chunk {i}", 0, 7) for i in range(40)]
    store.add_document("c", "doc.txt", b"data", "txt", {}, chunks, vectors)
    query = rng.normal(size=16).astype(np.float32)
    hits = store.search("c", query, k=5)
    normed = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    expected = np.argsort(-(normed @ (query / np.linalg.norm(query))))[:5]
    assert [h.text for h in hits] == [f"chunk {i}" for i in expected]
    assert hits[0].score >= hits[-1].score


def test_store_persists_dedupes_and_deletes(tmp_path):
    """Documents survive a reopen, identical bytes are stored once, delete removes chunks."""
    vec = np.eye(4, dtype=np.float32)
    store = _store(tmp_path)
    info, created = store.add_document(
        "a", "x.txt", b"same", "txt", {"k": 1}, [("t", 0, 1)], vec[:1]
    )
    again, created_again = store.add_document(
        "a", "x.txt", b"same", "txt", {}, [("t", 0, 1)], vec[:1]
    )
    assert created and not created_again and again.id == info.id
    store.add_document("b", "y.txt", b"other", "txt", {}, [("u", 0, 1), ("v", 0, 1)], vec[:2])
    store.close()
    reopened = _store(tmp_path)
    assert [d.name for d in reopened.documents()] == ["x.txt", "y.txt"]
    assert {c["name"]: c["documents"] for c in reopened.collections()} == {"a": 1, "b": 1}
    assert reopened.documents("a")[0].metadata == {"k": 1}
    assert reopened.delete_document(info.id)
    assert reopened.search("a", vec[0], 3) == [] and reopened.chunk_count() == 2
    assert reopened.delete_collection("b") and reopened.chunk_count() == 0
    assert not reopened.delete_document(info.id)


def test_store_refuses_bad_collection_names(tmp_path):
    """Collection names are restricted to a safe alphabet, with the bad name quoted."""
    store = _store(tmp_path)
    with pytest.raises(InvalidParameterError, match="collection name"):
        store.search("../etc", np.ones(4), 1)


@pytest.mark.slow
def test_rag_service_retrieves_the_relevant_document(tmp_path):
    """With the real MiniLM embedder, a question retrieves the document that answers it."""
    from companion.models import load_embedder
    from companion.rag.service import RagService

    rag = RagService(_store(tmp_path), load_embedder("cpu"))
    rag.ingest("asthma.txt", b"Asthma is treated with inhaled corticosteroids.", "med")
    rag.ingest("gout.md", b"Gout attacks are eased by colchicine and rest.", "med")
    rag.ingest("cats.html", b"<p>Cats sleep sixteen hours a day.</p>", "med")
    hits = rag.search("What helps a gout attack?", "med", 2)
    assert hits[0].document == "gout.md" and len(hits) == 2
