"""GET /v1/models lists every loadable model; loading one runs in the background; one
set of defaults for the page and the API (unknown model or collection: 404)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch
from fastapi.testclient import TestClient

from companion.app import create_app
from companion.models import DEFAULT_MODEL, model_catalog
from companion.settings import Settings
from tests.companion.fakes import KeywordEmbedder

BASE = "http://127.0.0.1:8765"
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    from transformers import AutoTokenizer

    from companion.audit.tiny import make_tiny_model

    folder = make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-default")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def home(tmp_path, tiny_folder):
    """A home with a transformers folder, a .gguf file and Veil's own dequantized cache."""
    import shutil

    models = tmp_path / "models"
    shutil.copytree(tiny_folder, models / "my-tiny")
    (models / "notes.gguf").write_bytes(b"GGUF")  # listed; only loading would read it
    cache = models / "SmolLM2-135M-Instruct.Q4_1-0123456789abcdef"
    cache.mkdir()
    (cache / "config.json").write_text("{}")
    (cache / "veil-source.json").write_text(json.dumps({"dequantized_from": "gguf"}))
    (models / "README.txt").write_text("not a model")
    return tmp_path


def test_the_catalog_has_bundled_local_and_given_models(home, tiny_folder):
    entries = model_catalog(str(tiny_folder), [str(home / "models" / "my-tiny")], home)
    ids = [e.id for e in entries]
    assert ids[0] == str(tiny_folder)  # the default first
    assert DEFAULT_MODEL in ids and "my-tiny" not in ids  # given at start: listed by its path
    assert str(home / "models" / "my-tiny") in ids and "notes.gguf" in ids
    assert not any("SmolLM2-135M-Instruct.Q4_1-" in i for i in ids)  # the cache is skipped
    assert not any(i == "README.txt" for i in ids)
    by_id = {e.id: e for e in entries}
    assert by_id["notes.gguf"].format == "gguf" and by_id["notes.gguf"].source == "local"
    plain = model_catalog(None, [], home)
    assert plain[0].id == DEFAULT_MODEL and {"my-tiny", "notes.gguf"} <= {e.id for e in plain}


@pytest.fixture
def client(home, tiny_folder):
    torch.set_num_threads(1)
    settings = Settings(home=home, model=str(tiny_folder), preload_model=False)
    app = create_app(settings, embedder=KeywordEmbedder())
    with TestClient(app, base_url=BASE) as c:
        c.headers["Authorization"] = f"Bearer {app.state.token}"
        c.app_state = app.state  # type: ignore[attr-defined]
        yield c


def _ask(client, **extra):
    body = {"messages": [{"role": "user", "content": "gout?"}], "max_tokens": 2, **extra}
    return client.post("/v1/chat/completions", json=body)


def test_models_are_listed_loaded_in_the_background_and_chosen_per_request(
    client, tiny_folder, monkeypatch
):
    listed = client.get("/v1/models").json()
    ids = [m["id"] for m in listed["data"]]
    assert ids[0] == str(tiny_folder) and listed["data"][0]["veil"]["default"]
    assert "my-tiny" in ids and DEFAULT_MODEL in ids
    local = next(m for m in listed["data"] if m["id"] == "my-tiny")
    assert local["veil"]["path"].endswith("my-tiny") and local["veil"]["state"] == "not_loaded"

    # Loading runs in a thread: the server answers while it runs, the state says the stage.
    import companion.models as models

    real, gate = models.load_causal_lm, threading.Event()

    def slow(spec, **kwargs):
        kwargs["progress"]("reading the transformers weights")
        gate.wait(10)
        return real(spec, **kwargs)

    monkeypatch.setattr(models, "load_causal_lm", slow)
    started = client.post("/v1/models/my-tiny/load")
    assert started.status_code == 202 and started.json()["state"] == "loading"
    t0 = time.monotonic()
    assert client.get("/healthz").status_code == 200 and time.monotonic() - t0 < 2
    state = client.get("/v1/models/my-tiny").json()["load"]
    assert state["state"] == "loading" and state["stage"] == "reading the transformers weights"
    gate.set()
    deadline = time.monotonic() + 20
    while client.get("/v1/models/my-tiny").json()["load"]["state"] != "loaded":
        assert time.monotonic() < deadline, "the model did not load"
        time.sleep(0.05)
    answer = _ask(client, model="my-tiny", collection=None)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "my-tiny"
    assert _ask(client, collection=None).json()["model"] == str(tiny_folder)


def test_an_unknown_model_is_a_clear_404(client):
    for response in (_ask(client, model="gpt-4o"), client.get("/v1/models/gpt-4o"),
                     client.post("/v1/models/gpt-4o/load")):  # fmt: skip
        assert response.status_code == 404, response.text
        message = response.json()["error"]["message"]
        assert "no model named 'gpt-4o'" in message and "GET /v1/models" in message


def test_a_broken_model_file_fails_with_its_reason(client):
    client.post("/v1/models/notes.gguf/load")
    deadline = time.monotonic() + 20
    while (state := client.get("/v1/models/notes.gguf").json()["load"])["state"] == "loading":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert state["state"] == "failed" and state["error"]


