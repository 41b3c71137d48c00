"""The decoding defenses' processor contract, their accounting and their receipts."""

from __future__ import annotations

import math

import pytest
import torch

from companion.decoding.base import (
    NoiseLedger,
    calibrate_sigma,
    clip_l2,
    receipt_epsilon,
)
from companion.decoding.config import DefenseConfig
from companion.decoding.defenses.bounded import BoundedConfig, BoundedFusion
from companion.decoding.defenses.copy_aware import CopyAwareConfig, CopyAwareProcessor
from companion.decoding.defenses.pad import PADConfig, PADProcessor
from companion.decoding.defenses.static import StaticNoiseConfig, StaticNoiseProcessor
from companion.decoding.noise import NoiseSource, SecureNoise, SeededNoise, secure_generator
from companion.decoding.receipt import build_receipt
from companion.decoding.screening import RunTracker, pii_spans
from py_core.errors import InvalidParameterError

V = 64


def _gen(seed: int = 0) -> NoiseSource:
    return secure_generator("cpu", seed=seed)


def _flat_scores() -> torch.Tensor:
    return torch.zeros(1, V) + torch.linspace(0, 0.1, V)


def _confident_scores(top: int = 5) -> torch.Tensor:
    scores = torch.zeros(1, V)
    scores[0, top] = 30.0
    return scores


def test_clip_l2_bounds_norm_and_keeps_small_vectors():
    """clip_l2 scales vectors above the bound to it and leaves smaller ones alone."""
    x = torch.tensor([[3.0, 4.0]])
    assert torch.allclose(torch.linalg.vector_norm(clip_l2(x, 1.0)), torch.tensor(1.0))
    assert torch.equal(clip_l2(x, 10.0), x)


@pytest.mark.parametrize(
    "make",
    [
        lambda: StaticNoiseProcessor(StaticNoiseConfig(), prompt_length=2, generator=_gen()),
        lambda: PADProcessor(PADConfig(), prompt_length=2, generator=_gen()),
        lambda: CopyAwareProcessor(
            CopyAwareConfig(first_tokens=1), prompt_length=2, generator=_gen()
        ),
    ],
)
def test_processors_never_modify_scores_in_place(make):
    """Every processor returns new scores and leaves its input untouched."""
    proc = make()
    scores = _flat_scores()
    before = scores.clone()
    out = proc(torch.tensor([[1, 2]]), scores)
    assert torch.equal(scores, before)
    assert out.data_ptr() != scores.data_ptr() or torch.equal(out, before)


def test_static_noise_is_clip_plus_seeded_gaussian():
    """Static noise = clipped logits + sigma * N(0, 1) drawn from the given generator."""
    cfg = StaticNoiseConfig(clip=2.0, sigma=0.3)
    scores = torch.randn(1, V, generator=torch.Generator().manual_seed(5)) * 10
    out = StaticNoiseProcessor(cfg, prompt_length=1, generator=_gen(7))(torch.tensor([[0]]), scores)
    expected_noise = _gen(7).normal((1, V), scores) * 0.3
    assert torch.allclose(out, clip_l2(scores, 2.0) + expected_noise, atol=1e-6)
    assert math.isclose(float(torch.linalg.vector_norm(clip_l2(scores, 2.0))), 2.0, rel_tol=1e-5)


def test_pad_screens_on_raw_probabilities():
    """PAD leaves confident tokens alone and noises uncertain ones, on raw probabilities."""
    proc = PADProcessor(PADConfig(clip=100.0), prompt_length=1, generator=_gen())
    confident = _confident_scores()
    out = proc(torch.tensor([[0]]), confident)
    assert torch.equal(out, confident)
    flat = _flat_scores()
    noised = proc(torch.tensor([[0, 1]]), flat)
    assert not torch.equal(noised, flat)
    sigmas = [r.sigma for r in proc.ledger.records]
    assert sigmas[0] is None and sigmas[1] is not None and sigmas[1] > 0
    assert proc.ledger.sensitivity == 200.0


def test_pad_sigma_adapts_to_margin_entropy_and_position():
    """sigma_t grows for flatter distributions and earlier positions, times lambda."""
    proc = PADProcessor(PADConfig(), prompt_length=0, generator=_gen())
    peaked = torch.zeros(1, V)
    peaked[0, 0] = 2.0
    flat = torch.zeros(1, V)
    s_flat, _ = proc.sigma_for(flat, 0)
    s_peak, _ = proc.sigma_for(peaked, 0)
    s_late, _ = proc.sigma_for(flat, 50)
    assert s_flat is not None and s_peak is not None and s_late is not None
    assert s_flat > s_peak and s_flat > s_late
    double = PADProcessor(PADConfig(lambda_amp=2.0), prompt_length=0, generator=_gen())
    assert math.isclose(double.sigma_for(flat, 0)[0] or 0.0, 2 * s_flat)


