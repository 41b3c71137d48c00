"""The companion's API: security checks, error envelope, chat (plain, streamed, OpenAI SDK)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from companion.app import create_app
from companion.engine import ModelEngine
from companion.errors import APIError
from companion.security import ensure_token
from companion.settings import VEIL_EXTENSION_ID, Settings, veil_home
from py_core.errors import StateError
from tests.companion.fakes import ConstantEmbedder

ROOT = Path(__file__).resolve().parents[2]

BASE = "http://127.0.0.1:8765"
NOTE = (
    b"Patient: Maria Lopez (maria.lopez@example.org, phone (415) 555-0187) has had a dry cough "
    b"and a mild fever for five days. Doctor: this looks like bronchitis; take amoxicillin "
    b"500 mg three times a day for seven days."
)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    home = tmp_path_factory.mktemp("veil-home")
    models = str(veil_home() / "models")
    if os.path.isdir(models):  # reuse the dequantized model cache
        os.symlink(models, home / "models")
    settings = Settings(home=home, max_body_bytes=4096, max_upload_bytes=64_000, allow_seed=True)
    app = create_app(settings)
    with TestClient(app, base_url=BASE) as test_client:
        test_client.headers["Authorization"] = f"Bearer {app.state.token}"
        yield test_client


def _error(response):
    body = response.json()
    assert set(body) == {"error"} and {"message", "type", "code"} <= set(body["error"])
    return body["error"]


def test_token_is_created_once_with_mode_0600(tmp_path):
    """The token file is created on first run with mode 0600 and then reused."""
    path = tmp_path / "sub" / "token"
    token = ensure_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(token) >= 32
    assert ensure_token(path) == token
    path.write_text("short")
    with pytest.raises(StateError, match="delete it"):
        ensure_token(path)


@pytest.mark.slow
def test_v1_routes_require_the_token(client):
    """Without or with a wrong bearer token, /v1 answers 401 with the error envelope."""
    assert _error(client.get("/v1/models", headers={"Authorization": ""}))["code"] == (
        "unauthorized"
    )
    wrong = client.get("/v1/models", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert client.get("/v1/models").status_code == 200
    assert client.get("/healthz").status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1.evil.example", "192.168.1.5:8765"])
def test_non_loopback_host_is_refused(client, host):
    """A Host that is not a loopback name (DNS rebinding) gets 403 on every route."""
    for path in ("/", "/healthz", "/v1/models"):
        response = client.get(path, headers={"Host": host})
        assert response.status_code == 403 and _error(response)["code"] == "forbidden_host"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://127.0.0.1:8765", True),
        (f"chrome-extension://{VEIL_EXTENSION_ID}", True),
        ("chrome-extension://abcdefghijklmnopabcdefghijklmnop", False),  # another extension
        ("https://evil.example", False),
        ("http://127.0.0.1:9999", False),
        ("http://localhost.evil.example:8765", False),
        ("null", False),
    ],
)
def test_origin_is_checked(client, origin, allowed):
    """Only the companion's own page and the Veil extension may call it cross-origin."""
    response = client.get("/v1/models", headers={"Origin": origin})
    if allowed:
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == origin
    else:
        assert response.status_code == 403 and _error(response)["code"] == "forbidden_origin"


@pytest.mark.slow
def test_body_size_limits(client):
    """Bodies over the limit get 413, declared or streamed; uploads have their own limit."""
    big = {"messages": [{"role": "user", "content": "x" * 5000}]}
    response = client.post("/v1/chat/completions", json=big)
    assert response.status_code == 413 and _error(response)["code"] == "payload_too_large"

    def chunks():
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}]}'

    streamed = client.post(
        "/v1/chat/completions", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    upload = client.post(
        "/v1/documents", files=[("files", ("big.txt", b"z " * 40_000, "text/plain"))]
    )
    assert upload.status_code == 413
    # Hidden-state files for the auditor are uploads too: over the body limit, under the
    # upload limit, they reach the endpoint (which then judges the file itself).
    states = client.post(
        "/v1/audit/inversion",
        files=[("file", ("states.npy", b"\0" * 10_000, "application/octet-stream"))],
    )
    assert states.status_code == 400, states.text
    assert "states.npy" in _error(states)["message"] or ".npy" in _error(states)["message"]


@pytest.mark.slow
def test_defenses_route_lists_the_registry(client):
    """GET /v1/defenses is the registry: names in menu order, defaults, guarantees, knobs."""
    from companion.decoding.registry import DEFAULT_DEFENSE, DEFENSES, get_defense

    body = client.get("/v1/defenses").json()
    # the owner's request without a defense reads plainly; a new guest key's default is
    # the registry's
    assert body["default"] == "none" and body["guest_default"] == DEFAULT_DEFENSE
    assert [d["name"] for d in body["data"]] == list(DEFENSES)
    for entry in body["data"]:
        defense = get_defense(entry["name"])
        assert entry["guarantee"]["formal"] is defense.guarantee.formal
        assert entry["defaults"] == json.loads(json.dumps(defense.defaults()))
    assert client.get("/healthz").json()["defenses"] == list(DEFENSES)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "param"),
    [
        ("{not json", None),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "hi"}], "defense": "magic"}, "defense"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "defense_params": {"sigma": -1}},
            "defense_params",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "hi"}], "top_p": 1.5}, "top_p"),
        # a misspelled Veil field (another unknown field is accepted: X-Veil-Ignored)
        ({"messages": [{"role": "user", "content": "hi"}], "colection": "a"}, "colection"),
    ],
)
def test_malformed_chat_requests_get_a_clear_400(client, body, param):
    """Malformed chat requests get 400 with a message naming the problem."""
    if isinstance(body, str):
        response = client.post(
            "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
        )
    else:
        response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = _error(response)
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param


