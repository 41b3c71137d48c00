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


def test_bfloat16_screening_separates_the_true_token_on_smollm2(smollm2):
    """The screening threshold's premise, pinned on the real model.

    With the true prefix, the true token's bfloat16 state sits far below the
    screening threshold at every position, so screening never pushes it out of
    the search.  Some wrong tokens screen under the line too (near-synonyms like
    " April" for " March", subword continuations, near-twin states at position
    0): each costs one fp32 check and is rejected there — screening orders, fp32
    decides.  (The evaluation reports the cost: fp32 checks per token.)
    """
    from companion.audit.invert import DEFAULT_TOLERANCE, SCREEN_FRACTION

    target = smollm2
    if not target.can_screen:
        pytest.skip("no bfloat16 support on this CPU")
    ids = target.encode("Dr. Amal Haddad reviewed the MRI on 3 March in Leeds.")
    states = target.hidden_states(ids)
    prior = target.prior_logprobs(states)
    assert prior is not None
    prefix = Prefix()
    closes = 0
    duplicates = target.duplicate_groups()
    gen = torch.Generator().manual_seed(1)
    none = torch.tensor([], dtype=torch.long)
    for t, true in enumerate(ids):
        same = torch.tensor([true, *duplicates.get(true, [])])  # identical embeddings
        favourites = torch.topk(prior[t - 1], 32).indices if t else none
        favourites = favourites[~torch.isin(favourites, same)]
        randoms = torch.randint(target.vocab_size, (96,), generator=gen)
        randoms = randoms[~torch.isin(randoms, same)]
        candidates = torch.cat([torch.tensor([true]), favourites, randoms])
        mse = target.screen(prefix, candidates, states[t])
        threshold = SCREEN_FRACTION * float(states[t].pow(2).mean())
        assert float(mse[0]) < threshold / 5, f"true token at {t} screens at {float(mse[0])}"
        max_abs, _, cache = target.verify(prefix, candidates, states[t])
        assert float(max_abs[0]) <= DEFAULT_TOLERANCE
        close = [int(i) for i in torch.nonzero(mse <= threshold).flatten() if int(i) > 0]
        assert all(float(max_abs[i]) > DEFAULT_TOLERANCE for i in close), f"fp32 fooled at {t}"
        closes += len(close)
        prefix = target.extend(prefix, true, cache, 0)
    assert closes < 0.1 * len(ids) * 128  # most wrong candidates are screened out
