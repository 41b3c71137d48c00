"""Conversations: the store, the owner-only /v1/conversations routes, follow-ups in chat."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient

from companion.app import create_app
from companion.conversations.query import retrieval_query
from companion.conversations.store import ConversationStore, to_markdown
from companion.settings import Settings
from py_core.errors import InvalidParameterError
from tests.companion.fakes import KeywordEmbedder

BASE = "http://127.0.0.1:8765"
DOCS = {
    "gout.txt": b"Gout: the doctor prescribed allopurinol 100 mg for gout, gout flares.",
    "asthma.txt": b"Asthma: use the salbutamol inhaler for asthma, two puffs, asthma plan.",
}


def test_store_keeps_renames_exports_and_deletes(tmp_path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    conv = store.create("  Gout   questions ", {"collection": "med", "defense": "none"})
    assert conv.title == "Gout questions" and conv.id.startswith("conv_")
    store.append(conv.id, "user", "What helps gout?")
    cites = [{"n": 1, "document": "gout.pdf", "page": 2, "text": "allopurinol 100 mg"}]
    store.append(conv.id, "assistant", "Allopurinol.", {"citations": cites, "receipt": {}})
    other = store.create("Other")
    assert [c.id for c in store.list()] == [other.id, conv.id]  # newest activity first
    assert store.list()[1].message_count == 2
    store.update(conv.id, title="Renamed", settings={"model": "m"})
    got = store.get(conv.id)
    assert got is not None and got.title == "Renamed"
    assert got.settings == {"collection": "med", "defense": "none", "model": "m"}
    assert [m.role for m in got.messages] == ["user", "assistant"]
    assert got.messages[1].veil == {"citations": cites, "receipt": {}}
    markdown = to_markdown(got)
    assert markdown.startswith("# Renamed\n") and "## You\n\nWhat helps gout?" in markdown
    assert "1. gout.pdf, p. 2: “allopurinol 100 mg”" in markdown
    with pytest.raises(InvalidParameterError, match="unknown conversation settings"):
        store.update(conv.id, settings={"token": "x"})
    with pytest.raises(InvalidParameterError, match="title"):
        store.create("   ")
    with pytest.raises(KeyError):
        store.append("conv_" + "0" * 24, "user", "lost")
    assert store.delete(conv.id) and store.get(conv.id) is None and not store.delete(conv.id)
    assert (tmp_path / "c.sqlite3").stat().st_mode & 0o077 == 0
    store.close()


def test_retrieval_query_modes():
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What helps gout?"},
        {"role": "assistant", "content": "Allopurinol."},
        {"role": "user", "content": "And the dose?"},
    ]
    assert retrieval_query(history, "last") == "And the dose?"
    assert retrieval_query(history, "user_turns") == "What helps gout? And the dose?"
    assert retrieval_query(history, "turns") == "What helps gout? Allopurinol. And the dose?"
    assert retrieval_query(history[:2], "turns") == "What helps gout?"  # a first question
    long = [{"role": "user", "content": "x" * 5000}, {"role": "user", "content": "why?"}]
    query = retrieval_query(long, "user_turns")
    assert query.endswith(" why?") and len(query) == 2000
    with pytest.raises(ValueError, match="retrieval query mode"):
        retrieval_query(history, "rewrite")


@pytest.fixture
def client(tiny_folder, tmp_path, request):
    torch.set_num_threads(1)
    settings = Settings(
        home=tmp_path,
        model=str(tiny_folder),
        preload_model=False,
        document_budget_epsilon=getattr(request, "param", 1000.0),
    )
    app = create_app(settings, embedder=KeywordEmbedder())
    with TestClient(app, base_url=BASE) as c:
        c.headers["Authorization"] = f"Bearer {app.state.token}"
        files = [("files", (name, data, "text/plain")) for name, data in DOCS.items()]
        assert c.post("/v1/documents", files=files, data={"collection": "med"}).is_success
        yield c


def _ask(client, conv_id, text, **extra):
    body = {
        "conversation_id": conv_id,
        "messages": [{"role": "user", "content": text}],
        "collection": "med",
        "defense": "bounded",
        "max_tokens": 3,
        "retrieval_top_k": 1,
        **extra,
    }
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_conversation_continues_is_kept_and_exported(client):
    made = client.post(
        "/v1/conversations", json={"title": "Asthma", "settings": {"collection": "med"}}
    )
    assert made.status_code == 201
    conv_id = made.json()["id"]
    first = _ask(client, conv_id, "What is the plan for asthma?")
    assert first["veil"]["citations"][0]["document"] == "asthma.txt"
    spent = first["veil"]["budget"]["documents"]
    # The follow-up names nothing: retrieval uses the earlier question, the history comes
    # from the store, and the answer is charged to the documents like a single question.
    second = _ask(client, conv_id, "And how often?")
    assert second["veil"]["citations"], second["veil"]
    assert second["veil"]["citations"][0]["document"] == "asthma.txt"
    assert second["usage"]["prompt_tokens"] > first["usage"]["prompt_tokens"]
    assert spent[0]["answers"] == 1 and second["veil"]["budget"]["documents"][0]["answers"] == 2
    stored = client.get(f"/v1/conversations/{conv_id}").json()
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"] * 2
    assert stored["messages"][2]["content"] == "And how often?"
    assert stored["messages"][3]["veil"]["citations"][0]["document"] == "asthma.txt"
    assert client.get("/v1/conversations").json()["data"][0]["messages"] == 4
    renamed = client.patch(f"/v1/conversations/{conv_id}", json={"title": "Inhaler"})
    assert renamed.json()["title"] == "Inhaler"
    export = client.get(f"/v1/conversations/{conv_id}/export")
    assert export.headers["content-type"].startswith("text/markdown")
    assert 'filename="Inhaler.md"' in export.headers["content-disposition"]
    assert "## You\n\nAnd how often?" in export.text and "asthma.txt" in export.text
    # streamed answers are kept too
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={
            "conversation_id": conv_id,
            "messages": [{"role": "user", "content": "More?"}],
            "collection": "med",
            "max_tokens": 2,
            "stream": True,
        },
    ) as stream:
        assert stream.status_code == 200 and "[DONE]" in "".join(stream.iter_text())
    assert len(client.get(f"/v1/conversations/{conv_id}").json()["messages"]) == 6
    assert client.delete(f"/v1/conversations/{conv_id}").json()["deleted"]
    assert client.get(f"/v1/conversations/{conv_id}").status_code == 404


@pytest.mark.parametrize("client", [10.0], indirect=True)
def test_a_follow_up_pays_the_document_budget_like_a_question(client):
    """Lifetime budget 10, bounded answers at epsilon 8: the follow-up finds the document spent."""
    conv_id = client.post("/v1/conversations", json={}).json()["id"]
    first = _ask(client, conv_id, "What is the plan for asthma?")
    assert [d["document"] for d in first["veil"]["budget"]["documents"]] == ["asthma.txt"]
    second = _ask(client, conv_id, "And how often?")
    assert second["veil"]["citations"] == [] and second["veil"]["budget"]["documents"] == []
    assert second["veil"]["budget"]["excluded"][0]["document"] == "asthma.txt"


def test_unknown_conversation_and_bad_ids_are_clear(client):
    missing = "conv_" + "a" * 24
    response = client.post(
        "/v1/chat/completions",
        json={"conversation_id": missing, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 404 and missing in response.json()["error"]["message"]
    assert client.get(f"/v1/conversations/{missing}").status_code == 404
    assert client.patch(f"/v1/conversations/{missing}", json={"title": "x"}).status_code == 404
    assert client.get("/v1/conversations/not-an-id").status_code == 400
    bad = client.post("/v1/conversations", json={"settings": {"secret": 1}})
    assert bad.status_code == 400 and "unknown conversation settings" in bad.text


def test_guests_cannot_list_read_or_continue_conversations(client):
    conv_id = client.post("/v1/conversations", json={"title": "private"}).json()["id"]
    key = client.post("/v1/keys", json={"collection": "med", "defense": "bounded"}).json()["key"]
    guest = {"Authorization": f"Bearer {key}"}
    for method, path in (
        ("GET", "/v1/conversations"),
        ("GET", f"/v1/conversations/{conv_id}"),
        ("GET", f"/v1/conversations/{conv_id}/export"),
        ("DELETE", f"/v1/conversations/{conv_id}"),
        ("POST", "/v1/conversations"),
    ):
        response = client.request(
            method, path, headers=guest, json={} if method == "POST" else None
        )
        assert response.status_code == 403, (method, path, response.text)
    asked = client.post(
        "/v1/chat/completions",
        headers=guest,
        json={"conversation_id": conv_id, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert asked.status_code == 403 and "conversation" in asked.json()["error"]["message"]
    assert client.get(f"/v1/conversations/{conv_id}").json()["messages"] == []