def test_processors_are_reproducible_under_a_seeded_generator():
    """The same seed gives the same output; another seed gives another one."""
    scores = _flat_scores()
    ids = torch.tensor([[0, 1]])

    def run(seed: int) -> torch.Tensor:
        return PADProcessor(PADConfig(), prompt_length=1, generator=_gen(seed))(ids, scores)

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))


def test_copy_aware_noises_only_copying_tokens_and_only_the_top_k():
    """Copy-aware PAD screens a token that extends a context run; the tail stays -inf."""
    context = [10, 11, 12, 13, 14, 15]
    cfg = CopyAwareConfig(max_copy_run=2, top_k=4, copy_budget=100)
    proc = CopyAwareProcessor(cfg, prompt_length=1, generator=_gen(), context_ids=context)
    prompt = [7]

    def scores_for(token: int) -> torch.Tensor:
        s = torch.zeros(1, V)
        s[0, token] = 20.0
        s[0, 40:44] = 5.0
        return s

    generated: list[int] = []
    outputs = []
    for tok in (10, 11, 12):
        ids = torch.tensor([prompt + generated])
        outputs.append(proc(ids, scores_for(tok)))
        generated.append(tok)
    # Tokens 10 and 11 start a run of 2 (allowed); 12 would make it 3 -> screened.
    assert torch.equal(outputs[0], scores_for(10)) and torch.equal(outputs[1], scores_for(11))
    screened = outputs[2]
    finite = torch.isfinite(screened[0])
    assert int(finite.sum()) == 4
    assert bool(finite[12]) and not bool(finite[0])
    assert [r.reasons for r in proc.ledger.records] == [(), (), ("copy",)]


def test_copy_penalty_lowers_only_candidates_that_would_copy():
    """With the same noise, copy_penalty p lowers a copying candidate by p * clip, nothing else."""
    context = [10, 11, 12, 13, 14, 15]

    def screened(penalty: float) -> torch.Tensor:
        cfg = CopyAwareConfig(max_copy_run=2, top_k=4, copy_budget=100, copy_penalty=penalty)
        proc = CopyAwareProcessor(cfg, prompt_length=1, generator=_gen(5), context_ids=context)
        s = torch.zeros(1, V)
        s[0, 12] = 20.0
        s[0, 40:43] = 5.0
        out = s
        for generated in ([], [10], [10, 11]):
            out = proc(torch.tensor([[7, *generated]]), s)
        assert proc.ledger.records[-1].reasons == ("copy",)
        return out[0]

    plain, lowered = screened(0.0), screened(0.5)
    assert lowered[12] == pytest.approx(float(plain[12]) - 0.5)
    assert torch.equal(lowered[40:43], plain[40:43])
    assert torch.equal(torch.isfinite(lowered), torch.isfinite(plain))


def test_copy_aware_ignores_runs_the_person_wrote():
    """A run that also occurs in the public prompt (the question) is not screened."""
    context = [10, 11, 12, 13]
    cfg = CopyAwareConfig(max_copy_run=1, copy_budget=100)
    proc = CopyAwareProcessor(
        cfg, prompt_length=1, generator=_gen(), context_ids=context, public_ids=[10, 11, 12]
    )
    s = torch.zeros(1, V)
    s[0, 11] = 20.0
    assert torch.equal(proc(torch.tensor([[0, 10]]), s), s)


def test_copy_aware_screens_pii_tokens():
    """A distinctive token of a PII span of the context is screened."""
    cfg = CopyAwareConfig()
    proc = CopyAwareProcessor(
        cfg, prompt_length=1, generator=_gen(), pii_ids=[30, 31, -1], pii_start_tokens={30}
    )
    s = torch.zeros(1, V)
    s[0, 30] = 20.0
    out = proc(torch.tensor([[0]]), s)
    assert proc.ledger.records[0].reasons == ("pii",)
    assert not torch.equal(out, s)


