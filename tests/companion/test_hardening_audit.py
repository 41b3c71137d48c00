"""Audit jobs cannot starve the server: bounded queue, one job per model, cancellation that stops.

Issue 15: a long job held a lock that setup-status requests and new jobs waited on,
Cancel answered 200 but stopped nothing, the first fast job silently began the
setup, and SIGTERM left the server waiting.  These tests run the real app (token,
Host and Origin checks included) with a tiny random model behind the audit routes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from fastapi.testclient import TestClient

from companion.audit.hidden import TargetModel
from companion.audit.ranker import SetupConfig, setup_dir
from companion.audit.tiny import make_tiny_model
from companion.models import load_causal_lm
from tests.companion.audit_support import audit_app, opener_for

BASE = "http://127.0.0.1:8765"
ROOT = Path(__file__).resolve().parents[2]
# A setup that runs for minutes on the tiny model (cancelled long before it ends).
LONG_SETUP = SetupConfig.thorough(
    sequences=4096, length=64, generation_batch=8, epochs=50, hidden=96
)
LONG_GRADIENT = {"text": "The prime minister", "method": "gradient", "steps": 100_000, "seed": 1}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    loaded = load_causal_lm(str(make_tiny_model(tmp_path_factory.mktemp("tiny"))), device="cpu")
    yield loaded
    torch.set_num_threads(before)


@pytest.fixture
def make_client(tiny, tmp_path, monkeypatch):
    """A client factory: the app with the given settings, on a fresh VEIL_HOME."""
    monkeypatch.setenv("VEIL_HOME", str(tmp_path))
    clients = []

    def make(**settings):
        app = audit_app(tmp_path, opener_for(tiny), **settings)
        client = TestClient(app, base_url=BASE)
        client.__enter__()
        client.headers["Authorization"] = f"Bearer {app.state.token}"
        client.jobs = app.state.audit_jobs  # type: ignore[attr-defined]
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def _wait(predicate, timeout=60.0):
    """Poll ``predicate`` until true (a generous bound: a loaded machine is slow)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _status(client, job_id):
    return client.get(f"/v1/audit/inversion/{job_id}").json()["status"]


def _setup(client):
    r = client.post("/v1/audit/setup", json={})
    assert r.status_code == 202, r.text
    assert _wait(lambda: _status(client, r.json()["id"]) == "done", 120)


def _generating(event):
    """How many training sequences a setup event says are generated (-1: another stage)."""
    return event["done"] if event.get("stage") == "generating training text" else -1


def _cancel_costs_little_cpu(client, job_id):
    """CPU seconds the process spends between DELETE and the job's end (load-independent)."""
    process = psutil.Process()
    before = sum(process.cpu_times()[:2])
    assert client.delete(f"/v1/audit/inversion/{job_id}").status_code == 200
    assert _wait(lambda: _status(client, job_id) == "cancelled")
    return sum(process.cpu_times()[:2]) - before


def test_cancel_stops_a_running_inversion_within_2_s(make_client):
    """DELETE on a running gradient job ends it after well under 2 s of CPU work."""
    client = make_client()
    job_id = client.post("/v1/audit/inversion", json=LONG_GRADIENT).json()["id"]
    assert _wait(lambda: _status(client, job_id) == "running")
    time.sleep(0.3)  # inside the search
    assert _cancel_costs_little_cpu(client, job_id) < 2.0
    job = client.jobs.get(job_id)
    assert job.thread is not None and not job.thread.is_alive()
    assert job.error["code"] == "cancelled"


def test_cancel_stops_a_running_setup_within_2_s_and_keeps_its_progress(make_client, tiny):
    """A cancelled setup stops within 2 s of CPU; a new setup resumes from what it saved."""
    client = make_client()
    client.jobs.setup_config = LONG_SETUP
    job_id = client.post("/v1/audit/setup", json={}).json()["id"]
    job = client.jobs.get(job_id)
    assert _wait(lambda: any(_generating(e) >= 16 for e in job.events))
    assert _cancel_costs_little_cpu(client, job_id) < 2.0
    assert not job.thread.is_alive()
    folder = setup_dir(TargetModel(tiny))
    assert (folder / "table.pt").exists()  # the finished stage is kept
    assert (folder / "chunks.pt").exists()  # and the training text generated so far
    made = len(torch.load(folder / "chunks.pt", weights_only=True))
    again = client.post("/v1/audit/setup", json={}).json()["id"]
    rejob = client.jobs.get(again)
    assert _wait(lambda: any(e.get("stage") == "generating training text" for e in rejob.events))
    first = next(e for e in rejob.events if e.get("stage") == "generating training text")
    assert not any(e.get("stage") == "position-0 table" for e in rejob.events)
    assert first["done"] >= made * LONG_SETUP.generation_batch - LONG_SETUP.generation_batch
    client.delete(f"/v1/audit/inversion/{again}")
    assert _wait(lambda: _status(client, again) == "cancelled")


