"""The vLLM engine's per-request work reproduces the in-process loop exactly (issue 28).

:class:`companion.vllm.rows.VeilRows` is what runs inside vLLM's sampler; here it is
driven directly, the way vLLM drives a batch-level processor (rows added, moved and
removed by batch index; ``apply`` on the batch's logits), on the tiny random model's
logits.  With the same noise key, every defense that runs on vLLM gives the in-process
loop's tokens and noise records bit for bit, at temperature 0 and above, with the
repetition penalty on -- so the receipts agree and the output distributions are the
same distribution.  No vLLM here: tests/companion/test_vllm_engine.py runs the server.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from companion.decoding.config import DefenseConfig
from companion.decoding.generate import GenerationConfig, _Pass, build_mechanism, generate_text
from companion.decoding.noise import KeyedNoise, SecureNoise
from companion.vllm.engine import EngineFailure, _Ledger
from companion.vllm.request import SINGLE_PASS, XARG, VeilRequest, tokenizer_fingerprint
from companion.vllm.rows import VeilRows
from py_core.errors import InvalidParameterError

CONTEXT = "The clinic moved to 14 Harbour Road. Call Dr. Ana Lima at 555-0142 for visits."


@pytest.fixture(scope="module")
def tiny(tiny_folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_folder, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_folder)


def _params(name: str) -> dict:
    return {
        "none": {},
        "static": {"sigma": 0.5, "clip": 10.0},
        "pad": {"sigma_base": 0.2, "tau_conf": 0.99},
        "copy_aware": {"first_tokens": 4, "max_copy_run": 1},
    }[name]


def _in_process(tiny, name, key, prompt, temperature, max_tokens):
    model, tok = tiny
    built = []

    def build(config, ctx):
        mechanism = build_mechanism(config, ctx)
        built.append(mechanism)
        return mechanism

    config = GenerationConfig(
        prompt_ids=prompt,
        defense=DefenseConfig.from_options(name, _params(name)),
        generator=KeyedNoise(key),
        context_text=CONTEXT,
        public_prompt_ids=prompt[:3],
        max_new_tokens=max_tokens,
        temperature=temperature,
        ignore_eos=True,
        repetition_penalty=1.3,
        build=build,
    )
    result = generate_text(model, tok, config)
    ledger = built[0].ledger if built and built[0] is not None else None
    return result, ledger


def _veil_request(tok, name, key, prompt, temperature, max_tokens) -> str:
    return VeilRequest(
        id=os.urandom(16).hex(),
        defense=name,
        params=DefenseConfig.from_options(name, _params(name)).to_dict()["params"],
        key=key.hex(),
        max_tokens=max_tokens,
        temperature=temperature,
        repetition_penalty=1.3,
        context_text=CONTEXT,
        public_ids=list(prompt[:3]),
        tokenizer=tokenizer_fingerprint(tok),
    ).to_json()


def _through_rows(tiny, rows, requests, max_tokens):
    """Decode several requests as one batch the way vLLM does: every step, each row's
    logits go through ``rows.apply`` and the row's argmax is its next token."""
    model, _ = tiny
    outputs: dict[int, list[int]] = {}
    passes = {}
    for index, (prompt, veil) in enumerate(requests):
        outputs[index] = []
        rows.add(index, {XARG: veil}, prompt, outputs[index])
        passes[index] = _Pass(model, list(prompt), torch.device("cpu"))
    with torch.inference_mode():
        for _ in range(max_tokens):
            logits = torch.cat([passes[i].logits for i in sorted(passes)], dim=0)
            chosen = rows.apply(logits.clone()).argmax(dim=-1).tolist()
            for index in sorted(passes):
                outputs[index].append(int(chosen[index]))  # vLLM appends to the live list
                passes[index].step(int(chosen[index]))
    return outputs


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_rows_give_the_in_process_tokens_and_records_bit_for_bit(tiny, tmp_path, temperature):
    _, tok = tiny
    rows = VeilRows(lambda: tok, ledgers=tmp_path)
    max_tokens = 12
    prompts = {name: [5 + i, 17, 23, 42, 7 + i, 99] for i, name in enumerate(SINGLE_PASS)}
    keys = {name: os.urandom(32) for name in SINGLE_PASS}
    requests = [
        (prompts[n], _veil_request(tok, n, keys[n], prompts[n], temperature, max_tokens))
        for n in SINGLE_PASS
    ]
    outputs = _through_rows(tiny, rows, requests, max_tokens)
    rows.close()
    for index, name in enumerate(SINGLE_PASS):
        expected, ledger = _in_process(
            tiny, name, keys[name], prompts[name], temperature, max_tokens
        )
        assert outputs[index] == expected.token_ids, name
        veil = json.loads(requests[index][1])
        lines = [json.loads(x) for x in (tmp_path / f"{veil['id']}.jsonl").read_text().splitlines()]
        header, records = lines[0], lines[1:]
        assert [r["token"] for r in records] == expected.token_ids
        if ledger is None:
            assert header["sensitivity"] is None and all(r["sigma"] is None for r in records)
            continue
        assert header["sensitivity"] == ledger.sensitivity
        assert [(r["step"], r["sigma"], tuple(r["reasons"])) for r in records] == [
            (r.step, r.sigma, r.reasons) for r in ledger.records
        ], name
    # the defenses did something here (else the comparison would prove little)
    assert any(r["sigma"] for r in records)