def test_run_tracker_follows_the_longest_suffix():
    """RunTracker counts consecutive tokens matching the sequence and restarts on a miss."""
    tracker = RunTracker([1, 2, 3, 1, 2, 4])
    assert tracker.extension_length(1) == 1
    for tok in (1, 2):
        tracker.advance(tok)
    assert tracker.length == 2
    assert tracker.extension_length(4) == 3 and tracker.extension_length(3) == 3
    tracker.advance(9)
    assert tracker.length == 0 and tracker.extension_length(9) == 0


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("write to maria.lopez@example.org today", "email", "maria.lopez@example.org"),
        ("call (415) 555-0187 please", "phone", "(415) 555-0187"),
        ("record MRN-1234567 shows", "id", "MRN-1234567"),
        ("born on 05/05/1960 in", "date", "05/05/1960"),
        ("my name is Maria Lopez and", "name", "Maria Lopez"),
    ],
)
def test_pii_spans_find_planted_identifiers(text, kind, value):
    """The PII recogniser finds e-mails, phones, IDs, dates and cued names."""
    spans = pii_spans(text)
    assert any(s.text == value and s.kind == kind for s in spans), spans


def test_pii_spans_skip_plain_lowercase_text():
    """Ordinary lower-case clinical text has no PII-like span."""
    assert pii_spans("the patient has a dry cough and mild fever for five days") == []


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("magic", {}, "unknown defense"),
        ("pad", {"sigma_base": -1}, "sigma_base"),
        ("pad", {"tau_conf": 2}, "tau_conf"),
        ("copy_aware", {"top_k": 1}, "top_k"),
        ("copy_aware", {"bogus": 1}, "unknown parameter"),
        ("bounded", {"epsilon": 0}, "epsilon"),
        ("static", {"delta": 1.5}, "delta"),
        ("none", {"sigma": 1}, "takes no parameters"),
    ],
)
def test_bad_defense_parameters_are_refused_with_the_value(name, options, message):
    """Invalid knobs raise InvalidParameterError naming what was wrong."""
    with pytest.raises(InvalidParameterError, match=message):
        DefenseConfig.from_options(name, options)


def test_receipt_epsilon_matches_dp_accounting():
    """The receipt's epsilon agrees with google dp-accounting's RDP accountant."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import rdp

    sigmas = [3.0, 5.0, 8.0, 4.0] * 10
    sensitivity = 2.0
    ledger = NoiseLedger(sensitivity=sensitivity)
    for i, s in enumerate(sigmas):
        ledger.record(i, s)
    ledger.record(len(sigmas), None)  # an unprotected token costs nothing
    eps, _order = receipt_epsilon(ledger, 1e-6)
    accountant = rdp.RdpAccountant()
    for s in sigmas:
        accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier=s / sensitivity))
    reference = accountant.get_epsilon(1e-6)
    assert eps == pytest.approx(reference, rel=0.02)


def test_calibrate_sigma_hits_the_target_epsilon():
    """calibrate_sigma returns the smallest sigma whose composition stays within epsilon."""
    from py_core.accounting import gaussian_rdp_epsilon

    sigma = calibrate_sigma(8.0, 4.0, 1e-6, 64)
    eps = gaussian_rdp_epsilon([sigma] * 64, 4.0, 1e-6)[0]
    assert eps <= 8.0 and eps == pytest.approx(8.0, rel=1e-3)
    assert gaussian_rdp_epsilon([sigma * 0.99] * 64, 4.0, 1e-6)[0] > 8.0


def test_bounded_fusion_restricts_to_public_top_k_and_spends_epsilon():
    """The bounded mechanism only emits public top-k tokens and accounts every token."""
    cfg = BoundedConfig(epsilon=4.0, clip=1.0, top_k=3)
    fusion = BoundedFusion(cfg, max_tokens=8, generator=_gen())
    public = torch.zeros(1, V)
    public[0, [3, 4, 5]] = torch.tensor([5.0, 4.0, 3.0])
    private = public.clone()
    private[0, 50] = 100.0  # the private context wants a token the public model would not say
    for _ in range(8):
        out = fusion(private, public)
        assert set(torch.nonzero(torch.isfinite(out[0])).flatten().tolist()) == {3, 4, 5}
    receipt = build_receipt(DefenseConfig("bounded", cfg), fusion.ledger, 8, 8)
    assert receipt.epsilon is not None and receipt.epsilon <= 4.0 + 1e-6
    assert receipt.gamma == 1.0 and receipt.meaningful and receipt.formal


def test_receipt_says_when_epsilon_means_nothing():
    """A huge calibrated epsilon is called meaningless in words, not presented as protection."""
    ledger = NoiseLedger(sensitivity=200.0)
    ledger.record(0, 0.02)
    receipt = build_receipt(DefenseConfig("static"), ledger, 1, 64)
    assert receipt.formal and receipt.epsilon is not None and receipt.epsilon > 10
    assert not receipt.meaningful
    assert "far too large to mean anything" in receipt.statement
    none = build_receipt(DefenseConfig("none"), None, 3)
    assert "no privacy protection" in none.statement and none.epsilon is None


def test_copy_aware_receipt_is_never_called_a_guarantee():
    """Copy-aware receipts are nominal: formal=False, no epsilon shown as protection."""
    ledger = NoiseLedger(sensitivity=2.0)
    ledger.record(0, 1000.0)
    receipt = build_receipt(DefenseConfig("copy_aware"), ledger, 10)
    assert not receipt.formal and not receipt.meaningful and receipt.epsilon is None
    assert receipt.nominal_epsilon is not None and receipt.nominal_epsilon > 0
    assert receipt.statement.startswith("Not a differential-privacy guarantee")
    assert receipt.to_dict()["gamma"] == pytest.approx(0.1)


@pytest.mark.parametrize("name", ["copy_aware", "pad"])
def test_no_noise_is_never_shown_as_protection(name):
    """An answer with no noise has no epsilon at all and says so in words."""
    ledger = NoiseLedger(sensitivity=2.0)
    for step in range(5):
        ledger.record(step, None)
    receipt = build_receipt(DefenseConfig(name), ledger, 5)
    assert receipt.epsilon is None and receipt.nominal_epsilon is None
    assert not receipt.noise_added and not receipt.meaningful and not receipt.formal
    assert "No noise was added to this answer" in receipt.statement
    assert "no noise" in receipt.headline


def test_pad_is_not_a_dp_guarantee_even_with_noise():
    """PAD's screening and sigma_t read the private logits: never formal, never meaningful."""
    ledger = NoiseLedger(sensitivity=200.0)
    ledger.record(0, 1e6, ("low_confidence",))
    receipt = build_receipt(DefenseConfig("pad"), ledger, 4)
    assert not receipt.formal and receipt.epsilon is None and not receipt.meaningful
    assert receipt.nominal_epsilon is not None and receipt.nominal_epsilon < 1
    assert "private logits" in receipt.notes[0]