def test_fast_job_never_starts_the_setup_implicitly(make_client):
    """Without the setup, a fast job gets 409 naming how to run it; no job is created."""
    client = make_client()
    r = client.post("/v1/audit/inversion", json={"text": "Sydney"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "setup_required"
    assert "Set up" in r.json()["error"]["message"]
    assert client.get("/v1/audit/inversion").json()["jobs"] == []
    assert not setup_dir(client.jobs.pool.get(None, -1)).exists()


def test_queue_is_bounded_with_a_retry_hint_and_one_job_runs_per_model(make_client):
    """One job runs, the next waits queued; past the queue's bound: 429 with Retry-After."""
    client = make_client(audit_max_queued=1)
    first = client.post("/v1/audit/inversion", json=LONG_GRADIENT).json()["id"]
    second = client.post("/v1/audit/inversion", json=LONG_GRADIENT).json()["id"]
    assert _wait(lambda: _status(client, first) == "running")
    time.sleep(0.3)
    assert _status(client, second) == "queued"  # same model: it waits its turn
    full = client.post("/v1/audit/inversion", json=LONG_GRADIENT)
    assert full.status_code == 429, full.text
    assert full.json()["error"]["code"] == "queue_full"
    assert int(full.headers["retry-after"]) > 0
    listed = client.get("/v1/audit/inversion").json()["jobs"]
    assert [(j["id"], j["status"]) for j in listed] == [(first, "running"), (second, "queued")]
    client.delete(f"/v1/audit/inversion/{first}")
    assert _wait(lambda: _status(client, second) == "running")  # the queue moves on
    client.delete(f"/v1/audit/inversion/{second}")
    assert _wait(lambda: _status(client, second) == "cancelled")


def test_a_queued_job_is_cancelled_at_once(make_client):
    """DELETE on a queued job ends it without running; its stream ends 'cancelled'."""
    client = make_client()
    first = client.post("/v1/audit/inversion", json=LONG_GRADIENT).json()["id"]
    second = client.post("/v1/audit/inversion", json=LONG_GRADIENT).json()["id"]
    assert client.delete(f"/v1/audit/inversion/{second}").status_code == 200
    job = client.jobs.get(second)
    assert job.status == "cancelled" and job.thread is None  # never started
    with client.stream("GET", f"/v1/audit/inversion/{second}/events") as stream:
        body = "".join(stream.iter_text())
    assert "event: error" in body and '"cancelled"' in body
    client.delete(f"/v1/audit/inversion/{first}")
    assert _wait(lambda: _status(client, first) == "cancelled")


def test_jobs_nobody_followed_are_dropped_before_they_start(make_client):
    """A queued job whose client went away (no stream, no status read) is dropped at its turn."""
    client = make_client(audit_abandon_s=0.2)
    first = client.post("/v1/audit/inversion", json=LONG_GRADIENT).json()["id"]
    second = client.post("/v1/audit/inversion", json=LONG_GRADIENT).json()["id"]
    job = client.jobs.get(second)
    time.sleep(0.5)  # nobody reads the second job
    client.delete(f"/v1/audit/inversion/{first}")
    assert _wait(lambda: job.finished)
    assert job.status == "cancelled" and job.error["code"] == "abandoned"
    assert job.thread is None


def test_no_handler_waits_for_a_running_job(make_client):
    """While a job runs, setup status, the job list, health and the page answer at once."""
    client = make_client()
    job_id = client.post("/v1/audit/inversion", json=LONG_GRADIENT).json()["id"]
    assert _wait(lambda: _status(client, job_id) == "running")
    answers: list[int] = []

    def calls():
        for _ in range(10):
            for path in ("/v1/audit/setup", "/v1/audit/inversion", "/healthz", "/"):
                answers.append(client.get(path).status_code)

    worker = threading.Thread(target=calls, daemon=True)
    worker.start()
    worker.join(60)  # a handler blocked on the job would never return
    assert not worker.is_alive() and answers == [200] * 40
    client.delete(f"/v1/audit/inversion/{job_id}")
    assert _wait(lambda: _status(client, job_id) == "cancelled")


def test_setup_status_names_the_running_setup_so_a_page_can_reattach(make_client):
    """GET /v1/audit/setup gives the running setup job; the list gives its progress."""
    client = make_client()
    client.jobs.setup_config = LONG_SETUP
    job_id = client.post("/v1/audit/setup", json={}).json()["id"]
    again = client.post("/v1/audit/setup", json={}).json()["id"]
    assert again == job_id  # one setup per model
    status = client.get("/v1/audit/setup").json()
    assert status["ready"] is False and status["job"]["id"] == job_id
    assert _wait(lambda: client.get("/v1/audit/inversion").json()["jobs"][0]["progress"])
    listed = client.get("/v1/audit/inversion").json()["jobs"][0]
    assert listed["kind"] == "setup" and listed["progress"]["kind"] == "setup"
    client.delete(f"/v1/audit/inversion/{job_id}")
    assert _wait(lambda: _status(client, job_id) == "cancelled")


def test_concurrent_setup_requests_share_one_job(make_client):
    """Issue 24: 40 concurrent POST /v1/audit/setup made 4 to 8 setup jobs (each request
    looked for a running setup, found none, then queued its own); now they share one.

    The model lookup between the look and the queueing is slowed so that every request
    is inside that window at once, as on a loaded machine."""
    client = make_client(audit_max_queued=64)
    client.jobs.setup_config = LONG_SETUP
    pool, real_get = client.jobs.pool, client.jobs.pool.get

    def slow_get(spec, layer, source="hidden"):
        time.sleep(0.2)
        return real_get(spec, layer, source)

    pool.get = slow_get
    answers: list = []

    def post():
        answers.append(client.post("/v1/audit/setup", json={}))

    threads = [threading.Thread(target=post) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [r.status_code for r in answers] == [202] * 12
    ids = {r.json()["id"] for r in answers}
    setups = [j for j in client.jobs.jobs() if j.kind == "setup"]
    assert len(ids) == 1 and len(setups) == 1, (ids, [j.status for j in setups])
    client.delete(f"/v1/audit/inversion/{ids.pop()}")
    assert _wait(lambda: all(j.finished for j in client.jobs.jobs()))


def test_no_request_after_startup_builds_fastapis_route_table(make_client, monkeypatch):
    """FastAPI builds an included router's route table (every route's dependencies and body
    schemas) the first time a request passes it, on the event loop -- 0.15-0.35 s during
    which nothing else is answered: the first audit setup request after a start stalled
    /healthz (issue 24).  The app builds it at startup, so no request does."""
    import fastapi.routing

    context = getattr(fastapi.routing, "_EffectiveRouteContext", None)
    if context is None:
        pytest.skip("this FastAPI builds its route table at include time")
    client = make_client()
    built: list[str] = []
    real = context.from_api_route.__func__

    def counting(cls, *args, **kwargs):
        built.append(kwargs.get("original_route", args[0] if args else None).path)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(context, "from_api_route", classmethod(counting))
    for path in ("/v1/audit/inversion", "/v1/audit/setup", "/v1/documents", "/healthz"):
        assert client.get(path).status_code == 200, path
    assert client.post("/v1/audit/setup", json={}).status_code == 202
    assert built == []


def test_internal_job_errors_carry_no_trace(make_client, monkeypatch):
    """A job that fails inside reports a fixed message, never the exception text or a trace."""
    client = make_client()
    _setup(client)

    def boom(*args, **kwargs):
        raise RuntimeError("secret detail /home/ada/notes.txt")

    monkeypatch.setattr("companion.audit.jobs.invert_prepared", boom)
    job_id = client.post("/v1/audit/inversion", json={"text": "Sydney"}).json()["id"]
    assert _wait(lambda: _status(client, job_id) == "error")
    body = json.dumps(client.get(f"/v1/audit/inversion/{job_id}").json())
    assert "internal_error" in body
    assert "secret detail" not in body and "Traceback" not in body and "trace" not in body


def test_first_sigterm_stops_the_server_and_its_jobs(tmp_path):
    """`veil serve`'s runner exits on the first SIGTERM while a job runs and a stream is open."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "VEIL_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.companion.hardening_server", str(port), str(tmp_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        import httpx

        if not _wait(lambda: (tmp_path / "ready").exists(), 120):
            pytest.fail("the server did not start: " + server.communicate(timeout=5)[0])
        token = (tmp_path / "token").read_text().strip()
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {token}"}
        job = httpx.post(f"{base}/v1/audit/inversion", json=LONG_GRADIENT, headers=headers)
        assert job.status_code == 202, job.text
        events: list[str] = []

        def follow():
            url = f"{base}/v1/audit/inversion/{job.json()['id']}/events"
            try:
                with httpx.stream("GET", url, headers=headers, timeout=120) as stream:
                    events.extend(stream.iter_lines())
            except httpx.HTTPError:
                pass

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        assert _wait(lambda: any("started" in line for line in events))
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)  # one signal is enough: no second one is sent
        output = server.stdout.read() if server.stdout else ""
        # uvicorn re-raises the signal it caught once it has shut down cleanly
        assert code in (0, -signal.SIGTERM), output
        follower.join(30)
        assert any('"cancelled"' in line for line in events), events[-3:]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if server.stdout:
            server.stdout.close()


def test_a_client_gone_before_its_job_is_queued_creates_no_job(make_client, monkeypatch):
    """If the client disconnected while its states were prepared, no job is created."""
    from starlette.requests import Request

    client = make_client()

    async def gone(self) -> bool:
        return True

    monkeypatch.setattr(Request, "is_disconnected", gone)
    r = client.post("/v1/audit/inversion", json=LONG_GRADIENT)
    assert r.status_code == 400 and "went away" in r.json()["error"]["message"]
    assert client.jobs.jobs() == []
