"""The llama.cpp backend (companion/llamacpp.py) on the bundled SmolLM2 GGUF, on each
llama.cpp build installed here (companion/llamacpp_runtime.py: llama-cpp-python compiled
for this CPU by scripts/setup.sh, and the cyllama wheel).

What the defenses rely on is pinned here: the logits are the model's (they agree with
the transformers copy of the same GGUF up to llama.cpp's activation quantization), each
row of a batch is computed alone (bit for bit what the row gives on its own, whatever the
other rows hold), a cache copy continues exactly like the original, and every registered
defense runs on it with the same receipt as on torch.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from companion import llamacpp, llamacpp_runtime, models
from companion.decoding.config import DefenseConfig
from companion.decoding.generate import GenerationConfig, generate_text
from companion.decoding.noise import SeededNoise
from companion.decoding.registry import DEFENSES, get_defense
from py_core.errors import InvalidParameterError

pytestmark = pytest.mark.skipif(not llamacpp.available(), reason="no llama.cpp build is installed")

PROMPTS = [
    "The capital of France is",
    "def add(a, b):\n    return",
    "Monday, Tuesday, Wednesday,",
    "Water boils at 100 degrees",
    "My name is Anna and I live in",
]


@pytest.fixture(scope="module")
def plain():
    return models.load_causal_lm(str(models.default_gguf_path()), device="cpu", backend="torch")


@pytest.fixture(scope="module", params=llamacpp_runtime.installed())
def both(request, plain):
    """(torch, llama.cpp) on the same GGUF, once per installed llama.cpp build."""
    before = os.environ.get("VEIL_LLAMACPP")
    os.environ["VEIL_LLAMACPP"] = request.param
    try:
        fast = models.load_causal_lm(
            str(models.default_gguf_path()), device="cpu", backend="llama.cpp"
        )
    finally:
        if before is None:
            os.environ.pop("VEIL_LLAMACPP")
        else:
            os.environ["VEIL_LLAMACPP"] = before
    assert fast.model.runtime == request.param
    return plain, fast


def test_the_build_is_chosen_by_veil_llamacpp(monkeypatch):
    have = llamacpp_runtime.installed()
    monkeypatch.delenv("VEIL_LLAMACPP", raising=False)
    assert llamacpp_runtime.chosen() == have[0]  # auto: the native build first
    for name in have:
        monkeypatch.setenv("VEIL_LLAMACPP", name)
        assert llamacpp_runtime.chosen() == name
    monkeypatch.setenv("VEIL_LLAMACPP", "vulkan")
    with pytest.raises(InvalidParameterError, match="VEIL_LLAMACPP must be"):
        llamacpp_runtime.chosen()
    for name in set(llamacpp_runtime.NAMES) - set(have):
        monkeypatch.setenv("VEIL_LLAMACPP", name)
        with pytest.raises(InvalidParameterError, match="is not installed"):
            llamacpp_runtime.chosen()


@pytest.mark.skipif(len(llamacpp_runtime.installed()) < 2, reason="needs both llama.cpp builds")
def test_both_builds_compute_the_same_model(plain):
    """The native build and the wheel give the same next-token distribution (their kernels
    differ, so not bit for bit), and each is deterministic: the same call, the same bits."""
    path = str(models.default_gguf_path())
    got = {}
    for name in llamacpp_runtime.NAMES:
        os.environ["VEIL_LLAMACPP"] = name
        try:
            lm = models.load_causal_lm(path, device="cpu", backend="llama.cpp")
        finally:
            os.environ.pop("VEIL_LLAMACPP")
        got[name] = [_last(lm, text) for text in PROMPTS]
        assert all(torch.equal(a, _last(lm, t)) for a, t in zip(got[name], PROMPTS, strict=True))
    for a, b in zip(*got.values(), strict=True):
        assert int(a.argmax()) == int(b.argmax())
        assert float(torch.corrcoef(torch.stack([a, b]))[0, 1]) > 0.999


def _last(lm, text: str) -> torch.Tensor:
    ids = lm.tokenizer(text, return_tensors="pt").input_ids
    with torch.inference_mode():
        return lm.model(input_ids=ids, use_cache=True, logits_to_keep=1).logits[0, -1].float()


def test_auto_picks_llamacpp_for_a_large_gguf_on_the_cpu(both):
    plain, fast = both
    assert plain.backend == "torch" and fast.backend == "llama.cpp"
    assert isinstance(fast.model, llamacpp.LlamaCppLM)
    assert models.pick_backend("auto", "x.gguf", "cpu") == "llama.cpp"
    big, small = models.LLAMACPP_PARAMETERS, models.LLAMACPP_PARAMETERS - 1
    assert models.pick_backend("auto", "x.gguf", "cpu", big) == "llama.cpp"
    assert models.pick_backend("auto", "x.gguf", "cpu", small) == "torch"
    assert models.pick_backend("llama.cpp", "x.gguf", "cpu", small) == "llama.cpp"
    assert models.gguf_parameters(models.default_gguf_path()) < big  # SmolLM2: torch on auto
    assert models.pick_backend("auto", None, "cpu") == "torch"  # a transformers folder
    assert models.pick_backend("auto", "x.gguf", "cuda") == "torch"
    with pytest.raises(InvalidParameterError, match="GGUF files only"):
        models.pick_backend("llama.cpp", None, "cpu")
    with pytest.raises(InvalidParameterError, match="backend must be one of"):
        models.pick_backend("vllm", "x.gguf", "cpu")
    assert fast.dtype == fast.model.weight_type == "Q4_1"
    # llama.cpp's own count of the weights (its model holds no torch tensors)
    torch_count = sum(p.numel() for p in plain.model.parameters())
    assert fast.model.n_params == pytest.approx(torch_count, rel=0.01)


def test_logits_are_the_models(both):
    plain, fast = both
    agree = 0
    for text in PROMPTS:
        a, b = _last(plain, text), _last(fast, text)
        assert a.shape == b.shape
        corr = torch.corrcoef(torch.stack([a, b]))[0, 1]
        assert corr > 0.99, (text, float(corr))
        agree += int(a.argmax() == b.argmax())
    assert agree >= len(PROMPTS) - 1


def test_rows_are_computed_alone(both):
    _, fast = both
    tok = fast.tokenizer
    rows = [tok(t).input_ids for t in PROMPTS[:3]]
    width = max(len(r) for r in rows) + 2
    ids = torch.zeros((3, width), dtype=torch.long)
    mask = torch.zeros((3, width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    batch = fast.model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
    for i, r in enumerate(rows):
        alone = fast.model(input_ids=torch.tensor([r]), use_cache=True, logits_to_keep=1)
        assert torch.equal(batch.logits[i, -1], alone.logits[0, -1])
    # Another row's content and length change nothing in row 0, also after a step.
    other = tok(PROMPTS[4] + " a much longer row than before").input_ids
    width2 = max(len(rows[0]), len(other))
    ids2 = torch.zeros((2, width2), dtype=torch.long)
    mask2 = torch.zeros((2, width2), dtype=torch.long)
    for i, r in enumerate([rows[0], other]):
        ids2[i, width2 - len(r) :] = torch.tensor(r)
        mask2[i, width2 - len(r) :] = 1
    batch2 = fast.model(input_ids=ids2, attention_mask=mask2, use_cache=True, logits_to_keep=1)
    assert torch.equal(batch2.logits[0, -1], batch.logits[0, -1])
    step = torch.full((3, 1), 13, dtype=torch.long)
    one = fast.model(
        input_ids=step,
        attention_mask=torch.cat([mask, torch.ones((3, 1), dtype=torch.long)], 1),
        cache=batch.cache,
    )
    step2 = fast.model(
        input_ids=step[:2],
        attention_mask=torch.cat([mask2, torch.ones((2, 1), dtype=torch.long)], 1),
        cache=batch2.cache,
    )
    assert torch.equal(one.logits[0, -1], step2.logits[0, -1])


def test_a_cache_copy_continues_exactly(both):
    _, fast = both
    ids = fast.tokenizer(PROMPTS[0], return_tensors="pt").input_ids
    first = fast.model(input_ids=ids, use_cache=True, logits_to_keep=1)
    twin = copy.deepcopy(first.cache)
    token = torch.tensor([[int(first.logits[0, -1].argmax())]])
    a = fast.model(input_ids=token, cache=first.cache).logits
    b = fast.model(input_ids=token, cache=twin).logits
    assert torch.equal(a, b)
    assert first.cache.get_seq_length() == ids.shape[1] + 1


def test_a_pooled_context_keeps_nothing_of_the_previous_prompt(both):
    """The chat reuses llama.cpp contexts, never their contents: after one principal's prompt
    the context goes back to the pool cleared, so the next principal's prompt is computed
    from nothing -- bit for bit as in a fresh context (no prefix reuse, hence no timing or
    logits that depend on what another principal asked)."""
    import gc

    _, fast = both
    lm = fast.model
    tok = fast.tokenizer
    a = torch.tensor([tok(PROMPTS[4]).input_ids])
    b = torch.tensor([tok(PROMPTS[4] + " Paris").input_ids])  # starts with A's whole prompt
    with lm._pool_lock:
        lm._pool.clear()
    fresh = lm(input_ids=b, use_cache=True, logits_to_keep=1)
    fresh_logits = fresh.logits.clone()
    size = fresh.cache.rows[0].size
    del fresh
    gc.collect()
    first = lm(input_ids=a, use_cache=True, logits_to_keep=1)  # principal A
    ctx = first.cache.rows[0].ctx
    del first
    gc.collect()  # A's answer is done: its context goes back to the pool, cleared
    assert any(c is ctx for free in lm._pool.values() for c in free)
    never_used = lm._rt.context(lm._model, size, lm.threads)
    assert lm._rt.get_state(ctx) == lm._rt.get_state(never_used)  # nothing of A is kept
    again = lm(input_ids=b, use_cache=True, logits_to_keep=1)  # principal B, reused context
    assert again.cache.rows[0].ctx is ctx
    assert torch.equal(again.logits, fresh_logits)


def test_a_repeated_prefix_continues_like_a_full_pass_per_row(both):
    _, fast = both
    ids = fast.tokenizer(PROMPTS[4], return_tensors="pt").input_ids
    head = fast.model(input_ids=ids[:, :4], use_cache=True, logits_to_keep=1)
    cache = head.cache
    cache.batch_repeat_interleave(3)
    assert len(cache.rows) == 3
    tails = torch.tensor([[11, 12], [13, 14], [15, 16]])
    batch = fast.model(input_ids=tails, cache=cache, use_cache=True, logits_to_keep=1)
    for i in range(3):
        full = torch.cat([ids[:, :4], tails[i : i + 1]], 1)
        alone = fast.model(input_ids=full, use_cache=True, logits_to_keep=1)
        # The copies hold the prefix's own KV: the same as computing it per row, up to the
        # chunking (one call of 6 tokens against 4 then 2).
        assert int(batch.logits[i, -1].argmax()) == int(alone.logits[0, -1].argmax())
        assert (batch.logits[i, -1] - alone.logits[0, -1]).abs().max() < 0.5


def test_a_prompt_longer_than_the_model_reads_is_a_clear_error(both):
    _, fast = both
    limit = fast.model.n_ctx_train
    with pytest.raises(InvalidParameterError, match="reads at most"):
        fast.model._size_for(limit + 5)


def _config(lm, name: str, *, seed: int) -> GenerationConfig:
    context = "Note: Dr. Quispe's phone number is 555-0142. The clinic opens at 9."
    question = "What is Dr. Quispe's phone number?"
    private = lm.tokenizer(context + "\n" + question + "\nAnswer:").input_ids
    public = lm.tokenizer(question + "\nAnswer:").input_ids
    defense = get_defense(name)
    extra = {}
    if name in ("dp_vote", "dp_answer"):
        extra = {
            "documents": (("doc-a", context), ("doc-b", "The clinic opens at 9.")),
            "prompt_for": lambda ctx: lm.tokenizer(ctx + "\n" + question + "\nAnswer:").input_ids,
        }
    return GenerationConfig(
        prompt_ids=private if defense.private_pass else public,
        public_prompt_ids=public,
        defense=DefenseConfig(name=name),
        generator=SeededNoise(seed),
        context_text=context,
        max_new_tokens=6,
        ignore_eos=True,
        **extra,
    )


@pytest.mark.parametrize("name", DEFENSES)
def test_every_defense_runs_with_the_same_receipt(both, name):
    plain, fast = both
    got = {}
    for lm in (plain, fast):
        result = generate_text(lm.model, lm.tokenizer, _config(lm, name, seed=7))
        assert result.receipt is not None
        got[lm.backend] = result
    a, b = got["torch"].receipt, got["llama.cpp"].receipt
    # What the receipt states depends on the defense and the steps, not on the backend;
    # with ignore_eos both ran the same number of steps.
    if name not in ("copy_aware", "dp_vote", "dp_answer"):  # these depend on what was chosen
        assert a == b
    else:
        assert a.mechanism == b.mechanism and a.formal == b.formal
