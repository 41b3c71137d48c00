"""dp_answer: its epsilon pinned from both sides, the threshold's delta, an empirical
neighbour check on a toy selection (and a variant with less noise caught), the Poisson
subsampled event against dp-accounting, the proposals' keys and the mechanism's output."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from companion.decoding.config import DefenseConfig
from companion.decoding.defenses import dp_answer as da
from companion.decoding.noise import SeededNoise
from py_core.accounting import (
    GaussianEvent,
    IndividualRdpFilter,
    RdpAccountant,
    SampledGaussianEvent,
)

dpa = pytest.importorskip("dp_accounting")


@pytest.mark.parametrize("epsilon", [1.0, 2.0, 5.0, 10.0])
def test_store_level_epsilon_is_the_configured_one_and_dp_accountings(epsilon: float) -> None:
    config = da.DpAnswerConfig(epsilon=epsilon)
    entry = DefenseConfig("dp_answer", config).defense
    events = entry.store_events(config, 64)
    assert len(events) == 1 and isinstance(events[0], GaussianEvent)
    ours = RdpAccountant().compose_all(events).get_epsilon(config.delta)
    assert ours == pytest.approx(epsilon, rel=1e-6)
    (event,) = events
    acc = dpa.rdp.RdpAccountant()
    acc.compose(dpa.GaussianDpEvent(event.sigma / event.sensitivity))
    assert acc.get_epsilon(config.delta) == pytest.approx(epsilon, rel=2e-3)
    # from the other side: a little less noise is over the configured epsilon
    less = GaussianEvent(event.sigma * 0.97, event.sensitivity)
    assert RdpAccountant().compose_all([less]).get_epsilon(config.delta) > epsilon
    # the receipt's relation (one retrieved document: one group) is a quarter of the RDP
    (one,) = entry.calibrated_events(config, 64)
    assert one.rdp(3.0) == pytest.approx(events[0].rdp(3.0) / 4)


@pytest.mark.parametrize("epsilon", [2.0, 5.0, 10.0])
def test_the_receipt_and_a_keys_charge_are_the_store_level_epsilon(epsilon: float) -> None:
    """The receipt states "one document of the store": its epsilon (and what a guest key
    pays, companion.answer.guest) is that relation's -- the configured one -- not the
    one-group figure, which states less loss than the relation allows."""
    config = da.DpAnswerConfig(epsilon=epsilon)
    entry = DefenseConfig("dp_answer", config).defense
    assert entry.guarantee.relation == da.ADD_REMOVE_STORE_DOCUMENT
    shown = entry.calibrated_epsilon(config, 64)
    assert shown == pytest.approx(epsilon, rel=1e-6)
    (one,) = entry.calibrated_events(config, 64)
    one_group = RdpAccountant().compose_all([one]).get_epsilon(config.delta)
    assert one_group < 0.6 * shown  # what the receipt showed before (2.32 at epsilon 5)
    # dp_vote states one retrieved document: its receipt keeps that relation's epsilon
    vote = DefenseConfig.from_options("dp_vote", {"epsilon": 4.0})
    assert vote.defense.calibrated_epsilon(vote.params, 8) == pytest.approx(4.0, rel=1e-6)


def test_threshold_delta_holds_with_equality() -> None:
    config = da.DpAnswerConfig(epsilon=5.0, threshold_delta=1e-8)
    cal = da.calibrate(config)
    tail = 0.5 * math.erfc((cal.tau - 2.0) / cal.sigma / math.sqrt(2))
    assert 4 * tail == pytest.approx(1e-8, rel=1e-6)
    lower = cal.tau - 0.05 * cal.sigma
    assert 4 * 0.5 * math.erfc((lower - 2.0) / cal.sigma / math.sqrt(2)) > 1e-8


def test_vote_settings_put_the_threshold_within_the_groups() -> None:
    for eps in (2.0, 3.0, 5.0, 8.0, 10.0):
        groups, top_k = da.vote_settings(eps)
        cal = da.calibrate(da.DpAnswerConfig(epsilon=eps))
        assert cal.groups == groups and cal.top_k == top_k
        assert cal.tau <= da.THRESHOLD_SHARE * groups + 1e-9
        assert top_k >= groups
    # smaller epsilon needs more groups
    assert da.vote_settings(2.0)[0] > da.vote_settings(5.0)[0] > da.vote_settings(10.0)[0]


def _frequencies(counts: dict[str, int], sigma: float, tau: float, n: int, seed: int) -> Counter:
    gen = SeededNoise(seed)
    proposals = [k for k, c in counts.items() for _ in range(c)]
    out: Counter = Counter()
    for _ in range(n):
        released, _facts = da.select(proposals, sigma, tau, gen)
        out[released] += 1
    return out


def _worst_violation(p: Counter, q: Counter, n: int, eps: float, delta: float) -> float:
    """max over output sets S of P(S) - e^eps Q(S) - delta (sets of single outputs and unions)."""
    outputs = sorted(set(p) | set(q), key=str)
    worst = -1.0
    for mask in range(1, 1 << len(outputs)):
        s = [o for i, o in enumerate(outputs) if mask >> i & 1]
        ps = sum(p[o] for o in s) / n
        qs = sum(q[o] for o in s) / n
        worst = max(worst, ps - math.exp(eps) * qs - delta)
    return worst


def test_one_document_moves_the_output_by_at_most_e_eps_plus_delta_and_less_noise_is_caught() -> (
    None
):
    # A toy store: key "a" proposed by groups near the threshold; the neighbour (one document
    # added) changes two groups from "a" to "b", an answer no other group gives.
    eps, tdelta = 1.0, 0.05
    sigma = da.selection_sigma(eps, 1e-6)
    tau = da.selection_threshold(sigma, tdelta)
    c = round(tau) + 1
    d, d2 = {"a": c, "x": 3}, {"a": c - 2, "b": 2, "x": 3}
    n = 8000
    p, q = _frequencies(d, sigma, tau, n, 1), _frequencies(d2, sigma, tau, n, 2)
    slack = 4.0 * math.sqrt(0.25 / n) * (1 + math.exp(eps))  # Monte Carlo error, 4 sigmas
    for a, b in ((p, q), (q, p)):
        assert _worst_violation(a, b, n, eps, 1e-6 + tdelta) <= slack
    weak = sigma / 10  # a tenth of the noise (same threshold rule): not eps-DP
    wtau = da.selection_threshold(weak, tdelta)
    c = round(wtau) + 1
    d, d2 = {"a": c, "x": 3}, {"a": c - 2, "b": 2, "x": 3}
    p, q = _frequencies(d, weak, wtau, n, 3), _frequencies(d2, weak, wtau, n, 4)
    caught = max(
        _worst_violation(p, q, n, eps, 1e-6 + tdelta), _worst_violation(q, p, n, eps, 1e-6 + tdelta)
    )
    assert caught > slack


def test_an_answer_only_the_changed_groups_give_rarely_passes() -> None:
    sigma = da.selection_sigma(5.0, 1e-6)
    tau = da.selection_threshold(sigma, 1e-8)
    out = _frequencies({"secret": 2}, sigma, tau, 5000, 7)
    assert out["secret"] == 0 and out[None] == 5000


def test_sampled_gaussian_matches_dp_accounting() -> None:
    for q in (0.05, 0.3, 0.8):
        for mult in (0.8, 2.0, 5.0):
            e = SampledGaussianEvent(mult * 2.0, 2.0, q)
            orders = [2.0, 3.0, 4.0, 6.0, 3.8]
            acc = dpa.rdp.RdpAccountant(orders)
            acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(mult)))
            theirs = list(acc._rdp)
            for a, t in zip(orders, theirs, strict=True):
                if a == int(a):
                    assert e.rdp(a) == pytest.approx(t, rel=1e-9, abs=1e-12)
                else:  # fractional: the next integer's value, an upper bound
                    assert e.rdp(a) >= t - 1e-12
    # amplification: a sampled release costs less than the full one
    assert SampledGaussianEvent(4.0, 2.0, 0.3).rdp(4) < GaussianEvent(4.0, 2.0).rdp(4)


def test_planned_charge_adds_a_surcharge_that_covers_the_threshold_deltas() -> None:
    from companion.rag.budget import planned_charge

    flt = IndividualRdpFilter(10.0, 1e-6)
    config = DefenseConfig("dp_answer", da.DpAnswerConfig(epsilon=2.0, threshold_delta=1e-8))
    gaussian = flt.charge_of(config.defense.store_events(config.params, 16))
    charge = planned_charge(config, 16, flt)
    assert charge is not None and charge > gaussian
    extra = charge - gaussian
    most = int(flt.budget // charge)
    assert most >= 1
    for n in range(1, most + 1):  # n answers' surcharges pay for n threshold deltas
        need = -math.log1p(-n * 1e-8 / 1e-6) / (flt.order - 1)
        assert n * extra >= need - 1e-15
    # more answers than the threshold deltas allow (17 at 1e-7 each > delta 1e-6): the
    # charge is raised so that at most 9 fit, and their deltas stay under delta
    big = DefenseConfig("dp_answer", da.DpAnswerConfig(epsilon=2.0, threshold_delta=1e-7))
    raised = planned_charge(big, 16, flt)
    assert raised is not None and math.isfinite(raised)
    fits = int(flt.budget // raised)
    assert 1 <= fits <= 9 and fits * 1e-7 < 1e-6
    need = -math.log1p(-fits * 1e-7 / 1e-6) / (flt.order - 1)
    assert fits * (raised - flt.charge_of(big.defense.store_events(big.params, 16))) >= need
    # Poisson subsampling's small charge at epsilon 2: finite, at most 99 answers (was inf)
    sampled = DefenseConfig("dp_answer", da.DpAnswerConfig(epsilon=2.0, sample_rate=0.25))
    small = planned_charge(sampled, 16, flt)
    assert small is not None and math.isfinite(small) and int(flt.budget // small) <= 99
    # a threshold delta as large as delta: not one answer fits (fail closed)
    huge = DefenseConfig("dp_answer", da.DpAnswerConfig(epsilon=2.0, threshold_delta=1e-6))
    assert planned_charge(huge, 16, flt) == math.inf


def test_keys_merge_phrasings_and_drop_the_question() -> None:
    q = "Which drug does the clinic give for Veltrosis? Reply with the drug name only."
    keys = {da.normalise(t, q) for t in ("The drug is Zolvexin.", "Zolvexin 25 mg", "zolvexin")}
    assert keys == {"zolvexin"}
    assert da.normalise("The drug for Veltrosis is", q) == ""
    assert da.normalise("Error code W-58.", "Which code does the pump show?") == "error w-58"


class _Tok:
    eos_token_id = 0
    pad_token_id = 0

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(ch) for ch in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if i)


def _mechanism(proposals: list[str | None], epsilon: float = 10.0) -> da.DpAnswerMechanism:
    docs = [(f"d{i}", f"text {i}") for i in range(40)]
    return da.DpAnswerMechanism(
        da.DpAnswerConfig(epsilon=epsilon, groups=len(proposals)),
        generator=SeededNoise(5),
        tokenizer=_Tok(),
        documents=docs,
        propose=lambda assignment: [
            p if members else None for p, members in zip(proposals, assignment, strict=True)
        ],
    )


def test_the_released_answer_is_emitted_then_the_answer_ends() -> None:
    m = _mechanism(["Quorvane"] * 30)
    public = torch.zeros((1, 200))
    ids = torch.zeros((1, 3), dtype=torch.long)
    out = []
    for _ in range(10):
        scores = m.step(ids, public, public)
        out.append(int(torch.argmax(scores[0])))
        if out[-1] == 0:
            break
    assert "".join(chr(t) for t in out if t) == "Quorvane"  # the key, as displayed
    assert m.report()["released"] is True
    assert m.ledger.records[0].reasons == (da.RELEASED,)


@pytest.mark.parametrize(
    ("key", "shown"),
    [("fenorvane", "Fenorvane"), ("h-36", "H-36"), ("posovir 20 mg", "Posovir 20 mg"), ("", "")],
)
def test_a_released_key_is_shown_capitalised_and_its_codes_in_upper_case(key, shown) -> None:
    assert da.displayed(key) == shown


def test_without_support_the_public_model_answers() -> None:
    m = _mechanism(["alpha", "beta", "gamma", None] * 6)
    public = torch.randn((1, 200))
    scores = m.step(torch.zeros((1, 3), dtype=torch.long), public, public)
    assert torch.equal(scores, public)
    assert m.report()["released"] is False


def test_the_plan_reads_the_defenses_context_size() -> None:
    from companion.answer.plan import _top_k

    body = SimpleNamespace(retrieval_top_k=None)
    settings = SimpleNamespace(retrieval_top_k=3)
    config = DefenseConfig("dp_answer", da.DpAnswerConfig(epsilon=5.0))
    assert _top_k(settings, body, config) == da.calibrate(config.params).top_k  # type: ignore[arg-type]
    assert _top_k(settings, body, DefenseConfig.from_options("dp_vote")) == 3  # type: ignore[arg-type]


def test_the_budget_in_words_for_the_owner_and_a_guest() -> None:
    from companion.rag.budget import Admission, answers_in_words, planned_charge

    assert answers_in_words(3) == "about 3 more answers on this topic"
    assert answers_in_words(1) == "1 more answer on this topic"
    assert "spent" in answers_in_words(0)
    flt = IndividualRdpFilter(10.0, 1e-6)
    config = DefenseConfig("dp_answer", da.DpAnswerConfig(epsilon=3.0))
    charge = planned_charge(config, 16, flt)
    assert charge is not None
    admission = Admission(
        hits=[],
        defense="dp_answer",
        formal=True,
        filter={"epsilon": 10.0, "delta": 1e-6, "order": flt.order, "budget_rdp": flt.budget},
        charge_rdp=charge,
        answer_epsilon=1.0,
    )
    # public: the budget and this answer's charge only (8 answers at epsilon 3)
    assert "about 8 answers like this one in its lifetime" in admission.note(is_guest=True)


@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5, float("nan")])
def test_a_sample_rate_outside_0_1_is_refused(rate: float) -> None:
    from py_core.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="sample_rate"):
        da.DpAnswerConfig(sample_rate=rate)


def test_poisson_coins_are_thrown_before_the_top_k_and_every_candidate_pays(tmp_path) -> None:
    """sample_rate q: each admitted document is read with probability q (its own coin,
    thrown before the top-k documents are chosen), and every admitted one is charged the
    amplified event -- kept or not; q = 1 throws no coin."""
    import random

    from companion.rag.budget import DocumentBudget, planned_charge, poisson_sample
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore
    from tests.companion.fakes import KeywordEmbedder

    rag = RagService(DocumentStore(tmp_path / "s.sqlite3"), KeywordEmbedder())
    for i in range(12):
        rag.ingest(f"gout-{i}.txt", f"gout note {i}: colchicine eases gout".encode(), "med")
    # a lifetime of epsilon 40 pays for ~80 amplified answers (29 at q = 1)
    budget = DocumentBudget(rag.store, epsilon=40.0, delta=1e-6, threshold=0.5)
    full = DefenseConfig("dp_answer", da.DpAnswerConfig(epsilon=5.0, top_k=3))
    half = DefenseConfig("dp_answer", da.DpAnswerConfig(epsilon=5.0, top_k=3, sample_rate=0.5))
    amplified = planned_charge(half, 16, budget.filter)
    plain = planned_charge(full, 16, budget.filter)
    assert amplified is not None and plain is not None and amplified < plain
    kept_counts: Counter = Counter()
    draws = random.Random(7)
    for n in range(40):
        got = budget.retrieve(
            rag,
            "gout?",
            "med",
            3,
            defense=half,
            max_tokens=16,
            is_guest=True,
            answer_id=f"a{n}",
            coin=draws.random,
        )
        assert len(got.charged) == 12  # every candidate pays, kept or not
        assert all(c.charge_rdp == pytest.approx(amplified) for c in got.charged)
        # the top 3 come from the sampled documents only, as many as there are up to 3
        assert got.sampled is not None and len({h.document_id for h in got.hits}) == min(
            3, got.sampled
        )
        kept_counts[got.sampled] += 1
    mean = sum(k * v for k, v in kept_counts.items()) / 40
    assert 4.5 < mean < 7.5  # 12 documents at q = 0.5: 6 on average
    # the coins decide: all heads keeps every document, all tails none (no context)
    assert poisson_sample([3, 1, 2], 0.5, lambda: 0.0) == [1, 2, 3]
    assert poisson_sample([3, 1, 2], 0.5, lambda: 0.99) == []
    assert poisson_sample([3, 1, 2], 1.0, lambda: 0.99) is None
    none = budget.retrieve(
        rag,
        "gout?",
        "med",
        3,
        defense=half,
        max_tokens=16,
        is_guest=True,
        answer_id="tails",
        coin=lambda: 0.99,
    )
    assert none.hits == [] and len(none.charged) == 12
    # q = 1: no coin thrown, the top 3 of all
    whole = budget.retrieve(
        rag,
        "gout?",
        "med",
        3,
        defense=full,
        max_tokens=16,
        is_guest=True,
        answer_id="full",
        coin=lambda: pytest.fail("a coin was thrown at q = 1"),
    )
    assert whole.sampled is None and len(whole.hits) == 3


def test_any_mix_of_configurations_on_one_document_stays_within_its_lifetime() -> None:
    """Keys of different epsilon, threshold_delta and sample rate charging one document:
    whatever the filter admits, the Rényi part plus the cost of every threshold delta
    converts to at most the lifetime (epsilon 10, delta 1e-6).  Rounding the number of
    answers down in the surcharge (the code before) under-paid such mixes, by up to 0.04."""
    from companion.rag.budget import planned_charge

    flt = IndividualRdpFilter(10.0, 1e-6)
    configs = []
    for eps, td, q in itertools.product(
        (1.0, 2.0, 3.0, 5.0, 8.0), (1e-9, 1e-8, 1e-7, 2e-7, 3e-7, 4.9e-7), (1.0, 0.5)
    ):
        config = DefenseConfig(
            "dp_answer", da.DpAnswerConfig(epsilon=eps, threshold_delta=td, sample_rate=q)
        )
        gaussian = flt.charge_of(config.defense.store_events(config.params, 16))
        charge = planned_charge(config, 16, flt)
        assert charge is not None
        if charge <= flt.budget:
            configs.append((td, gaussian, charge))
    worst = -math.inf
    for x, y in itertools.product(configs, repeat=2):  # k answers of x, then y to the end
        for k in range(int(flt.budget // x[2]) + 1):
            m = int((flt.budget - k * x[2]) // y[2])
            rdp = k * x[1] + m * y[1]
            deltas = k * x[0] + m * y[0]
            assert deltas < 1e-6
            total = rdp - math.log1p(-deltas / 1e-6) / (flt.order - 1)
            worst = max(worst, total - flt.budget)
    assert worst <= 1e-12
