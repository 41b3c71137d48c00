"""The bounded defense's guarantee holds in every precision: the public pass sees no private data.

``bounded`` is (eps, delta)-DP with respect to the retrieved context only if its
public logits are a function of the public prompt alone.  These tests check
that bit for bit (float32 and bfloat16, and CUDA where present) through the
real generation loop, and check the first token's output distribution for two
neighbouring contexts against e^eps * P + delta.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from companion.decoding.base import BuildContext
from companion.decoding.config import DefenseConfig
from companion.decoding.defenses.bounded import BoundedConfig, BoundedFusion
from companion.decoding.generate import Generation, GenerationConfig, build_mechanism
from companion.decoding.noise import secure_generator

CONTEXTS = [
    "",
    "Alice Smith, born 1984.",
    "Patients were given 5 mg of the drug twice a day. " * 3,
    "The prime minister said on Tuesday that the bushfires near Sydney had forced "
    "hundreds of people from their homes. " * 6,
]
QUESTION = "What did the prime minister say?"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from companion.audit.tiny import make_tiny_model

    folder = make_tiny_model(Path(tmp_path_factory.mktemp("tiny")) / "llama")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(folder)


def _devices() -> list[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def _prompts(tokenizer: Any, context: str) -> tuple[list[int], list[int]]:
    public = tokenizer(QUESTION)["input_ids"]
    private = tokenizer(context + " " + QUESTION)["input_ids"] if context else list(public)
    return private, public


def _public_logits_seen(model: Any, tokenizer: Any, context: str, steps: int) -> list[Any]:
    """Every public-logit tensor the bounded mechanism was given while answering."""
    seen: list[torch.Tensor] = []

    def build(config: DefenseConfig, ctx: BuildContext) -> Any:
        inner = build_mechanism(config, ctx)

        class Recording:
            ledger = inner.ledger  # type: ignore[union-attr]

            def step(self, ids: Any, scores: Any, public: Any) -> Any:
                seen.append(public.clone())
                return inner.step(ids, scores, public)  # type: ignore[union-attr]

        return Recording()

    private, public = _prompts(tokenizer, context)
    device = str(next(model.parameters()).device)
    stream = Generation(
        model,
        tokenizer,
        GenerationConfig(
            prompt_ids=private,
            defense=DefenseConfig("bounded", BoundedConfig(epsilon=8.0, top_k=5)),
            generator=secure_generator(device, seed=3),
            context_text=context,
            public_prompt_ids=public,
            max_new_tokens=steps,
            ignore_eos=True,
            build=build,
        ),
    )
    for _ in stream:
        pass
    return seen


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_public_logits_are_bit_identical_whatever_the_context(tiny, dtype, device):
    """The first public logits are identical for contexts of several lengths and contents."""
    model, tokenizer = tiny
    model = model.to(device=device, dtype=dtype)
    try:
        first = [_public_logits_seen(model, tokenizer, c, 1)[0] for c in CONTEXTS]
    finally:
        model.to(device="cpu", dtype=torch.float32)
    for other in first[1:]:
        assert torch.equal(first[0], other), (first[0] - other).abs().max()


def _public_runs(model: Any, tokenizer: Any) -> list[list[torch.Tensor]]:
    from companion.decoding.generate import _TwoPasses

    runs = []
    for context in CONTEXTS:
        private, public = _prompts(tokenizer, context)
        with torch.inference_mode():
            passes = _TwoPasses(model, private, public, "cpu")
            row = [passes.public_logits.clone()]
            for token in (5, 17, 42, 9):
                passes.step(token)
                row.append(passes.public_logits.clone())
        runs.append(row)
    return runs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_public_logits_stay_identical_along_the_same_answer(tiny, dtype):
    """Fed the same answer tokens, the public pass gives identical logits at every step."""
    model, tokenizer = tiny
    model = model.to(dtype=dtype)
    try:
        runs = _public_runs(model, tokenizer)
    finally:
        model.to(dtype=torch.float32)
    for run in runs[1:]:
        for a, b in zip(runs[0], run, strict=True):
            assert torch.equal(a, b)


@pytest.fixture(scope="module")
def gguf() -> Any:
    """The bundled GGUF on the llama.cpp backend (the chat default on a CPU)."""
    from companion import llamacpp, models

    if not llamacpp.available():
        pytest.skip("cyllama is not installed")
    lm = models.load_causal_lm(str(models.default_gguf_path()), device="cpu", backend="llama.cpp")
    return lm.model, lm.tokenizer


def test_public_logits_are_bit_identical_on_llamacpp(gguf):
    """The same on llama.cpp, through the loop: pooled contexts reused by private passes of
    other lengths give the public pass exactly the same logits, at every step."""
    model, tokenizer = gguf
    first = [_public_logits_seen(model, tokenizer, c, 1)[0] for c in CONTEXTS]
    for other in first[1:]:
        assert torch.equal(first[0], other), (first[0] - other).abs().max()
    runs = _public_runs(model, tokenizer)
    for run in runs[1:]:
        for a, b in zip(runs[0], run, strict=True):
            assert torch.equal(a, b)
    # The check can fail: the private pass, which reads the context, does differ.
    assert not torch.equal(
        _private_first(model, tokenizer, CONTEXTS[0]), _private_first(model, tokenizer, CONTEXTS[3])
    )


def _private_first(model: Any, tokenizer: Any, context: str) -> torch.Tensor:
    from companion.decoding.generate import _TwoPasses

    private, public = _prompts(tokenizer, context)
    with torch.inference_mode():
        return _TwoPasses(model, private, public, "cpu").private_logits.clone()


def _first_token_distribution(
    private: torch.Tensor, public: torch.Tensor, config: BoundedConfig, n: int, seed: int
) -> dict[int, float]:
    """Empirical first-token distribution of the bounded mechanism calibrated for one token."""
    fusion = BoundedFusion(config, max_tokens=1, generator=secure_generator("cpu", seed=seed))
    counts: dict[int, int] = {}
    for _ in range(n):
        token = int(torch.argmax(fusion(private, public)[0]))
        counts[token] = counts.get(token, 0) + 1
    return {t: c / n for t, c in counts.items()}


def _violations(p: dict[int, float], q: dict[int, float], eps: float, delta: float, n: int) -> int:
    """Tokens where P(t) > e^eps Q(t) + delta by more than 4 standard errors of the estimates."""
    bad = 0
    for token in set(p) | set(q):
        pt, qt = p.get(token, 0.0), q.get(token, 0.0)
        se = math.sqrt(max(pt * (1 - pt), 1 / n) / n) + math.exp(eps) * math.sqrt(
            max(qt * (1 - qt), 1 / n) / n
        )
        if pt > math.exp(eps) * qt + delta + 4 * se:
            bad += 1
    return bad


def test_first_token_distribution_of_neighbouring_contexts_respects_epsilon(tiny):
    """P_ctx1(t) <= e^eps P_ctx2(t) + delta for every first token; a weakened mechanism fails."""
    model, tokenizer = tiny
    eps, n = 1.0, 3000
    logits = {}
    for context in (CONTEXTS[1], CONTEXTS[3]):
        private, public = _prompts(tokenizer, context)
        with torch.inference_mode():
            from companion.decoding.generate import _TwoPasses

            passes = _TwoPasses(model, private, public, "cpu")
            logits[context] = (passes.private_logits.clone(), passes.public_logits.clone())
    (priv_a, pub_a), (priv_b, pub_b) = logits.values()
    assert torch.equal(pub_a, pub_b)
    # Make the contexts disagree strongly, so the check has power: scale the private shift.
    priv_a = pub_a + 25.0 * (priv_a - pub_a)
    priv_b = pub_b - 25.0 * (priv_b - pub_b)
    config = BoundedConfig(epsilon=eps, clip=4.0, top_k=8, delta=1e-6)
    p = _first_token_distribution(priv_a, pub_a, config, n, seed=1)
    q = _first_token_distribution(priv_b, pub_b, config, n, seed=2)
    assert _violations(p, q, eps, 1e-6, n) == 0 and _violations(q, p, eps, 1e-6, n) == 0
    # The check can fail: the same mechanism with 20x less noise than calibrated breaks eps = 1.
    weak = BoundedFusion(config, max_tokens=1, generator=secure_generator("cpu", seed=4))
    weak.sigma /= 20.0
    weak_p: dict[int, int] = {}
    weak_q: dict[int, int] = {}
    for counts, priv in ((weak_p, priv_a), (weak_q, priv_b)):
        for _ in range(n):
            token = int(torch.argmax(weak(priv, pub_a)[0]))
            counts[token] = counts.get(token, 0) + 1
    wp = {t: c / n for t, c in weak_p.items()}
    wq = {t: c / n for t, c in weak_q.items()}
    assert _violations(wp, wq, eps, 1e-6, n) + _violations(wq, wp, eps, 1e-6, n) > 0