def test_a_row_that_moves_keeps_its_state_and_a_removed_row_is_gone(tiny, tmp_path):
    _, tok = tiny
    rows = VeilRows(lambda: tok, ledgers=tmp_path)
    out_a: list[int] = []
    veil = _veil_request(tok, "static", os.urandom(32), [1, 2, 3], 0.0, 4)
    rows.add(3, {XARG: veil}, [1, 2, 3], out_a)
    rows.add(5, None, [9], [])  # not a Veil request: left alone
    assert set(rows.rows) == {3}
    rows.move(3, 0, swap=False)
    assert set(rows.rows) == {0} and rows.rows[0].output is out_a
    logits = torch.randn(2, 50)
    untouched = logits[1].clone()
    out = rows.apply(logits)
    assert torch.equal(out[1], untouched)  # the other row is vLLM's business
    assert (out[0] == 0).sum() == 1 and torch.isinf(out[0]).sum() == 49
    rows.remove(0)
    assert rows.rows == {}


def test_multi_pass_defenses_are_refused_with_what_to_do_instead():
    for name in ("bounded", "dp_vote", "dp_answer"):
        with pytest.raises(InvalidParameterError, match="in-process engine"):
            VeilRequest(id="0" * 32, defense=name, params={}, key="0" * 64, max_tokens=4)
    with pytest.raises(InvalidParameterError, match="64 lowercase hex"):
        VeilRequest(id="0" * 32, defense="static", params={}, key="abc", max_tokens=4)
    with pytest.raises(InvalidParameterError, match="unknown fields"):
        VeilRequest.from_json(json.dumps({"id": "0" * 32, "nope": 1}))


def test_a_broken_request_writes_an_error_and_the_companion_stops(tiny, tmp_path):
    _, tok = tiny
    rows = VeilRows(lambda: tok, ledgers=tmp_path)
    veil = json.loads(_veil_request(tok, "copy_aware", os.urandom(32), [1, 2], 0.0, 4))
    veil["tokenizer"] = "another tokenizer"
    rows.add(0, {XARG: json.dumps(veil)}, [1, 2], [])
    rows.apply(torch.randn(1, 50))
    rows.close()
    ledger = _Ledger(tmp_path / f"{veil['id']}.jsonl")
    with pytest.raises(EngineFailure, match="tokenizer differs"):
        ledger.record(0)
    ledger.close()


def test_a_token_without_its_record_is_never_released(tmp_path, monkeypatch):
    monkeypatch.setattr("companion.vllm.engine.LEDGER_WAIT_S", 0.05)
    ledger = _Ledger(tmp_path / "missing.jsonl")
    with pytest.raises(EngineFailure, match="without a noise record"):
        ledger.record(0)


def test_keyed_noise_is_one_stream_per_key_with_the_secure_distribution():
    key = os.urandom(32)
    like = torch.zeros(1)
    a, b = KeyedNoise(key), KeyedNoise(key)
    first = a.normal((4096,), like)
    assert torch.equal(first, b.normal((4096,), like)) and a.uniform() == b.uniform()
    assert not torch.equal(KeyedNoise(os.urandom(32)).normal((4096,), like), first)
    assert not torch.equal(a.normal((4096,), like), first)  # the stream moves on
    with pytest.raises(InvalidParameterError):
        KeyedNoise(b"short")
    from scipy import stats

    keyed = KeyedNoise(os.urandom(32)).normal((20000,), like).numpy()
    secure = SecureNoise().normal((20000,), like).numpy()
    assert stats.kstest(keyed, "norm").pvalue > 1e-3
    assert stats.ks_2samp(keyed, secure).pvalue > 1e-3
    assert abs(float(np.std(keyed)) - 1.0) < 0.03


def test_veil_serve_engine_vllm_reaches_the_engine_and_the_server_command(tmp_path):
    from companion.app import make_engine
    from companion.cli import build_parser
    from companion.commands.serve import serve_settings
    from companion.vllm.engine import VllmEngine
    from companion.vllm.server import PROCESSOR, server_command, vllm_python

    args = build_parser().parse_args(
        ["serve", "--engine", "vllm", "--vllm-arg=--tensor-parallel-size", "--vllm-arg=2"]
    )
    settings = serve_settings(args).model_copy(update={"home": tmp_path})
    engine = make_engine(settings)
    assert isinstance(engine, VllmEngine)
    assert engine.server_args == ("--tensor-parallel-size", "2") and engine.url is None
    command = server_command(
        tmp_path / "python", tmp_path / "model", 9, max_seqs=4, extra=engine.server_args
    )
    assert command[command.index("--logits-processors") + 1] == PROCESSOR
    assert "--enable-prefix-caching" in command and command[-2:] == ["--tensor-parallel-size", "2"]
    with pytest.raises(InvalidParameterError, match=r"setup\.sh --vllm"):
        vllm_python(str(tmp_path / "nowhere" / "python"))
    plain = make_engine(serve_settings(build_parser().parse_args(["serve"])))
    assert not isinstance(plain, VllmEngine)
    # the defenses vLLM cannot run go to an in-process engine on the same model, or a 400
    from companion.engine import ModelEngine
    from companion.errors import APIError

    bounded, static = _plan("bounded"), _plan("static")
    assert engine.engine_for(static) is engine
    fallback = engine.engine_for(bounded)
    assert type(fallback) is ModelEngine and fallback.model_id == engine.model_id
    refusing = serve_settings(
        build_parser().parse_args(["serve", "--engine", "vllm", "--no-vllm-fallback"])
    )
    with pytest.raises(APIError, match="bounded defense does not run on the vLLM engine"):
        make_engine(refusing.model_copy(update={"home": tmp_path})).engine_for(bounded)


def _plan(defense: str):
    from types import SimpleNamespace

    return SimpleNamespace(defense=DefenseConfig.from_options(defense, None))
