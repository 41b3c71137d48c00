"""dp_vote: its accounting against dp-accounting, the per-document bound checked by sampling,
the receipt, the document charges, and a guest key whose fixed defense is dp_vote.

The sampling tests use a vote function in place of the model (a toy model: each
group's vote is given) and a seeded noise source (the test switch), so they are
fast and reproducible; a broken variant (noise far too small) must fail the same
check, which shows the check can fail.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from dp_accounting import dp_event, rdp

from companion.decoding.config import DefenseConfig
from companion.decoding.defenses import dp_vote as dv
from companion.decoding.generate import GenerationConfig, generate_text
from companion.decoding.noise import secure_generator
from companion.decoding.registry import DEFENSES, get_defense
from companion.rag.budget import planned_charge
from py_core.accounting import IndividualRdpFilter, RdpAccountant
from py_core.errors import InvalidParameterError

# The guest-key client (a real app, a tiny random model) and its helpers.
from tests.companion.test_guest_keys import _as, _ask, _new_key, client  # noqa: F401

VOCAB = 40


def _theirs(events: list, delta: float) -> float:
    acc = rdp.RdpAccountant()
    for e in events:
        acc.compose(dp_event.GaussianDpEvent(e.sigma / e.sensitivity))
    return float(acc.get_epsilon(delta))


@pytest.mark.parametrize(
    ("epsilon", "groups", "gate", "release", "max_tokens"),
    [(10.0, 16, 16, 5, 64), (5.0, 24, 16, 9, 16), (2.0, 8, 4, 2, 3), (1.0, 32, 32, 10, 256)],
)
def test_calibrated_epsilon_matches_dp_accounting(epsilon, groups, gate, release, max_tokens):
    """The answer's events compose to the configured epsilon, here and in dp-accounting."""
    cfg = dv.DpVoteConfig(epsilon=epsilon, groups=groups, gate_tokens=gate, release_tokens=release)
    events = get_defense("dp_vote").calibrated_events(cfg, max_tokens)
    cal = dv.calibrate(cfg, max_tokens)
    assert len(events) == cal.gated + cal.released
    assert cal.gated == min(gate, max_tokens) and cal.released == min(release, cal.gated)
    ours = RdpAccountant().compose_all(events).get_epsilon(cfg.delta)
    assert ours == pytest.approx(epsilon, rel=1e-6)
    assert ours <= epsilon * (1 + 1e-9)
    assert _theirs(events, cfg.delta) == pytest.approx(ours, rel=2e-3)
    # The sensitivities the proof needs: 1 for the gate's count, sqrt(2) for the histogram.
    assert {e.sensitivity for e in events} == {1.0, math.sqrt(2.0)}


@pytest.mark.parametrize("epsilon", [2.0, 10.0])
def test_the_store_level_epsilon_is_the_answer_at_twice_the_sensitivity(epsilon):
    """A top-k swap changes two groups: the receipt's store-level ε, here and in dp-accounting."""
    cfg = dv.DpVoteConfig(epsilon=epsilon)
    cal = dv.calibrate(cfg, 64)
    store = dv.store_level_epsilon(cal, cfg.delta)
    doubled = [type(e)(e.sigma, 2 * e.sensitivity) for e in cal.events()]
    assert store == pytest.approx(_theirs(doubled, cfg.delta), rel=2e-3)
    # More than the answer's ε (it covers a weaker relation), at most 4x RDP's worth.
    assert epsilon < store < 4.5 * epsilon


def test_registry_lists_dp_vote_with_its_knobs_and_guarantee():
    entry = get_defense("dp_vote")
    assert "dp_vote" in DEFENSES
    info = entry.describe()
    assert info["guarantee"]["formal"] is True
    assert "one of the retrieved documents" in info["guarantee"]["relation"]
    assert "stays deniable" in info["summary"] and "many agree on" in info["summary"]
    assert {k["name"] for k in info["knobs"]} >= {"epsilon", "groups"}
    with pytest.raises(InvalidParameterError, match="gate_share"):
        dv.DpVoteConfig(gate_share=1.0)
    with pytest.raises(InvalidParameterError, match="groups"):
        dv.DpVoteConfig(groups=1)


def _outputs(votes: list[int | None], cfg, draws: int, seed: int, *, broken: float = 1.0):
    """The distribution of one token's output for fixed group votes (public token 0)."""
    gen = secure_generator("cpu", seed=seed)
    counts: Counter[int] = Counter()
    for _ in range(draws):
        mech = dv.DpVoteMechanism(
            cfg, max_tokens=1, generator=gen, prompt_length=0, vote_fn=lambda _g: votes
        )
        if broken != 1.0:  # a wrong mechanism: noise far below its calibration
            c = mech.calibration
            mech.calibration = dv.Calibration(
                c.gated, c.released, c.gate_sigma * broken, c.vote_sigma * broken
            )
        token, _reason = mech.choose(0, VOCAB)
        counts[token] += 1
    return counts


