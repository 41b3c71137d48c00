"""Deleted means gone: no file under the companion's home keeps a deleted document's words."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from companion.app import create_app
from companion.rag.index import IvfIndex
from companion.rag.store import DocumentStore
from companion.settings import Settings
from tests.companion.fakes import KeywordEmbedder

BASE = "http://127.0.0.1:8765"
MARKER = b"zqxvmarker7731"  # in the deleted document's text only
NAME = "gout-notes-qzvnamekey5523.txt"  # the deleted document's file name
NAME_MARKER = b"qzvnamekey5523"  # in its name only
KEPT = b"Asthma: use the salbutamol inhaler for asthma, two puffs, asthma plan."
DELETED = (
    b"Gout: the clinic noted " + MARKER + b" beside allopurinol 100 mg for gout, gout flares. "
) * 3


def occurrences(home: Path, marker: bytes = MARKER) -> dict[str, int]:
    """Every file under ``home`` (WAL, shared memory and index files too) that holds the
    marker, in any letter case, with its count."""
    found = {}
    for root, _dirs, files in os.walk(home):
        for name in files:
            path = Path(root) / name
            count = path.read_bytes().lower().count(marker.lower())
            if count:
                found[str(path.relative_to(home))] = count
    return found


def test_a_deleted_document_is_in_no_file_under_the_home(tiny_folder, tmp_path):
    """Upload a document with a marker, ask a question that cites it (kept in a stored
    conversation), delete it: every file under the home, -wal and -shm included, holds the
    marker 0 times, and the conversation marks the passage deleted."""
    torch.set_num_threads(1)
    home = tmp_path / "home"
    settings = Settings(home=home, model=str(tiny_folder), preload_model=False)
    app = create_app(settings, embedder=KeywordEmbedder())
    with TestClient(app, base_url=BASE) as client:
        client.headers["Authorization"] = f"Bearer {app.state.token}"
        files = [
            ("files", (NAME, DELETED, "text/plain")),
            ("files", ("asthma.txt", KEPT, "text/plain")),
        ]
        uploaded = client.post("/v1/documents", files=files, data={"collection": "med"})
        assert uploaded.status_code == 200, uploaded.text
        doc_id = uploaded.json()["documents"][0]["document"]["id"]
        conv_id = client.post("/v1/conversations", json={"title": "Gout"}).json()["id"]
        body = {
            "conversation_id": conv_id,
            "messages": [{"role": "user", "content": "What helps gout?"}],
            "collection": "med",
            "defense": "bounded",
            "max_tokens": 3,
            "retrieval_top_k": 1,
        }
        answer = client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        cited = answer.json()["veil"]["citations"]
        assert cited and cited[0]["document_id"] == doc_id and MARKER.decode() in cited[0]["text"]
        before = occurrences(home)
        assert sum(before.values()) > 0 and any("conversations" in f for f in before), before
        named = occurrences(home, NAME_MARKER)
        assert any("rag.sqlite3" in f for f in named), named
        spent = client.get("/v1/budget").json()["documents"]
        spent_before = next(d["spent_rdp"] for d in spent if d["document_id"] == doc_id)
        assert spent_before > 0  # the answer was charged to the document

        assert client.delete(f"/v1/documents/{doc_id}").json() == {"deleted": True, "id": doc_id}
        after = occurrences(home)
        print(f"marker occurrences under the home: before the delete {before}, after {after}")
        assert after == {}, f"before {before}, after {after}"
        # its name too (the budget log kept it: issue 24, point 3's "name from logs")
        named_after = occurrences(home, NAME_MARKER)
        print(f"name occurrences under the home: before the delete {named}, after {named_after}")
        assert named_after == {}, f"before {named}, after {named_after}"

        stored = client.get(f"/v1/conversations/{conv_id}").json()["messages"]
        citation = stored[1]["veil"]["citations"][0]
        assert citation["deleted"] is True and citation["text"] is None
        assert citation["document"] == "(deleted document)" and citation["n"] == 1
        assert stored[0]["content"] == "What helps gout?"  # the person's own words are kept
        names = [d["document"] for d in stored[1]["veil"]["budget"]["documents"]]
        assert NAME not in names
        export = client.get(f"/v1/conversations/{conv_id}/export").text
        assert NAME not in export and "None" not in export
        # the other document and its passages are untouched
        hits = client.post("/v1/search", json={"query": "asthma", "collection": "med"}).json()
        assert hits["hits"][0]["document"] == "asthma.txt"
        assert [d["name"] for d in client.get("/v1/documents").json()] == ["asthma.txt"]
        # a retry finds it gone (404) and still finishes with the conversations
        assert client.delete(f"/v1/documents/{doc_id}").status_code == 404
    assert occurrences(home) == {}  # after the shutdown's own writes too
    assert occurrences(home, NAME_MARKER) == {}


def test_deleting_a_collection_leaves_no_word_of_it(tmp_path):
    """delete_collection purges the lexical index and the WAL like delete_document."""
    store = DocumentStore(tmp_path / "rag.sqlite3", embedding_model="kw")
    for name, data in (("a.txt", DELETED), ("b.txt", KEPT)):
        text = data.decode()
        store.add_document(
            "gone" if name == "a.txt" else "kept",
            name,
            data,
            "txt",
            {},
            [(text, 0, len(text))],
            np.ones((1, 4), np.float32),
        )
    assert sum(occurrences(tmp_path).values()) > 0
    assert store.delete_collection("gone")
    assert occurrences(tmp_path) == {}
    assert store.lexical_ranking("kept", "salbutamol", 5)
    store.close()
    assert occurrences(tmp_path) == {}


def _budget_store(path: Path):
    from companion.rag.budget import DocumentBudget
    from companion.rag.service import RagService

    rag = RagService(DocumentStore(path, embedding_model="kw"), KeywordEmbedder())
    return rag, DocumentBudget(rag.store, epsilon=200.0, delta=1e-6, threshold=0.5)


def _charge(budget, rag, answer_id: str) -> None:
    from companion.decoding.config import DefenseConfig

    bounded = DefenseConfig.from_options("bounded", {"epsilon": 1.0})
    budget.retrieve(
        rag, "gout?", "med", 3, defense=bounded, max_tokens=16, is_guest=False, answer_id=answer_id
    )


def test_deleting_a_document_keeps_its_spend_but_not_its_name(tmp_path):
    """The spend is keyed by the content (sha256): deleting the document and uploading the
    same bytes again under another name finds it spent as before (no reset by deleting),
    while the deleted name is in no file under the home and its log rows say deleted."""
    path = tmp_path / "rag.sqlite3"
    rag, budget = _budget_store(path)
    first, _ = rag.ingest(NAME, DELETED, "med")
    rag.ingest("asthma.txt", KEPT, "med")
    _charge(budget, rag, "a1")
    _charge(budget, rag, "a2")
    spent = {r["document_id"]: r["spent_rdp"] for r in rag.store.budget_rows("med")}[first.id]
    assert spent > 0
    log = rag.store.budget_log(10, first.sha256)
    assert [e["document"] for e in log] == [NAME, NAME]  # read from the live document
    assert rag.store.delete_document(first.id)
    assert occurrences(tmp_path, NAME_MARKER) == {}
    log = rag.store.budget_log(10, first.sha256)
    assert [(e["kind"], e["document"], e["document_deleted"]) for e in log] == [
        ("charge", None, True),
        ("charge", None, True),
    ]
    assert log[0]["spent_after"] == spent  # the accounting is as written
    again, created = rag.ingest("renamed.txt", DELETED, "med")
    assert created and again.id != first.id
    rows = {r["document_id"]: r for r in rag.store.budget_rows("med")}
    assert rows[again.id]["spent_rdp"] == spent and rows[again.id]["answers"] == 2
    rag.store.close()
    assert occurrences(tmp_path, NAME_MARKER) == {}


def test_an_older_store_loses_the_names_in_its_budget_log(tmp_path):
    """A store written before the log kept no names (schema 3: names in budget_log rows,
    one of a document deleted since) opens with the names cleared from every file, its
    spend and log rows otherwise as they were."""
    import sqlite3

    path = tmp_path / "rag.sqlite3"
    rag, budget = _budget_store(path)
    first, _ = rag.ingest(NAME, DELETED, "med")
    _charge(budget, rag, "a1")
    spent = rag.store.budget_rows("med")[0]["spent_rdp"]
    rag.store.close()
    conn = sqlite3.connect(path)  # the old code's rows: the name written in the log
    conn.execute("DROP TRIGGER budget_log_no_update")
    conn.execute("UPDATE budget_log SET document = ?, collection = 'med' WHERE kind = 'charge'",
                 (NAME,))  # fmt: skip
    conn.execute("DELETE FROM documents")  # deleted by the old code, its name left in the log
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.execute("VACUUM")
    conn.close()
    assert occurrences(tmp_path, NAME_MARKER) == {"rag.sqlite3": 1}
    store = DocumentStore(path, embedding_model="kw")
    assert occurrences(tmp_path, NAME_MARKER) == {}
    (entry,) = [e for e in store.budget_log(10) if e["kind"] == "charge"]
    assert entry["document_id"] == first.id and entry["spent_after"] == spent
    assert entry["document"] is None and entry["document_deleted"] is True
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store._conn.execute("UPDATE budget_log SET charge_rdp = 0")
    store.close()
    assert occurrences(tmp_path, NAME_MARKER) == {}


def _saved_ids(path: Path) -> np.ndarray:
    import faiss

    index = IvfIndex.load(path, 8).index
    ivf = faiss.extract_index_ivf(index)
    lists = ivf.invlists
    parts = [
        faiss.rev_swig_ptr(lists.get_ids(i), lists.list_size(i)).copy()
        for i in range(ivf.nlist)
        if lists.list_size(i)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def test_the_saved_vector_index_keeps_no_deleted_chunk(tmp_path):
    """The approximate index on disk: gone the moment a document is deleted, and the copy
    written at close holds none of its chunks (ids and codes removed, not masked)."""
    from tests.companion.test_rag_index import clustered

    path = tmp_path / "s.sqlite3"
    store = DocumentStore(path, embedding_model="t", ann_min_chunks=500)
    vecs = clustered(900, seed=5)
    kept, _ = store.add_document(
        "big", "a.txt", b"a", "txt", {}, [(f"a{i}", 0, 1) for i in range(450)], vecs[:450]
    )
    gone, _ = store.add_document(
        "big", "b.txt", b"b", "txt", {}, [(f"b{i}", 0, 1) for i in range(450)], vecs[450:]
    )
    gone_ids = {int(r[0]) for r in store._conn.execute(
        "SELECT id FROM chunks WHERE document_id = ?", (gone.id,)
    )}  # fmt: skip
    store.search("big", vecs[3], 5)
    store.close()
    data = tmp_path / "s.sqlite3.ivf" / "big.faiss"
    assert len(set(_saved_ids(data).tolist()) & gone_ids) == 450
    again = DocumentStore(path, embedding_model="t", ann_min_chunks=500)
    again.search("big", vecs[3], 5)
    assert again.delete_document(gone.id)
    assert not any(data.parent.iterdir())  # the saved copy went with the document
    again.close()
    saved = set(_saved_ids(data).tolist())
    assert len(saved) == 450 and not saved & gone_ids and kept.chunks == 450


def test_a_save_that_fails_leaves_no_half_written_index(tmp_path, monkeypatch):
    """A full disk while the IVF index is written: no .partial copy of the vectors stays,
    close() still closes, and the next open rebuilds the index from the store."""
    import errno

    import faiss

    from tests.companion.test_rag_index import clustered

    path = tmp_path / "s.sqlite3"
    store = DocumentStore(path, embedding_model="t", ann_min_chunks=500)
    vecs = clustered(600, seed=7)
    store.add_document("big", "a.txt", b"a", "txt", {}, [(f"a{i}", 0, 1) for i in range(600)], vecs)
    store.search("big", vecs[0], 3)
    real = faiss.write_index

    def full(index, name):
        real(index, name)  # the bytes reach the disk, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(faiss, "write_index", full)
    store.close()
    folder = tmp_path / "s.sqlite3.ivf"
    assert not folder.exists() or not any(folder.iterdir())
    monkeypatch.undo()
    again = DocumentStore(path, embedding_model="t", ann_min_chunks=500)
    assert again.search("big", vecs[0], 1)[0].document == "a.txt"
    again.close()
    assert (folder / "big.faiss").is_file()