def test_collections_default_like_the_page_and_an_unknown_one_is_404(client):
    docs = [("files", ("gout.txt", b"gout gout allopurinol", "text/plain"))]
    assert client.post("/v1/documents", files=docs).is_success  # into "default"
    assert client.post("/v1/documents", files=docs, data={"collection": "med"}).is_success
    settings = client.get("/v1/chat/settings").json()
    assert (
        settings["default_collection"] == "default" and settings["defense"] == "none"
    )  # the owner reads plainly
    assert ".pdf" in settings["upload"]["extensions"]
    left_out = _ask(client).json()  # no collection named: the default one, like the page
    assert [c["collection"] for c in left_out["veil"]["citations"]] == ["default"]
    assert _ask(client, collection=None).json()["veil"]["citations"] == []  # null: none
    named = _ask(client, collection="med").json()
    assert named["veil"]["citations"][0]["collection"] == "med"
    missing = _ask(client, collection="nope")
    assert missing.status_code == 404
    assert "no collection named 'nope'" in missing.json()["error"]["message"]


def test_a_guest_sees_only_the_default_model_without_paths(client, tiny_folder):
    docs = [("files", ("gout.txt", b"gout", "text/plain"))]
    client.post("/v1/documents", files=docs, data={"collection": "med"})
    key = client.post("/v1/keys", json={"collection": "med", "defense": "bounded"}).json()["key"]
    guest = {"Authorization": f"Bearer {key}"}
    listed = client.get("/v1/models", headers=guest).json()["data"]
    assert [m["id"] for m in listed] == [str(tiny_folder)] and "path" not in listed[0]["veil"]
    other = client.post(
        "/v1/chat/completions",
        headers=guest,
        json={"model": "my-tiny", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert other.status_code == 403 and "default model" in other.json()["error"]["message"]
    assert client.post("/v1/models/my-tiny/load", headers=guest).status_code == 403


def test_the_page_learns_where_the_token_is_without_a_token(client, home):
    response = client.get("/chat/setup", headers={"Authorization": ""})
    assert response.status_code == 200
    body = response.json()
    assert body["token_file"] == str(home / "token") and str(home) in body["explanation"]
    assert client.app_state.token not in json.dumps(body)


def test_the_page_and_the_api_have_one_set_of_defense_defaults(client):
    """The knobs the page shows (GET /v1/defenses) are what a request without
    defense_params gets: the receipt of such an answer carries the same parameters."""
    from companion.decoding.config import DefenseConfig

    listed = client.get("/v1/defenses").json()
    assert listed["default"] == client.get("/v1/chat/settings").json()["defense"]
    for entry in listed["data"]:
        applied = DefenseConfig.from_options(entry["name"], {}).to_dict()["params"]
        shown = {k["name"]: k["default"] for k in entry["knobs"]}
        assert {k: applied[k] for k in shown} == shown, entry["name"]
    receipt = _ask(client, collection=None).json()["veil"]["receipt"]
    default = next(e for e in listed["data"] if e["name"] == listed["default"])
    shown = {k["name"]: k["default"] for k in default["knobs"]}
    assert {k: receipt["params"][k] for k in shown} == shown


def test_a_guest_whose_collection_is_gone_gets_a_404_without_the_other_names(client):
    docs = [("files", ("gout.txt", b"gout", "text/plain"))]
    client.post("/v1/documents", files=docs, data={"collection": "med"})
    client.post("/v1/documents", files=docs, data={"collection": "private-notes"})
    key = client.post("/v1/keys", json={"collection": "med", "defense": "bounded"}).json()["key"]
    assert client.delete("/v1/collections/med").status_code == 200
    asked = client.post(
        "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"messages": [{"role": "user", "content": "gout?"}], "max_tokens": 2},
    )
    assert asked.status_code == 404 and "private-notes" not in asked.text
    owner = _ask(client, collection="med")
    assert owner.status_code == 404 and "private-notes" in owner.json()["error"]["message"]


def test_the_served_default_is_the_best_installed_model(monkeypatch, home):
    """Without --model the companion serves the 1.5B where its wheels are installed (it
    answers 71% of `veil eval answers` where SmolLM2 answers 15%), SmolLM2 otherwise;
    VEIL_DEFAULT_MODEL names it outright.  Library callers (load_causal_lm(None): the
    evaluations, the auditor) keep SmolLM2."""
    from companion import models
    from companion.engine import ModelEngine

    monkeypatch.delenv("VEIL_DEFAULT_MODEL", raising=False)
    installed = {models.QWEN_15B: False}
    monkeypatch.setattr(models, "part_model_installed", lambda name: installed.get(name, False))
    assert models.default_model() == models.DEFAULT_MODEL
    assert ModelEngine(spec=None).model_id == models.DEFAULT_MODEL

    installed[models.QWEN_15B] = True
    assert models.default_model() == models.QWEN_15B
    assert ModelEngine(spec=None).model_id == models.QWEN_15B
    assert ModelEngine(spec=models.DEFAULT_MODEL).model_id == models.DEFAULT_MODEL  # --model wins
    entries = model_catalog(None, [], home)
    assert entries[0].id == models.QWEN_15B  # the page and GET /v1/models list it first
    assert models._resolve(None)[1] == models.DEFAULT_GGUF_FILE  # library default: SmolLM2

    monkeypatch.setenv("VEIL_DEFAULT_MODEL", models.QWEN_05B)
    assert models.default_model() == models.QWEN_05B