def _worst_ratio(a: Counter[int], b: Counter[int], draws: int, floor: int) -> float:
    """The largest P_a(x) / P_b(x) over outputs seen at least ``floor`` times in ``a``."""
    worst = 1.0
    for token, k in a.items():
        if k < floor:
            continue
        worst = max(worst, (k / draws) / max(b.get(token, 0), 0.5) * draws)
    return worst


def test_one_documents_presence_changes_output_probabilities_by_at_most_e_epsilon():
    """Neighbouring vote vectors (one group's document added): output odds within e^epsilon.

    One token with a single gate query and a single release is the whole answer
    (gate_tokens = release_tokens = 1), so its epsilon is the calibrated one.  The
    votes sit where the gate and the vote are undecided, the case where a missing
    noise shows most; the same check fails for a variant with a tenth of the noise.
    """
    cfg = dv.DpVoteConfig(
        epsilon=2.0, groups=20, gate_tokens=1, release_tokens=1, release_z=0.0, threshold=0.3
    )
    with_doc: list[int | None] = [3] * 7 + [0] * 2 + [None] * 11
    without: list[int | None] = [3] * 6 + [0] * 2 + [None] * 12  # one group lost its document
    draws = 6000
    a, b = _outputs(with_doc, cfg, draws, 1), _outputs(without, cfg, draws, 2)
    bound = math.exp(cfg.epsilon)
    # Tolerance: outputs seen >= 300 times have a relative error of ~6% (1 sd); allow 35%.
    assert max(_worst_ratio(a, b, draws, 300), _worst_ratio(b, a, draws, 300)) <= bound * 1.35
    assert {0, 3} <= set(a) and {0, 3} <= set(b)  # both outcomes are really in play
    broken_a = _outputs(with_doc, cfg, draws, 3, broken=0.1)
    broken_b = _outputs(without, cfg, draws, 4, broken=0.1)
    worst = max(
        _worst_ratio(broken_a, broken_b, draws, 300), _worst_ratio(broken_b, broken_a, draws, 300)
    )
    assert worst > bound * 1.35  # the check catches a mechanism without enough noise


def test_agreement_is_free_of_vote_releases_and_a_spent_budget_falls_back_to_public():
    cfg = dv.DpVoteConfig(epsilon=10.0, groups=16, gate_tokens=3, release_tokens=1)
    gen = secure_generator("cpu", seed=5)
    agree = dv.DpVoteMechanism(
        cfg, max_tokens=8, generator=gen, prompt_length=0, vote_fn=lambda _g: [None] * 16
    )
    assert agree.choose(7, VOCAB) == (7, dv.AGREED)
    assert agree.votes_ledger.released == 0 and agree.votes_ledger.gated == 1
    strong = dv.DpVoteMechanism(
        cfg, max_tokens=8, generator=gen, prompt_length=0, vote_fn=lambda _g: [5] * 16
    )
    assert strong.choose(7, VOCAB) == (5, dv.RELEASED)
    assert strong.choose(7, VOCAB) == (7, dv.RELEASE_SPENT)  # its one release is used
    assert strong.choose(7, VOCAB) == (7, dv.RELEASE_SPENT)
    assert strong.choose(7, VOCAB) == (7, dv.GATE_SPENT)  # three gate queries allowed
    assert strong.votes_ledger.events() == strong.calibration.events(3, 1)


def test_groups_are_disjoint_fixed_per_document_and_chunks_stay_together():
    docs = [(f"doc-{i}", f"text {i}") for i in range(50)] + [("doc-3", "second chunk")]
    groups = dv.assign_groups(docs, 8)
    seen = [key for g in groups for key, _t in g]
    assert sorted(set(seen)) == sorted({k for k, _t in docs})
    assert sum(1 for g in groups if any(k == "doc-3" for k, _t in g)) == 1
    # A document's group does not depend on the other documents.
    alone = dv.assign_groups([("doc-7", "x")], 8)
    assert [i for i, g in enumerate(alone) if g] == [dv.group_of("doc-7", 8)]
    assert [i for i, g in enumerate(groups) if any(k == "doc-7" for k, _t in g)] == [
        dv.group_of("doc-7", 8)
    ]