@pytest.mark.slow
def test_unknown_routes_use_the_envelope(client):
    """404 and 405 come in the same error envelope."""
    assert _error(client.get("/v1/nothing"))["code"] == "not_found"
    assert _error(client.delete("/v1/models"))["code"] == "method_not_allowed"


@pytest.mark.slow
def test_documents_upload_list_search_and_delete(client):
    """Uploading, listing, searching and deleting documents through the API."""
    response = client.post(
        "/v1/documents",
        files=[("files", ("note.txt", NOTE, "text/plain"))],
        data={"collection": "clinic"},
    )
    assert response.status_code == 200, response.text
    doc = response.json()["documents"][0]["document"]
    assert doc["collection"] == "clinic" and doc["chunks"] == 1
    names = [c["name"] for c in client.get("/v1/collections").json()]
    assert "clinic" in names
    hits = client.post("/v1/search", json={"query": "cough", "collection": "clinic"}).json()
    assert hits["hits"][0]["document"] == "note.txt"
    bad = client.post("/v1/documents", files=[("files", ("x.exe", b"MZ", "application/x"))])
    assert bad.status_code == 400 and "unsupported file type" in _error(bad)["message"]
    temp = client.post(
        "/v1/documents", files=[("files", ("tmp.md", b"# temp doc", "text/markdown"))]
    ).json()["documents"][0]["document"]
    assert client.delete(f"/v1/documents/{temp['id']}").json()["deleted"]
    assert client.get(f"/v1/documents/{temp['id']}").status_code == 404


@pytest.mark.slow
def test_chat_completion_with_receipt_and_citations(client):
    """A non-streamed answer carries the receipt and the cited chunks."""
    client.post(
        "/v1/documents",
        files=[("files", ("note.txt", NOTE, "text/plain"))],
        data={"collection": "clinic"},
    )
    response = client.post(
        "/v1/chat/completions",
        json={
            "model": "smollm2-135m-instruct",
            "messages": [{"role": "user", "content": "What should the patient take?"}],
            "collection": "clinic",
            "max_tokens": 12,
            "defense": "pad",
            "seed": 3,
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
    receipt = body["veil"]["receipt"]
    assert receipt["mechanism"] == "pad" and receipt["total_tokens"] >= 1
    assert receipt["statement"]
    assert body["veil"]["citations"][0]["document"] == "note.txt"
    assert body["usage"]["completion_tokens"] <= 12


@pytest.mark.slow
def test_seed_is_refused_unless_allowed(tmp_path):
    """A client-supplied seed is refused by default: noise comes from a CSPRNG."""
    app = create_app(Settings(home=tmp_path, preload_model=False))
    with TestClient(app, base_url=BASE) as c:
        response = c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "seed": 1},
            headers={"Authorization": f"Bearer {app.state.token}"},
        )
    assert response.status_code == 400 and _error(response)["code"] == "insecure_randomness"


@pytest.mark.slow
def test_streaming_format_ends_with_receipt_and_done(client):
    """SSE chunks are chat.completion.chunk events, the last carries the receipt, then [DONE]."""
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "Say hello."}],
            "stream": True,
            "max_tokens": 8,
            "defense": "copy_aware",
        },
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    final = events[-1]
    assert final["choices"][0]["finish_reason"] in ("stop", "length")
    assert final["veil"]["receipt"]["mechanism"] == "copy_aware"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert text.strip()


@pytest.mark.slow
def test_openai_sdk_works_unchanged(client):
    """The official OpenAI SDK, pointed at the app, chats and streams without changes."""
    from openai import OpenAI

    token = client.headers["Authorization"].split()[1]
    sdk = OpenAI(base_url=f"{BASE}/v1", api_key=token, http_client=client, max_retries=0)
    models = sdk.models.list()
    assert models.data[0].id
    completion = sdk.chat.completions.create(
        model=models.data[0].id,
        messages=[{"role": "user", "content": "Name a fruit."}],
        max_tokens=8,
        extra_body={"defense": "none"},
    )
    assert completion.choices[0].message.content
    assert completion.model_extra["veil"]["receipt"]["mechanism"] == "none"
    stream = sdk.chat.completions.create(
        model=models.data[0].id,
        messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=6,
        stream=True,
    )
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert "".join(pieces).strip()
    bad = OpenAI(base_url=f"{BASE}/v1", api_key="wrong", http_client=client, max_retries=0)
    from openai import AuthenticationError

    with pytest.raises(AuthenticationError, match="API token"):
        bad.models.list()


