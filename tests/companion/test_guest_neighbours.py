"""A guest cannot tell two neighbouring stores apart by anything but the DP answer itself.

Two stores differ in one note (present in one, deleted in the other).  The same guest
question, under each formal defense, plain and streamed: every field of the response
other than the answer's text and what is computed from the released tokens alone (its
length, the receipt's after-the-fact spend, dp_vote's counts of its noisy releases)
must be equal.  On the code before issue 23 this failed on ``veil.sources`` (2 vs 1),
``veil.budget.retrieval`` (its "found" and "nothing" note), ``receipt.context`` and,
under ``bounded``, ``usage.prompt_tokens``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from companion.models import load_causal_lm
from tests.companion.fakes import KeywordEmbedder
from tests.companion.test_guest_keys import BASE, _tiny_chat_model

NOTES = {
    "gout-1.txt": b"Gout clinic note. The patient with gout takes allopurinol 100 mg daily.",
    "gout-2.txt": b"Second gout note. Colchicine 500 micrograms for gout flares, Mrs Quispe.",
    "asthma.txt": b"Asthma review. Salbutamol inhaler as needed for asthma.",
}
QUESTION = "Which medicine does the gout patient take?"
FORMAL = {"bounded": {"epsilon": 6.0}, "static": {}, "dp_vote": {"epsilon": 10.0}}

# What may differ between two runs on the same store: the answer and what is computed
# from the released tokens only (post-processing of the DP output).
FROM_THE_OUTPUT = {"total_tokens", "epsilon_spent", "epsilon_spent_text", "steps", "reasons"}


def _store(tmp: Path, folder: Path, names: list[str]) -> Any:
    from companion.app import create_app
    from companion.settings import Settings

    app = create_app(
        Settings(
            home=tmp,
            model=str(folder),
            preload_model=False,
            default_max_tokens=4,
            document_budget_epsilon=1e9,
            budget_relevance_threshold=0.5,
        ),
        embedder=KeywordEmbedder(),
    )
    client = TestClient(app, base_url=BASE)
    client.__enter__()
    client.headers["Authorization"] = f"Bearer {app.state.token}"
    files = [("files", (n, NOTES[n], "text/plain")) for n in names]
    assert client.post("/v1/documents", files=files, data={"collection": "clinic"}).is_success
    return client


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = _tiny_chat_model(tmp_path_factory.mktemp("tiny"))
    load_causal_lm(str(folder), device="cpu")  # fail here, not inside a request
    both = _store(tmp_path_factory.mktemp("both"), folder, list(NOTES))
    # the neighbour: the same store with one note deleted (its id and rows are gone)
    less = _store(tmp_path_factory.mktemp("less"), folder, list(NOTES))
    docs = less.get("/v1/documents").json()
    gone = next(d for d in docs if d["name"] == "gout-2.txt")
    assert less.delete(f"/v1/documents/{gone['id']}").is_success
    yield both, less
    for client in (both, less):
        client.__exit__(None, None, None)
    torch.set_num_threads(before)


def _key(client: TestClient, defense: str) -> str:
    body = {
        "collection": "clinic",
        "defense": defense,
        "defense_params": FORMAL[defense],
        "allow_titles": True,  # withheld anyway under a formal defense
    }
    response = client.post("/v1/keys", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def _ask(client: TestClient, raw: str, stream: bool) -> dict[str, Any]:
    """The response (a stream's last event, with its count of deltas)."""
    body = {"messages": [{"role": "user", "content": QUESTION}], "stream": stream}
    headers = {"Authorization": f"Bearer {raw}"}
    if not stream:
        response = client.post("/v1/chat/completions", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return dict(response.json())
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        assert response.status_code == 200
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    events = [json.loads(line) for line in lines[:-1]]
    final = events[-1]
    # the deltas' text is the answer; the events' count is its length: both output
    final["deltas"] = len(events) - 2
    return dict(final)


def _same_answer(stores: Any, defense: str, stream: bool) -> list[dict[str, Any]]:
    """Both stores' guest-visible responses to one question, from a pair of draws with the
    same released output as far as the receipt reads it: the answer's length in tokens, its
    after-the-fact spend and dp_vote's counts of its noisy releases.  What the receipt computes from them (its headline and statement,
    the tokens it protected, the accounting order) differs when they differ --
    post-processing of the DP output -- so the pair compared is one where they are equal:
    then every other field must be equal too."""

    def released(response: dict[str, Any]) -> Any:
        receipt = response["veil"]["receipt"]
        length = (response.get("usage") or {}).get("completion_tokens", response.get("deltas"))
        return length, receipt.get("epsilon_spent"), receipt.get("votes")

    for _ in range(16):
        drawn = [_ask(client, _key(client, defense), stream) for client in stores]
        if released(drawn[0]) == released(drawn[1]):
            return [_guest_visible(response) for response in drawn]
    pytest.fail(f"{defense}: no pair of draws with the same released output in 16 tries")


def _guest_visible(response: dict[str, Any]) -> dict[str, Any]:
    """The response without what may differ from run to run on one store."""
    out = copy.deepcopy(response)
    out.pop("id", None)
    out.pop("created", None)
    out.pop("deltas", None)
    for choice in out.get("choices", []):
        choice.pop("message", None)
        choice.pop("delta", None)
        choice.pop("finish_reason", None)  # stop or length: where the released text ended
    usage = out.get("usage", {})
    usage.pop("completion_tokens", None)
    usage.pop("total_tokens", None)
    veil = out["veil"]
    for name in FROM_THE_OUTPUT:
        veil["receipt"].pop(name, None)
    veil["receipt"].pop("votes", None)  # dp_vote: counts of its noisy releases
    veil["guest"].pop("key_id", None)
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("defense", sorted(FORMAL))
def test_a_guest_sees_the_same_fields_from_neighbouring_stores(stores, defense, stream):
    seen = _same_answer(stores, defense, stream)
    assert seen[0] == seen[1], "a guest-visible field differs between neighbouring stores"
    veil = seen[0]["veil"]
    assert veil["citations"] == [] and "sources" not in veil
    assert "context" not in veil["receipt"]
    assert "retrieval" not in (veil.get("budget") or {})
    text = json.dumps(seen)
    for name in NOTES:  # no document is named anywhere a guest reads
        assert name not in text


def test_the_owner_still_sees_what_was_retrieved(stores):
    """The owner's own view keeps its detail (and does differ between the stores)."""
    body = {
        "messages": [{"role": "user", "content": QUESTION}],
        "collection": "clinic",
        "defense": "bounded",
    }
    views = [c.post("/v1/chat/completions", json=body).json()["veil"] for c in stores]
    assert len(views[0]["citations"]) == 2 and len(views[1]["citations"]) == 1
    assert views[0]["budget"]["retrieval"]["found"] == 2