def _tiny():
    """A tiny random Llama (vocab 64): fast, and enough for the batched group passes."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


class _Tok:
    """One token per character (ids 3..); enough for the group prompts."""

    pad_token_id = 0
    eos_token_id = 1

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [3 + (ord(c) % 60) for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(97 + (int(i) % 26)) for i in ids)


def test_receipt_fields_and_document_charges_on_a_tiny_model():
    """A real generation: receipt, report, and charges for the documents of used groups only."""
    model = _tiny()
    tok = _Tok()
    docs = [("note-1", "alpha beta"), ("note-2", "gamma"), ("note-3", "delta epsilon")]

    def prompt_for(context: str) -> list[int]:
        return [5, 6, 7, *tok.encode(context), 8, 9]

    cfg = DefenseConfig.from_options(
        "dp_vote", {"epsilon": 4.0, "groups": 4, "group_tokens": 16, "release_tokens": 2}
    )
    public = prompt_for("")
    res = generate_text(
        model,
        tok,
        GenerationConfig(
            prompt_ids=public,
            defense=cfg,
            generator=secure_generator("cpu", seed=9),
            public_prompt_ids=public,
            max_new_tokens=6,
            ignore_eos=True,
            documents=docs,
            prompt_for=prompt_for,
        ),
    )
    assert res.receipt is not None
    receipt = res.receipt.to_dict()
    assert receipt["mechanism"] == "dp_vote" and receipt["formal"] is True
    assert receipt["epsilon"] == pytest.approx(4.0, rel=1e-6) and receipt["delta"] == 1e-6
    assert receipt["total_tokens"] == 6 == len(res.token_ids)
    assert receipt["epsilon_spent"] <= receipt["epsilon"] + 1e-9
    details = res.details
    assert details["gate_queries"] == 6 and details["released_tokens"] <= 2
    # Every token is one of: released by a vote (some of them too weak: the public token),
    # agreed with the public model, or the public model's once a budget was spent.
    assert details["weak_vote_tokens"] <= details["released_tokens"]
    assert (
        details["released_tokens"] + details["agreed_tokens"] + details["public_fallback_tokens"]
        == 6
    )
    assert sum(receipt["screened"].values()) == 6
    used = {d["group"] for d in details["documents"]}
    assert details["groups_used"] == len(used)
    assert sorted(d["document"] for d in details["documents"]) == ["note-1", "note-2", "note-3"]
    flt = IndividualRdpFilter(10.0, 1e-6)
    mech = dv.DpVoteMechanism(
        cfg.params, max_tokens=6, generator=secure_generator("cpu", seed=1), prompt_length=0,
        documents=docs, vote_fn=lambda _g: [None] * 4,
    )  # fmt: skip
    charged = mech.report(flt)["documents"]
    assert len(charged) == 3  # only documents are charged; the empty groups charge nobody
    assert all(d["charge_rdp"] == pytest.approx(flt.charge_of(mech.calibration.events()))
               for d in charged)  # fmt: skip
    # The companion's lifetime budget charges dp_vote's calibrated events for store-level
    # add/remove: one document can change two groups, so each release has twice its
    # sensitivity and the Gaussian RDP four times its per-retrieved-document value.
    per_document = flt.charge_of(mech.calibration.events())
    assert planned_charge(cfg, 6, flt) == pytest.approx(4 * per_document)
    assert planned_charge(cfg, 6, flt) == pytest.approx(
        flt.charge_of(dv.store_events(mech.calibration))
    )


def test_dp_vote_without_its_inputs_says_what_is_missing():
    model = _tiny()
    with pytest.raises(InvalidParameterError, match="prompt_for"):
        generate_text(
            model,
            _Tok(),
            GenerationConfig(
                prompt_ids=[5, 6],
                defense=DefenseConfig.from_options("dp_vote"),
                generator=secure_generator("cpu", seed=1),
                public_prompt_ids=[5, 6],
                max_new_tokens=2,
            ),
        )


def test_a_guest_key_with_dp_vote_as_its_fixed_defense(client):  # noqa: F811
    """The key fixes dp_vote and its epsilon; the guest's answer carries its receipt."""
    raw = _new_key(client, defense="dp_vote", defense_params={"epsilon": 6, "groups": 4})
    response = client.post("/v1/chat/completions", json=_ask(max_tokens=3), headers=_as(raw))
    assert response.status_code == 200, response.text
    veil_info = response.json()["veil"]
    receipt = veil_info["receipt"]
    assert receipt["mechanism"] == "dp_vote" and receipt["formal"] is True
    assert receipt["params"]["epsilon"] == 6.0 and receipt["params"]["groups"] == 4
    assert receipt["epsilon"] == pytest.approx(6.0, rel=1e-6)
    assert veil_info["budget"]["covered"] is True  # the document budget charged it
    votes = receipt["votes"]  # what the vote did, in counts; never which documents
    assert votes["released_tokens_allowed"] == 3 and "documents" not in votes  # min(5, 3 tokens)
    assert (
        votes["released_tokens"] + votes["agreed_tokens"] + votes["public_fallback_tokens"]
        == (receipt["total_tokens"])
    )
    other = client.post(
        "/v1/chat/completions", json=_ask(max_tokens=3, defense="bounded"), headers=_as(raw)
    )
    assert other.status_code == 403, other.text
