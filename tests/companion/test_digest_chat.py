"""The collection's DP digest through the HTTP API (issue 26): the owner estimates and
builds it (each document charged once), a guest question it speaks to is answered from
it at no cost to the key or the documents, one it does not speak to is charged as
before, guests cannot reach the digest's routes, and deleting a document forgets it."""

from __future__ import annotations

import pytest

from tests.companion.test_guest_keys import _as, _new_key, tiny_client

pytestmark = pytest.mark.timeout(300)

SHARED = "For Lovuritis the clinic gives Roabide 10 mg twice a day."
# Enough that a sentence all of them share is released but for a chance under 1e-9 (the
# noise is the CSPRNG's: 40 notes would miss it 4% of the time at epsilon 3).
NOTES = 64


@pytest.fixture
def client(tmp_path, monkeypatch):
    with tiny_client(tmp_path, monkeypatch) as test_client:
        for first in range(0, NOTES, 20):  # max_upload_files per request
            files = [
                (
                    "files",
                    (f"note-{i}.txt", f"{SHARED} Patient {i} came in.".encode(), "text/plain"),
                )
                for i in range(first, min(NOTES, first + 20))
            ]
            up = test_client.post("/v1/documents", files=files, data={"collection": "clinic"})
            assert up.status_code == 200, up.text
        yield test_client


def _ask(question: str) -> dict:
    return {"messages": [{"role": "user", "content": question}], "max_tokens": 4}


def _lovuritis(client, raw: str):
    """A guest's question about what the shared sentence says."""
    return client.post(
        "/v1/chat/completions",
        json=_ask("What does the clinic give for Lovuritis?"),
        headers=_as(raw),
    )


def _answers(client) -> list[int]:
    return sorted(d["answers"] for d in client.get("/v1/budget").json()["documents"])


def test_a_guest_question_the_digest_speaks_to_costs_nothing(client):
    raw = _new_key(client, defense_params={"epsilon": 1}, budget=10)
    estimate = client.post("/v1/collections/clinic/digest/estimate", json={"epsilon": 3})
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["documents_that_can_pay"] == NOTES
    assert _answers(client) == [0] * NOTES  # the estimate charged nothing
    assert client.get("/v1/collections/clinic/digest").status_code == 404
    built = client.post("/v1/collections/clinic/digest", json={"epsilon": 3})
    assert built.status_code == 200, built.text
    texts = [s["text"] for s in built.json()["statements"]]
    assert "For Lovuritis the clinic gives Roabide [number] mg twice a day." in texts
    assert built.json()["guarantee"]["epsilon"] == 3
    assert _answers(client) == [1] * NOTES  # every document charged once
    # guests cannot reach the digest's routes
    assert client.get("/v1/collections/clinic/digest", headers=_as(raw)).status_code == 403
    # a question naming what the digest has: read from it, nothing charged
    got = _lovuritis(client, raw)
    assert got.status_code == 200, got.text
    veil = got.json()["veil"]
    assert veil["receipt"]["mechanism"] == "digest" and veil["receipt"]["epsilon_spent"] == 0
    assert veil["guest"]["spent"] == pytest.approx(0.0)
    assert veil["budget"]["digest"] is True and veil["citations"] == []
    assert _answers(client) == [1] * NOTES
    # a question the digest has nothing on: the key's defense, charged as before
    other = client.post(
        "/v1/chat/completions", json=_ask("What does Patient Pedro take?"), headers=_as(raw)
    )
    assert other.status_code == 200, other.text
    assert other.json()["veil"]["receipt"]["mechanism"] == "bounded"
    assert other.json()["veil"]["guest"]["spent"] == pytest.approx(1.0)
    # the owner's own answers never read the digest
    mine = client.post(
        "/v1/chat/completions", json=_ask("What does the clinic give for Lovuritis?")
    )
    assert mine.json()["veil"]["receipt"]["mechanism"] == "none"
    # deleting a document forgets the digest (it may quote it)
    doc_id = client.get("/v1/documents", params={"collection": "clinic"}).json()[0]["id"]
    assert client.delete(f"/v1/documents/{doc_id}").status_code == 200
    assert client.get("/v1/collections/clinic/digest").status_code == 404
    again = _lovuritis(client, raw)
    assert again.json()["veil"]["receipt"]["mechanism"] == "bounded"


def test_the_digests_requests_are_checked(client):
    assert client.post("/v1/collections/nowhere/digest", json={}).status_code == 404
    bad = client.post("/v1/collections/clinic/digest", json={"epsilon": -1})
    assert bad.status_code in (400, 422)
    extra = client.post("/v1/collections/clinic/digest", json={"epsilon": 3, "seed": 1})
    assert extra.status_code in (400, 422)
    assert client.delete("/v1/collections/clinic/digest").json() == {"deleted": False}


def test_the_first_dp_answer_question_builds_the_digest_once(client):
    raw = _new_key(client, defense="dp_answer", budget=20)
    got = _lovuritis(client, raw)
    assert got.status_code == 200, got.text
    assert got.json()["veil"]["receipt"]["mechanism"] == "digest"
    assert got.json()["veil"]["guest"]["spent"] == pytest.approx(0.0)
    assert client.get("/v1/collections/clinic/digest").status_code == 200
    assert _answers(client) == [1] * NOTES  # the digest's one charge
    log = client.get("/v1/budget/log", params={"limit": 5}).json()["entries"]
    assert log[0]["answer_id"] == "guests' digest"
    # forgotten (a document deleted), it is not built again on its own: the owner decides
    doc_id = client.get("/v1/documents", params={"collection": "clinic"}).json()[0]["id"]
    assert client.delete(f"/v1/documents/{doc_id}").status_code == 200
    again = _lovuritis(client, raw)
    assert again.json()["veil"]["receipt"]["mechanism"] == "dp_answer"
    assert client.get("/v1/collections/clinic/digest").status_code == 404
    log = client.get("/v1/budget/log", params={"limit": 1000}).json()["entries"]
    assert sum(1 for e in log if e["answer_id"] == "guests' digest") == NOTES  # built once


def test_only_the_lifetime_mode_builds_it_and_never_by_the_collections_size(client):
    bounded = _new_key(client, defense_params={"epsilon": 1}, budget=10)
    got = _lovuritis(client, bounded)
    assert got.json()["veil"]["receipt"]["mechanism"] == "bounded"
    assert client.get("/v1/collections/clinic/digest").status_code == 404
    # two notes left: too few for any sentence, built all the same (a rule that looked at
    # the number of documents would tell guests that number by whether the digest answers)
    for doc in client.get("/v1/documents", params={"collection": "clinic"}).json()[2:]:
        assert client.delete(f"/v1/documents/{doc['id']}").status_code == 200
    raw = _new_key(client, defense="dp_answer", budget=20)
    asked = _lovuritis(client, raw)
    assert asked.json()["veil"]["receipt"]["mechanism"] == "dp_answer"
    built = client.get("/v1/collections/clinic/digest")
    assert built.status_code == 200 and built.json()["statements"] == []