def test_bounded_receipt_shows_the_calibrated_epsilon_beside_what_was_spent():
    """The guarantee is the epsilon calibrated for max_tokens; a shorter answer's figure is labelled."""
    cfg = BoundedConfig(epsilon=8.0, clip=4.0, top_k=5)
    fusion = BoundedFusion(cfg, max_tokens=64, generator=_gen())
    public = torch.zeros(1, V)
    for _ in range(10):
        fusion(public, public)
    receipt = build_receipt(DefenseConfig("bounded", cfg), fusion.ledger, 10, 64)
    assert receipt.formal and receipt.meaningful and receipt.max_tokens == 64
    assert receipt.epsilon is not None and 7.9 <= receipt.epsilon <= 8.0 + 1e-9
    assert receipt.epsilon_spent is not None and receipt.epsilon_spent < receipt.epsilon
    assert "calibrated for 64 tokens" in receipt.headline and "after the fact" in receipt.statement
    assert receipt.relation == "replacing the whole retrieved context"
    events = DefenseConfig("bounded", cfg).defense.calibrated_events(cfg, 64)
    assert len(events) == 64 and events[0].sigma == pytest.approx(fusion.sigma)


# ------------------------------------------------------------------------------ registry


def test_every_registered_defense_is_one_consistent_entry():
    """Each registry entry: its name, knobs that are real parameters, JSON-able description."""
    import json

    from companion.decoding.registry import DEFENSES, all_defenses, get_defense

    for defense in all_defenses():
        assert get_defense(defense.name) is defense and defense.name in DEFENSES
        described = json.loads(json.dumps(defense.describe()))
        fields = set(defense.defaults())
        for knob in described["knobs"]:
            assert knob["name"] in fields and knob["help"]
            assert knob["default"] == described["defaults"][knob["name"]]
        config = DefenseConfig.from_options(defense.name, {})
        assert config.defense is defense
    with pytest.raises(InvalidParameterError, match="unknown defense"):
        get_defense("nope")


