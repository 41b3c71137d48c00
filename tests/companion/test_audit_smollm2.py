"""The auditor's proof step on the real SmolLM2-135M (slow: loads the model, ~30 s on CPU)."""

from __future__ import annotations

import pytest
import torch

from companion.audit.hidden import Prefix, TargetModel
from companion.audit.invert import GradientConfig, invert_gradient

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M-Instruct from its wheel, on CPU with one thread."""
    from companion.models import load_causal_lm

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield TargetModel(load_causal_lm(device="cpu"))
    torch.set_num_threads(before)


def test_forward_pass_proves_the_true_token_by_orders_of_magnitude(smollm2):
    """With the true prefix cached, the true token reproduces H_t; the model's favourites do not."""
    target = smollm2
    ids = target.encode("The patient, Maria Lopez, was seen on Tuesday.")
    states = target.hidden_states(ids)
    prior = target.prior_logprobs(states)
    assert prior is not None
    prefix = Prefix()
    gen = torch.Generator().manual_seed(0)
    for t, true in enumerate(ids):
        if t == 0:
            others = torch.randint(target.vocab_size, (63,), generator=gen)
        else:
            others = torch.topk(prior[t - 1], 64).indices
        others = others[others != true][:63]
        candidates = torch.cat([torch.tensor([true]), others])
        max_abs, mse, cache = target.verify(prefix, candidates, states[t])
        assert float(max_abs[0]) <= 1e-3, f"true token at {t} off by {float(max_abs[0])}"
        assert float(mse[0]) < 1e-8
        assert float(max_abs[1:].min()) > 100 * float(max_abs[0])
        assert float(mse[1:].min()) > 1e4 * float(mse[0])
        prefix = target.extend(prefix, true, cache, 0)


def test_published_method_diagnostics_are_consistent_on_smollm2(smollm2):
    """A short Adam run (K=20, C=128): a committed token is proven exactly when it is right."""
    target = smollm2
    ids = target.encode("Sydney bushfires")[:2]
    config = GradientConfig(steps=20, candidates=128, learning_rate=0.01, trace_every=10, seed=0)
    result = invert_gradient(target, target.hidden_states(ids), config, true_token_ids=ids)
    for p in result.positions:
        assert (p.status == "proven") == (p.token_id == p.true_token_id)
        assert (p.discrete_loss < 1e-8) == (p.status == "proven")
        assert [s for s, _ in p.true_rank_trace] == [0, 10, 20]
