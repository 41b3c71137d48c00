"""Real OpenAI clients' requests work unchanged (issue 25.1): the fields they send by
default are accepted, and the ones the companion does not act on are named in the
``X-Veil-Ignored`` header; a misspelled Veil field is still a 400."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from companion.app import create_app
from companion.settings import Settings
from tests.companion.fakes import KeywordEmbedder
from tests.companion.scripted_model import tiny_chat_model

BASE = "http://127.0.0.1:8765"
HI: Any = [{"role": "user", "content": "Say hello."}]

# What Open WebUI 0.12.4 sends with its default chat (its "tools" come from its built-in
# tools), and what the SDKs' and other clients' defaults add.
OPEN_WEBUI_DEFAULTS: dict[str, Any] = {
    "stream": True,
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "search_web",
                "description": "Search the web",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ],
    "tool_choice": "auto",
    "stream_options": {"include_usage": True},
}
CLIENT_FIELDS = {
    "tools": OPEN_WEBUI_DEFAULTS["tools"],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "response_format": {"type": "text"},
    "logprobs": True,
    "top_logprobs": 2,
    "frequency_penalty": 0.5,
    "presence_penalty": 0.2,
    "top_p": 0.9,
    "user": "someone",
    "metadata": {"chat_id": "x"},
    "reasoning_effort": "low",
    "stream_options": {"include_usage": True},
    "keep_alive": "5m",  # a client's own field (Ollama-style)
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("tiny-chat"))


@pytest.fixture
def client(tiny, tmp_path):
    torch.set_num_threads(1)
    settings = Settings(home=tmp_path, model=str(tiny), preload_model=False)
    app = create_app(settings, embedder=KeywordEmbedder())
    with TestClient(app, base_url=BASE) as c:
        c.headers["Authorization"] = f"Bearer {app.state.token}"
        yield c


def _ignored(response) -> list[str]:
    value = response.headers.get("x-veil-ignored", "")
    return [v.strip() for v in value.split(",") if v.strip()]


def test_fields_clients_send_by_default_are_accepted_and_named(client):
    body = {"messages": HI, "max_tokens": 3, **CLIENT_FIELDS}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    ignored = _ignored(response)
    expected = set(CLIENT_FIELDS) - {"stream_options"}  # usage is always sent: supported
    assert set(ignored) == expected, ignored
    assert ignored[:2] == ["tools", "tool_choice"]
    choice = response.json()["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["logprobs"] is None


def test_a_plain_request_has_no_warning_header(client):
    response = client.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 2})
    assert response.status_code == 200
    assert "x-veil-ignored" not in response.headers
    neutral = {"messages": HI, "max_tokens": 2, "top_p": 1, "frequency_penalty": 0, "tools": []}
    assert "x-veil-ignored" not in client.post("/v1/chat/completions", json=neutral).headers


def test_open_webui_default_stream_works_and_says_what_it_ignored(client):
    body = {"messages": HI, "max_tokens": 3, **OPEN_WEBUI_DEFAULTS}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert _ignored(response) == ["tools", "tool_choice"]
        text = "".join(response.iter_text())
    assert text.rstrip().endswith("data: [DONE]")
    assert '"usage"' in text and '"error"' not in text


@pytest.mark.parametrize(
    ("field", "meant"),
    [
        ("colection", "collection"),
        ("defence", "defense"),
        ("retrieval_topk", "retrieval_top_k"),
        ("defense_param", "defense_params"),
        ("veil_defense", "defense"),
    ],
)
def test_a_misspelled_veil_field_is_still_a_400(client, field, meant):
    response = client.post("/v1/chat/completions", json={"messages": HI, field: "x"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field
    assert f"did you mean '{meant}'" in error["message"]


def test_the_openai_sdk_with_tools_and_options_unchanged(client):
    from openai import OpenAI

    token = client.headers["Authorization"].split()[1]
    sdk = OpenAI(base_url=f"{BASE}/v1", api_key=token, http_client=client, max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(
        model=sdk.models.list().data[0].id,
        messages=HI,
        max_tokens=3,
        tools=OPEN_WEBUI_DEFAULTS["tools"],
        tool_choice="auto",
        response_format={"type": "text"},
        logprobs=True,
        top_logprobs=1,
        top_p=0.8,
        frequency_penalty=0.1,
        user="u1",
        metadata={"a": "b"},
        reasoning_effort="low",
        parallel_tool_calls=False,
    )
    assert "tools" in raw.headers["x-veil-ignored"]
    completion = raw.parse()
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.tool_calls is None
    stream = sdk.chat.completions.create(
        messages=HI,
        model=completion.model,
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
        tools=OPEN_WEBUI_DEFAULTS["tools"],
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 0


def test_auth_messages_say_what_happened_and_what_to_do(client, tmp_path):
    """Issue 25.4: each refusal is one sentence with what to do (and the token file)."""
    token_file = str(tmp_path / "token")
    missing = client.get("/v1/models", headers={"Authorization": ""}).json()["error"]
    assert missing["message"].startswith("No API token was sent")
    assert token_file in missing["message"] and missing["message"].count(". ") == 0
    wrong = client.get("/v1/models", headers={"Authorization": "Bearer nope"}).json()["error"]
    assert "not this companion's API token" in wrong["message"]
    assert token_file in wrong["message"]
    files = [("files", ("note.txt", b"Gout: allopurinol 100 mg.", "text/plain"))]
    assert client.post("/v1/documents", files=files, data={"collection": "notes"}).is_success
    made = client.post("/v1/keys", json={"collection": "notes", "defense": "bounded"})
    assert made.status_code in (200, 201), made.text
    key, key_id = made.json()["key"], made.json()["guest_key"]["id"]
    guest = {"Authorization": f"Bearer {key}"}
    refused = client.get("/v1/documents", headers=guest).json()["error"]
    assert refused["code"] == "guest_forbidden"
    assert refused["message"].startswith("This is a guest key, which may only chat")
    assert "needs the owner's token" in refused["message"]
    assert client.delete(f"/v1/keys/{key_id}").status_code in (200, 204)
    revoked = client.get("/v1/models", headers=guest)
    assert revoked.status_code == 401
    assert revoked.json()["error"]["message"].startswith(
        "This guest key was revoked by the companion's owner: ask them for a new key"
    )