@pytest.mark.parametrize("name", ["static", "pad", "copy_aware", "bounded"])
def test_receipt_formality_comes_from_the_registry(name):
    """A receipt is formal exactly when its defense's registry guarantee says so."""
    from companion.decoding.registry import get_defense

    ledger = NoiseLedger(sensitivity=2.0)
    ledger.record(0, 4.0, ("x",))
    receipt = build_receipt(DefenseConfig(name), ledger, 1)
    guarantee = get_defense(name).guarantee
    assert receipt.formal is guarantee.formal
    assert guarantee.note in receipt.notes


def test_a_new_defense_is_one_module_and_one_registry_line(monkeypatch):
    """Registering a module makes the defense selectable, buildable and receipted."""
    import sys
    import types

    from companion.decoding import registry
    from companion.decoding.base import BuildContext, Defense, Guarantee
    from companion.decoding.defenses.static import StaticNoiseConfig, StaticNoiseProcessor
    from companion.decoding.generate import build_mechanism

    module = types.ModuleType("toy_defense")
    module.DEFENSE = Defense(  # type: ignore[attr-defined]
        name="toy",
        label="Toy",
        summary="static noise under another name",
        guarantee=Guarantee(formal=False, relation=None, covers="every token", note="toy"),
        build=lambda cfg, ctx: StaticNoiseProcessor(
            cfg, prompt_length=ctx.prompt_length, generator=ctx.generator
        ),
        config_type=StaticNoiseConfig,
    )
    monkeypatch.setitem(sys.modules, "toy_defense", module)
    monkeypatch.setitem(registry._MODULES, "toy", "toy_defense")
    registry.get_defense.cache_clear()
    try:
        config = DefenseConfig.from_options("toy", {"sigma": 0.5})
        ctx = BuildContext(tokenizer=None, context_text="", prompt_length=1, generator=_gen())
        mechanism = build_mechanism(config, ctx)
        assert mechanism is not None
        mechanism.step(torch.tensor([[0]]), _flat_scores(), None)
        receipt = build_receipt(config, mechanism.ledger, 1)
        assert receipt.mechanism == "toy" and receipt.notes == ("toy",) and not receipt.formal
    finally:
        registry.get_defense.cache_clear()


# -------------------------------------------------------------------------- noise source


def test_noise_comes_from_the_os_csprng_unless_a_seed_is_given(monkeypatch):
    """secure_generator() draws from os.urandom; a seed gives the reproducible test source."""
    import os

    calls = []
    real = os.urandom

    def counting(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", counting)
    source = secure_generator("cpu")
    assert isinstance(source, SecureNoise) and source.secure
    noise = source.normal((3, 5), torch.zeros(1))
    assert noise.shape == (3, 5) and sum(calls) >= 8 * 15
    assert not torch.equal(noise, source.normal((3, 5), torch.zeros(1)))
    seeded = secure_generator("cpu", seed=1)
    assert isinstance(seeded, SeededNoise) and not seeded.secure
    assert torch.equal(
        seeded.normal((4,), torch.zeros(1)), SeededNoise(1).normal((4,), torch.zeros(1))
    )
    with pytest.raises(InvalidParameterError, match="NoiseSource"):
        StaticNoiseProcessor(StaticNoiseConfig(), prompt_length=0, generator=torch.Generator())


def test_secure_gaussians_have_the_right_distribution():
    """Mean 0, variance 1, tails of N(0,1): within 4 standard errors on 400k draws."""
    z = SecureNoise().normal((400_000,), torch.zeros(1, dtype=torch.float64))
    n = z.numel()
    assert abs(float(z.mean())) < 4 / math.sqrt(n)
    assert abs(float(z.var()) - 1.0) < 4 * math.sqrt(2 / n)
    for k, p in ((1.0, 0.31731), (2.0, 0.04550), (3.0, 0.0026998)):
        share = float((z.abs() > k).double().mean())
        assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / n), (k, share)


def test_sampling_at_a_temperature_uses_the_source():
    """Inverse-CDF sampling with the source's uniforms follows the softmax within 4 SE."""
    from companion.decoding.generate import choose_token

    scores = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    probs = torch.softmax(scores[0], -1).tolist()
    source = SecureNoise()
    n = 20_000
    counts = [0] * 4
    for _ in range(n):
        counts[choose_token(scores, 1.0, source)] += 1
    for c, p in zip(counts, probs, strict=True):
        assert abs(c / n - p) < 4 * math.sqrt(p * (1 - p) / n)