def test_engine_queue_full_and_wait_timeout_are_503():
    """With the model held, a full queue or a wait past the timeout answers 503."""

    async def scenario() -> None:
        engine = ModelEngine(spec=None, queue_size=0, queue_timeout_s=0.05)
        async with engine.slot():
            with pytest.raises(APIError) as full:
                async with engine.slot():
                    pass
            assert full.value.status == 503
        waiting = ModelEngine(spec=None, queue_size=1, queue_timeout_s=0.05)
        async with waiting.slot():
            with pytest.raises(APIError, match="waited") as late:
                async with waiting.slot():
                    pass
            assert late.value.status == 503

    asyncio.run(scenario())


def test_engine_generation_timeout_is_504_and_cancels_the_work():
    """A generation that runs past its timeout is cancelled and reported as 504."""
    import threading
    import time

    stopped = threading.Event()

    def work(cancel: threading.Event):
        while not cancel.is_set():
            time.sleep(0.01)
            yield "x"
        stopped.set()

    async def scenario() -> None:
        engine = ModelEngine(spec=None, generation_timeout_s=0.2)
        with pytest.raises(APIError) as exc:
            async for _ in engine.run_stream(work):
                pass
        assert exc.value.status == 504

    asyncio.run(scenario())
    assert stopped.wait(2)


def test_veil_extension_id_matches_the_manifest_key():
    """The Origin allowed by default is the id Chrome derives from the manifest's public key."""
    manifest = json.loads((ROOT / "extension" / "static" / "manifest.json").read_text())
    digest = hashlib.sha256(base64.b64decode(manifest["key"])).hexdigest()[:32]
    assert "".join(chr(ord("a") + int(c, 16)) for c in digest) == VEIL_EXTENSION_ID


def test_compute_precision_is_chosen_and_checked(tmp_path, monkeypatch):
    """float32 by default for loaders (audits, evaluations), bf16 on request; bad names refused."""
    from pydantic import ValidationError

    from companion.audit.tiny import make_tiny_model
    from companion.models import load_causal_lm, pick_dtype
    from py_core.errors import InvalidParameterError

    monkeypatch.setenv("VEIL_HOME", str(tmp_path / "home"))
    assert pick_dtype("float32", "cpu") == "float32"
    assert pick_dtype("bfloat16", "cpu") == "bfloat16"
    assert pick_dtype("auto", "mps") == "float32"
    with pytest.raises(InvalidParameterError, match="dtype must be one of"):
        pick_dtype("half", "cpu")
    with pytest.raises(ValidationError):
        Settings(dtype="half")
    folder = make_tiny_model(tmp_path / "tiny")
    plain = load_causal_lm(str(folder), device="cpu")
    half = load_causal_lm(str(folder), device="cpu", dtype="bfloat16")
    assert plain.dtype == "float32" and next(plain.model.parameters()).dtype.is_floating_point
    assert str(next(plain.model.parameters()).dtype) == "torch.float32"
    assert half.dtype == "bfloat16"
    assert {str(p.dtype) for p in half.model.parameters()} == {"torch.bfloat16"}


@pytest.mark.slow
def test_health_reports_the_chat_models_precision(client):
    """auto: the bundled SmolLM2 (135 M, under companion.models.LLAMACPP_PARAMETERS) on
    torch, in bfloat16 where this machine makes it fast, else float32; /healthz says which."""
    from companion.models import bf16_supported

    body = client.get("/healthz").json()
    assert body["model_loaded"]
    model = client.app.state.engine.loaded.model
    assert body["backend"] == "torch"
    assert body["dtype"] == ("bfloat16" if bf16_supported(body["device"]) else "float32")
    param = next(model.parameters())
    assert str(param.dtype) == f"torch.{body['dtype']}"


def test_one_version_string_everywhere():
    """py_core.__version__ is the version of the package, the API and the extension."""
    import py_core
    from companion.settings import VERSION

    package = json.loads((ROOT / "package.json").read_text())
    assert package["version"] == py_core.__version__ == VERSION
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'attr = "py_core.__version__"' in pyproject
    from importlib.metadata import version

    assert version("veil") == py_core.__version__


def test_dependencies_come_from_the_lifespan_and_can_be_overridden(tmp_path):
    """Routes read the RAG service through a dependency that a test can replace."""
    from companion.api.deps import get_rag

    class FakeStore:
        def documents(self, collection=None):
            return ["a", "b", "c"]

        def document_count(self):
            return len(self.documents())

    class FakeRag:
        store = FakeStore()

    app = create_app(Settings(home=tmp_path, preload_model=False), embedder=ConstantEmbedder())
    with TestClient(app, base_url=BASE) as test_client:
        test_client.headers["Authorization"] = f"Bearer {app.state.token}"
        assert test_client.get("/healthz").json()["documents"] == 0
        app.dependency_overrides[get_rag] = FakeRag
        assert test_client.get("/healthz").json()["documents"] == 3
