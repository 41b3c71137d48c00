"""A guest's released formal answer served again through the chat route (issue 26).

The cache itself (keys, paraphrases, expiry, damage) is tests/companion/test_answer_cache.py's;
here: the route looks up before anything is charged, a hit costs neither the key nor the
documents, a miss is charged and kept once finished, entries are the key's own, the
owner's preview never keeps one, and deleting a document of the collection ends them.
"""

from __future__ import annotations

import json

import pytest

from tests.companion.test_guest_keys import NOTE, _as, _new_key, tiny_client

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def client(tmp_path, monkeypatch):
    with tiny_client(tmp_path, monkeypatch) as test_client:
        for name, data in (("visit.txt", NOTE), ("extra.txt", b"Lab results are due Friday.")):
            up = test_client.post(
                "/v1/documents",
                files=[("files", (name, data, "text/plain"))],
                data={"collection": "clinic"},
            )
            assert up.status_code == 200, up.text
        yield test_client


def _ask(question: str, **extra):
    return {"messages": [{"role": "user", "content": question}], "max_tokens": 4, **extra}


def _answers(client) -> dict[str, int]:
    return {d["document"]: d["answers"] for d in client.get("/v1/budget").json()["documents"]}


def _stream(client, raw: str, question: str) -> tuple[str, dict]:
    with client.stream(
        "POST", "/v1/chat/completions", json=_ask(question, stream=True), headers=_as(raw)
    ) as response:
        assert response.status_code == 200
        events = [
            json.loads(line[6:])
            for line in response.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if "choices" in e)
    return text, events[-1]


def test_a_repeat_is_served_again_and_charges_nothing(client):
    raw = _new_key(client, defense_params={"epsilon": 1}, budget=10)
    first = client.post(
        "/v1/chat/completions", json=_ask("What should Maria take?"), headers=_as(raw)
    )
    assert first.status_code == 200, first.text
    charged = _answers(client)
    assert first.json()["veil"]["guest"]["spent"] == pytest.approx(1.0)
    assert "cache" not in first.json()["veil"]
    # the same question, and one written otherwise with the same names: the same release
    for again in ("What should Maria take?", "  what should maria take  "):
        repeat = client.post("/v1/chat/completions", json=_ask(again), headers=_as(raw))
        assert repeat.status_code == 200, repeat.text
        body = repeat.json()
        assert body["choices"][0]["message"] == first.json()["choices"][0]["message"]
        assert body["veil"]["guest"]["spent"] == pytest.approx(1.0)  # nothing charged
        assert body["veil"]["cache"]["served_again"] is True
        assert body["veil"]["receipt"] == first.json()["veil"]["receipt"]
        assert body["usage"] == first.json()["usage"]
    assert _answers(client) == charged  # nor the documents' lifetime budgets
    # streamed: the same text, the same veil
    text, final = _stream(client, raw, "What should Maria take?")
    assert text == first.json()["choices"][0]["message"]["content"]
    assert final["veil"]["cache"]["served_again"] is True and final["usage"] == body["usage"]
    # Regenerate (fresh): a new answer, charged, kept in place of the earlier one
    regen = client.post(
        "/v1/chat/completions", json=_ask("What should Maria take?", fresh=True), headers=_as(raw)
    )
    assert "cache" not in regen.json()["veil"]
    assert regen.json()["veil"]["guest"]["spent"] == pytest.approx(2.0)
    after = client.post(
        "/v1/chat/completions", json=_ask("What should Maria take?"), headers=_as(raw)
    )
    assert after.json()["choices"][0]["message"] == regen.json()["choices"][0]["message"]
    assert after.json()["veil"]["cache"]["served_again"] is True
    assert after.json()["veil"]["guest"]["spent"] == pytest.approx(2.0)
    # another question (other names): a fresh answer, charged
    other = client.post(
        "/v1/chat/completions", json=_ask("What should Pedro take?"), headers=_as(raw)
    )
    assert "cache" not in other.json()["veil"]
    assert other.json()["veil"]["guest"]["spent"] == pytest.approx(3.0)
    # a streamed fresh answer is kept too
    fresh, final = _stream(client, raw, "When is Lucia due?")
    assert "cache" not in final["veil"]
    again, final = _stream(client, raw, "When is Lucia due?")
    assert again == fresh and final["veil"]["cache"]["served_again"] is True
    assert final["veil"]["guest"]["spent"] == pytest.approx(4.0)


def test_entries_are_the_keys_own_and_the_preview_keeps_none(client):
    one = _new_key(client, defense_params={"epsilon": 1}, budget=10)
    terms = {"collection": "clinic", "defense": "bounded", "defense_params": {"epsilon": 1}}
    created = client.post("/v1/keys", json={**terms, "budget": 10}).json()
    two, two_id = created["key"], created["guest_key"]["id"]
    mine = client.post("/v1/chat/completions", json=_ask("Who is Maria?"), headers=_as(one))
    assert mine.status_code == 200
    # the other key asking the same question gets its own answer, charged to it
    theirs = client.post("/v1/chat/completions", json=_ask("Who is Maria?"), headers=_as(two))
    assert "cache" not in theirs.json()["veil"]
    assert theirs.json()["veil"]["guest"]["spent"] == pytest.approx(1.0)
    # the owner's preview of key two looks up (it shows what the key would receive) ...
    preview = {"X-Veil-Preview-Guest": str(two_id)}
    seen = client.post("/v1/chat/completions", json=_ask("Who is Maria?"), headers=preview)
    assert seen.json()["veil"]["cache"]["served_again"] is True and "preview" in seen.json()["veil"]
    # ... but what it generates afresh is no release the key paid for: never kept
    client.post("/v1/chat/completions", json=_ask("Where is Tomas?"), headers=preview)
    paid = client.post("/v1/chat/completions", json=_ask("Where is Tomas?"), headers=_as(two))
    assert "cache" not in paid.json()["veil"]
    assert paid.json()["veil"]["guest"]["spent"] == pytest.approx(2.0)


def test_deleting_a_document_of_the_collection_ends_its_entries(client):
    raw = _new_key(client, defense_params={"epsilon": 1}, budget=10)
    first = client.post("/v1/chat/completions", json=_ask("Who is Maria?"), headers=_as(raw))
    assert first.status_code == 200
    hit = client.post("/v1/chat/completions", json=_ask("Who is Maria?"), headers=_as(raw))
    assert hit.json()["veil"]["cache"]["served_again"] is True
    extra = next(d for d in client.get("/v1/documents").json() if d["name"] == "extra.txt")
    assert client.delete(f"/v1/documents/{extra['id']}").status_code == 200
    after = client.post("/v1/chat/completions", json=_ask("Who is Maria?"), headers=_as(raw))
    assert "cache" not in after.json()["veil"]
    assert after.json()["veil"]["guest"]["spent"] == pytest.approx(2.0)


def test_answers_without_a_formal_guarantee_and_the_owners_are_not_kept(client):
    loose = _new_key(client, defense="copy_aware")
    for _ in range(2):
        plain = client.post("/v1/chat/completions", json=_ask("Who is Maria?"), headers=_as(loose))
        assert plain.status_code == 200 and "cache" not in plain.json()["veil"]
    for _ in range(2):
        own = client.post("/v1/chat/completions", json=_ask("Who is Maria?"))
        assert own.status_code == 200 and "cache" not in own.json()["veil"]
