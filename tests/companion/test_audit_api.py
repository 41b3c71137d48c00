"""The /v1/audit API through the companion app (security included), on a tiny random model."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from companion.audit.hidden import TargetModel
from companion.audit.tiny import make_tiny_model
from companion.models import load_causal_lm
from tests.companion.audit_support import audit_app

BASE = "http://127.0.0.1:8765"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """The real app (token, Host, Origin checks) with a tiny model behind the audit routes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("VEIL_HOME", str(home))
    folder = make_tiny_model(tmp_path_factory.mktemp("tiny"))
    loaded = load_causal_lm(str(folder), device="cpu")
    opened: list[tuple[str | None, int, str]] = []

    def opener(spec, layer, source):
        opened.append((spec, layer, source))
        return TargetModel(loaded, layer=layer, source=source)

    app = audit_app(home, opener)
    with TestClient(app, base_url=BASE) as test_client:
        test_client.headers["Authorization"] = f"Bearer {app.state.token}"
        test_client.opened = opened  # type: ignore[attr-defined]
        test_client.target = TargetModel(loaded)  # type: ignore[attr-defined]
        yield test_client
    mp.undo()
    torch.set_num_threads(before)


def _events(client, job_id):
    events = []
    with client.stream("GET", f"/v1/audit/inversion/{job_id}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                events.append((kind, json.loads(line[6:])))
    return events


def test_text_job_streams_progress_and_returns_a_proven_result(client):
    """Setup first (never implicit: 409), then POST text -> 202; SSE shows every position."""
    text = "Alice Smith, 12 Baker St"
    refused = client.post("/v1/audit/inversion", json={"text": text})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "setup_required"
    assert "POST /v1/audit/setup" in refused.json()["error"]["message"]
    before = client.get("/v1/audit/setup").json()
    assert before["ready"] is False
    # before the first setup starts, the page is told how long it will take (measured)
    assert before["estimate"]["total_s"] > 0 and before["estimate"]["train_s"] > 0
    setup = client.post("/v1/audit/setup", json={})
    assert setup.status_code == 202, setup.text
    setup_events = _events(client, setup.json()["id"])
    assert "setup" in [k for k, _ in setup_events] and setup_events[-1][0] == "done"
    r = client.post("/v1/audit/inversion", json={"text": text})
    assert r.status_code == 202, r.text
    job = r.json()
    events = _events(client, job["id"])
    kinds = [k for k, _ in events]
    assert kinds[-1] == "done"
    assert "setup" not in kinds
    ids = client.target.encode(text)
    positions = [e for k, e in events if k == "position"]
    assert [e["position"] for e in positions] == list(range(len(ids)))
    result = events[-1][1]["result"]
    assert result["text"] == text and result["exact_match"] is True
    assert result["all_proven"] and result["flagged_positions"] == []
    assert result["cumulative_discrete_loss"] < 1e-8
    for p in result["positions"]:
        assert {"discrete_loss", "rank", "candidates_checked", "seconds", "status"} <= p.keys()
    got = client.get(job["result"]).json()
    assert got["status"] == "done" and got["result"]["token_ids"] == ids


def test_setup_is_reported_once_then_ready(client):
    """After the first job set the model up, the endpoint says ready and jobs skip setup."""
    status = client.get("/v1/audit/setup").json()
    assert status["ready"] is True and status["setup"]["key"].endswith("-L-1")
    assert status["hidden_size"] == client.target.hidden_size
    r = client.post("/v1/audit/inversion", json={"text": "Sydney"})
    events = _events(client, r.json()["id"])
    assert not any(k == "setup" for k, _ in events) and events[-1][0] == "done"


@pytest.mark.parametrize("suffix", [".npy", ".pt", ".safetensors"])
def test_uploaded_states_are_inverted(client, suffix):
    """A multipart upload of hidden states (.npy/.pt/.safetensors) is inverted to the text."""
    from companion.audit.inputs import save_states

    target = client.target
    ids = target.encode("5 mg twice")
    states = target.hidden_states(ids)
    buf = io.BytesIO()
    if suffix == ".npy":
        np.save(buf, states.numpy())
        data = buf.getvalue()
    elif suffix == ".pt":
        torch.save(states, buf)
        data = buf.getvalue()
    else:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "s.safetensors"
            save_states(path, states, identity=target.identity, layer=-1)
            data = path.read_bytes()
    r = client.post(
        "/v1/audit/inversion",
        files={"file": (f"leak{suffix}", data, "application/octet-stream")},
        data={"method": "fast"},
    )
    assert r.status_code == 202, r.text
    events = _events(client, r.json()["id"])
    result = events[-1][1]["result"]
    assert result["token_ids"] == ids and result["all_proven"]
    assert result["exact_match"] is None  # no ground truth with an upload


@pytest.mark.parametrize(
    ("kwargs", "status", "needle"),
    [
        ({"json": {"text": "a", "method": "magic"}}, 400, "method"),
        ({"json": {"text": "a", "sigma": -1}}, 400, "sigma"),
        ({"json": {"text": "a", "bogus": 1}}, 400, "bogus"),
        ({"json": {}}, 400, "exactly one input"),
        ({"json": {"text": "   "}}, 400, "empty"),
        ({"content": b"x", "headers": {"content-type": "text/plain"}}, 415, "content type"),
        (
            {"files": {"file": ("x.npy", b"", "application/octet-stream")}},
            400,
            "could not read",
        ),
        ({"files": {"file": ("x.csv", b"1,2", "text/csv")}}, 400, "unsupported file type"),
    ],
)
def test_bad_requests_get_clear_errors(client, kwargs, status, needle):
    """Each bad request gets a 4xx in the app's error envelope, naming the problem."""
    r = client.post("/v1/audit/inversion", **kwargs)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]["message"]


