"""Conversations (issue 25.3, 25.4): search in the messages' words, regenerate and edit
replace a question and what follows, and the search index keeps no deleted word."""

from __future__ import annotations

import sqlite3

import pytest
import torch
from fastapi.testclient import TestClient

from companion.app import create_app
from companion.conversations import search
from companion.conversations.store import SCHEMA, ConversationStore
from companion.settings import Settings
from tests.companion.fakes import KeywordEmbedder
from tests.companion.test_deleted_gone import occurrences

BASE = "http://127.0.0.1:8765"
GONE = b"zqxvreplaced4417"  # in words that are deleted, and nowhere else
PASSAGE = "zqxvpassage5523"  # in a cited passage only (an answer's veil), never indexed


def _conversation(store: ConversationStore, title: str, *turns: str) -> str:
    conv = store.create(title)
    for n, text in enumerate(turns):
        store.append(conv.id, "user" if n % 2 == 0 else "assistant", text)
    return conv.id


def test_search_finds_the_messages_words_and_the_titles(tmp_path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    lease = _conversation(
        store, "Flat", "When does my tenancy end?", "The lease ends on 31 March, Café Müller."
    )
    gout = _conversation(store, "Gout questions", "What helps gout?", "Allopurinol 100 mg.")
    cites = [{"n": 1, "document": "notes.txt", "document_id": 7, "text": PASSAGE}]
    store.append(gout, "assistant", "See the note.", {"citations": cites})
    # every word in one message (or in the title): the question has "tenancy", the
    # answer "March", so both words together find nothing
    assert store.search("march tenancy") == []
    assert [c.id for c, _ in store.search("lease march")] == [lease]
    assert store.search("lease march")[0][1].role == "assistant"
    snippet = store.search("lease march")[0][1].snippet or ""
    assert f"{search.MARK_START}March{search.MARK_END}" in snippet
    # a word's start, any case, diacritics folded
    assert [c.id for c, _ in store.search("TENAN")] == [lease]
    assert [c.id for c, _ in store.search("cafe muller")] == [lease]
    # titles too, and the message where the words are said when there is one
    by_title = store.search("gout questions")
    assert [c.id for c, _ in by_title] == [gout] and by_title[0][1].to_dict()["in"] == "title"
    assert store.search("allopurinol")[0][1].to_dict()["in"] == "message"
    # a cited passage is not the conversation's words: never indexed
    assert store.search(PASSAGE) == []
    # a query is words, never FTS5 syntax
    for query in ('"', "NEAR(a b)", "a* OR -b", "col:x", "^'", ""):
        assert isinstance(store.search(query), list)
    assert store.search("   ") == []
    store.close()


def test_a_store_from_before_the_search_index_is_indexed_when_opened(tmp_path):
    path = tmp_path / "c.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.execute("INSERT INTO conversations VALUES ('conv_old', 'Old', '{}', 1, 1)")
    conn.execute(
        "INSERT INTO messages (conversation_id, role, content, created) "
        "VALUES ('conv_old', 'user', 'the boiler was serviced in May', 1)"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    store = ConversationStore(path)
    assert [c.id for c, _ in store.search("boiler serviced")] == ["conv_old"]
    store.close()


def test_deleted_conversations_and_replaced_turns_leave_no_word_in_any_file(tmp_path):
    """Deleted means gone, in the search index too: the words of a deleted conversation and
    of a replaced (regenerated or edited) question and answer are in no file under the
    home -- the database, its -wal, its -shm -- and search no longer finds them."""
    store = ConversationStore(tmp_path / "c.sqlite3")
    keep = _conversation(store, "Kept", "What is the rent?", "The rent is 900.")
    doomed = _conversation(store, "Doomed", f"Tell me about {GONE.decode()}", "It is gone.")
    assert [c.id for c, _ in store.search(GONE.decode())] == [doomed]
    assert sum(occurrences(tmp_path, GONE).values()) > 0
    assert store.delete(doomed)
    assert store.search(GONE.decode()) == []
    assert occurrences(tmp_path, GONE) == {}

    # regenerate: the last answer is replaced; edit: the question and what follows
    store.append(keep, "user", f"And {GONE.decode()} the deposit?")
    store.append(keep, "assistant", f"The deposit is {GONE.decode()} 1800.")
    messages = store.get(keep).messages  # type: ignore[union-attr]
    question = messages[2]
    assert sum(occurrences(tmp_path, GONE).values()) > 0
    kept = store.replace_from(
        keep, question.id, [("user", "And the deposit?", None), ("assistant", "1800.", None)]
    )
    assert [m.role for m in kept] == ["user", "assistant"]
    after = store.get(keep).messages  # type: ignore[union-attr]
    assert [m.content for m in after] == [
        "What is the rent?",
        "The rent is 900.",
        "And the deposit?",
        "1800.",
    ]
    assert [m.id for m in after[2:]] == [m.id for m in kept]
    assert store.search(GONE.decode()) == []
    assert occurrences(tmp_path, GONE) == {}
    assert [c.id for c, _ in store.search("deposit")] == [keep]
    with pytest.raises(KeyError):
        store.replace_from(keep, question.id, [("user", "x", None)])  # replaced already
    with pytest.raises(KeyError):
        store.replace_from("conv_" + "0" * 24, after[0].id, [("user", "x", None)])
    store.close()
    assert occurrences(tmp_path, GONE) == {}


@pytest.fixture
def client(tiny_folder, tmp_path):
    torch.set_num_threads(1)
    settings = Settings(home=tmp_path, model=str(tiny_folder), preload_model=False)
    app = create_app(settings, embedder=KeywordEmbedder())
    with TestClient(app, base_url=BASE) as c:
        c.headers["Authorization"] = f"Bearer {app.state.token}"
        yield c


def _ask(client, conv_id, text, stream=False, **extra):
    body = {
        "conversation_id": conv_id,
        "messages": [{"role": "user", "content": text}],
        "collection": None,
        "max_tokens": 2,
        "stream": stream,
        **extra,
    }
    if not stream:
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        return response.json()
    import json

    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        events = [
            json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")
        ]
    return events[-1]


def test_regenerate_and_edit_through_the_chat_api(client):
    conv_id = client.post("/v1/conversations", json={"title": "Flat"}).json()["id"]
    first = _ask(client, conv_id, "What is the rent?")
    second = _ask(client, conv_id, "And the deposit?", stream=True)
    # each answer says which stored messages it made: the page's regenerate and edit use them
    ids = first["conversation"]["message_ids"] + second["conversation"]["message_ids"]
    stored = client.get(f"/v1/conversations/{conv_id}").json()["messages"]
    assert [m["id"] for m in stored] == ids and len(ids) == 4

    # regenerate the last answer: the same question again in place of itself
    again = _ask(client, conv_id, "And the deposit?", stream=True, replace_from=ids[2])
    stored = client.get(f"/v1/conversations/{conv_id}").json()["messages"]
    assert [m["content"] for m in stored[:3]] == [
        "What is the rent?",
        stored[1]["content"],
        "And the deposit?",
    ]
    assert len(stored) == 4  # one answer per question, not a new turn
    assert [m["id"] for m in stored[2:]] == again["conversation"]["message_ids"]

    # edit the first question: it and everything after it are replaced
    edited = _ask(client, conv_id, "What is the service charge?", replace_from=ids[0])
    stored = client.get(f"/v1/conversations/{conv_id}").json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[0]["content"] == "What is the service charge?"
    assert [m["id"] for m in stored] == edited["conversation"]["message_ids"]
    assert edited["usage"]["prompt_tokens"] < second["usage"]["prompt_tokens"] + 1000
    found = client.get("/v1/conversations", params={"q": "service charge"}).json()["data"]
    assert [c["id"] for c in found] == [conv_id] and found[0]["match"]["in"] == "message"
    assert client.get("/v1/conversations", params={"q": "deposit"}).json()["data"] == []


def test_replace_from_is_refused_clearly(client):
    conv_id = client.post("/v1/conversations", json={"title": "Flat"}).json()["id"]
    first = _ask(client, conv_id, "What is the rent?")
    question, answer = first["conversation"]["message_ids"]
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "collection": None}
    no_conv = client.post("/v1/chat/completions", json={**body, "replace_from": question})
    assert no_conv.status_code == 400 and "conversation_id" in no_conv.json()["error"]["message"]
    for bad in (answer, 999_999):  # an answer is not a question; an unknown id
        response = client.post(
            "/v1/chat/completions",
            json={**body, "conversation_id": conv_id, "replace_from": bad},
        )
        assert response.status_code == 404, response.text
        assert response.json()["error"]["param"] == "replace_from"
    assert len(client.get(f"/v1/conversations/{conv_id}").json()["messages"]) == 2
    typo = client.post(
        "/v1/chat/completions",
        json={**body, "conversation_id": conv_id, "replace_form": question},
    )
    assert typo.status_code == 400  # a misspelled Veil field is never ignored