def test_shape_dtype_and_model_mismatches_are_refused(client):
    """Wrong width, integer dtype and another model's states are 400 before any job starts."""
    from companion.audit.inputs import save_states

    buf = io.BytesIO()
    np.save(buf, np.zeros((4, 7), dtype=np.float32))
    r = client.post("/v1/audit/inversion", files={"file": ("a.npy", buf.getvalue())})
    assert r.status_code == 400 and "width 7" in r.json()["error"]["message"]
    buf = io.BytesIO()
    np.save(buf, np.zeros((4, client.target.hidden_size), dtype=np.int32))
    r = client.post("/v1/audit/inversion", files={"file": ("a.npy", buf.getvalue())})
    assert r.status_code == 400 and "floating point" in r.json()["error"]["message"]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.safetensors"
        save_states(path, torch.zeros(3, client.target.hidden_size), identity="other", layer=-1)
        r = client.post("/v1/audit/inversion", files={"file": ("s.safetensors", path.read_bytes())})
    assert r.status_code == 400 and "saved from model 'other'" in r.json()["error"]["message"]


def test_unknown_job_is_404(client):
    """An unknown id is a 404 in the error envelope."""
    r = client.get("/v1/audit/inversion/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.get("/v1/audit/inversion/nope/events").status_code == 404


def test_running_job_can_be_cancelled(client):
    """DELETE stops a long gradient job; its stream ends with a 'cancelled' error event."""
    r = client.post(
        "/v1/audit/inversion",
        json={"text": "The prime minister", "method": "gradient", "steps": 100000, "seed": 1},
    )
    job_id = r.json()["id"]
    assert client.delete(f"/v1/audit/inversion/{job_id}").json()["cancel_requested"] is True
    events = _events(client, job_id)
    assert events[-1][0] == "error" and events[-1][1]["code"] == "cancelled"
    assert client.get(f"/v1/audit/inversion/{job_id}").json()["status"] == "cancelled"


def test_gradient_job_runs_the_published_method(client):
    """method=gradient runs the Adam proxy search and reports its configuration."""
    r = client.post(
        "/v1/audit/inversion",
        json={"text": "The", "method": "gradient", "steps": 60, "candidates": 64, "seed": 0},
    )
    events = _events(client, r.json()["id"])
    result = events[-1][1]["result"]
    assert result["method"] == "gradient" and result["config"]["steps"] == 60
    assert result["text"] == "The"


def test_noisy_job_reports_nearest_candidates(client):
    """With sigma > 0 no proof is claimed: positions are 'nearest' with runners-up."""
    r = client.post("/v1/audit/inversion", json={"text": "Sydney", "sigma": 0.001, "seed": 4})
    result = _events(client, r.json()["id"])[-1][1]["result"]
    assert all(p["status"] == "nearest" and p["nearest"] for p in result["positions"])
    assert not result["all_proven"]


def test_security_applies_to_the_audit_routes(client):
    """No token: 401; a foreign Origin: 403; a non-loopback Host: 403."""
    no_token = {"Authorization": ""}
    assert (
        client.post("/v1/audit/inversion", json={"text": "a"}, headers=no_token).status_code == 401
    )
    evil = {"Origin": "https://evil.example"}
    assert client.post("/v1/audit/inversion", json={"text": "a"}, headers=evil).status_code == 403
    assert client.get("/v1/audit/setup", headers={"Host": "evil.example"}).status_code == 403


def test_audit_page_is_served(client):
    """The audit page and its script are static files of the companion."""
    page = client.get("/static/audit.html")
    assert page.status_code == 200 and "Hidden-state inversion" in page.text
    assert client.get("/static/audit.js").status_code == 200


def test_the_models_the_auditor_can_read_are_listed(client, tmp_path):
    """GET /v1/audit/models: every model the companion offers, with the layers set up for it
    (read from the setup folders; a model's own load is not needed)."""
    r = client.get("/v1/audit/models")
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data and all({"id", "identity", "ready", "error"} <= set(m) for m in data)
    assert client.get("/v1/audit/models", headers={"Host": "evil.example"}).status_code == 403


def test_a_blocks_kv_cache_is_audited_over_http(client):
    """source=keys: the setup, its status and the inversion are those of block 1's cached
    keys (what a shared or leaked KV cache holds), apart from the hidden states' setup;
    the text comes back exact and proven from the keys alone."""
    where = {"layer": 1, "source": "keys"}
    status = client.get("/v1/audit/setup", params=where).json()
    assert status["ready"] is False and status["source"] == "keys" and status["layer"] == 1
    assert status["hidden_size"] != client.target.hidden_size  # the KV heads' width
    setup = client.post("/v1/audit/setup", json=where)
    assert setup.status_code == 202, setup.text
    events = _events(client, setup.json()["id"])
    assert events[-1][0] == "done" and events[-1][1]["result"]["source"] == "keys"
    status = client.get("/v1/audit/setup", params=where).json()
    assert status["ready"] is True and status["setup"]["key"].endswith("-L1-keys")
    assert client.get("/v1/audit/setup", params={"layer": 1}).json()["ready"] is False
    text = "Alice Smith, 12 Baker St"
    r = client.post("/v1/audit/inversion", json={"text": text, **where})
    assert r.status_code == 202, r.text
    result = _events(client, r.json()["id"])[-1][1]["result"]
    assert result["text"] == text and result["exact_match"] is True and result["all_proven"]
    job = client.get(f"/v1/audit/inversion/{r.json()['id']}").json()
    assert job["source"] == "keys" and job["layer"] == 1
    assert (1, "keys") in [opened[1:] for opened in client.opened]
    bad = client.get("/v1/audit/setup", params={"layer": 1, "source": "queries"})
    assert bad.status_code == 400 and "source" in bad.json()["error"]["message"], bad.text
