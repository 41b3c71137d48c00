"""Accounting cross-checked against google's dp-accounting (test dependency only)."""

import math
import random

import pytest
from dp_accounting import NeighboringRelation, dp_event, rdp
from dp_accounting.pld import privacy_loss_distribution
from hypothesis import given, settings
from hypothesis import strategies as st

from py_core import accounting
from py_core.errors import InvalidParameterError, StateError


def _rr_event(epsilon: float, k: int) -> dp_event.RandomizedResponseDpEvent:
    p = math.exp(epsilon) / (math.exp(epsilon) + k - 1)
    return dp_event.RandomizedResponseDpEvent(noise_parameter=k * (1 - p) / (k - 1), num_buckets=k)


@pytest.mark.parametrize("seed", range(4))
def test_gaussian_heterogeneous_matches_dp_accounting(seed: int) -> None:
    """Composition over heterogeneous sigma_t agrees with RdpAccountant within 1%."""
    rng = random.Random(seed)
    sens = rng.choice([0.5, 1.0, 2.0, 8.0])
    sigmas = [rng.uniform(0.5, 30.0) * sens for _ in range(rng.randint(1, 60))]
    delta = rng.choice([1e-5, 1e-6, 1e-9])
    ours, _ = accounting.gaussian_rdp_epsilon(sigmas, sens, delta)
    acc = rdp.RdpAccountant()
    for s in sigmas:
        acc.compose(dp_event.GaussianDpEvent(s / sens))
    theirs = acc.get_epsilon(delta)
    assert ours == pytest.approx(theirs, rel=0.01)


@pytest.mark.parametrize(
    ("n", "epsilon", "k"),
    [(1, 1.0, 94), (10, 0.5, 94), (200, 1.0, 95), (50, 4.0, 94), (300, 2.0, 94)],
)
def test_krr_composed_matches_pld_within_one_percent(n: int, epsilon: float, k: int) -> None:
    """The exact n-fold k-RR bound agrees with dp-accounting's PLD within 1%.

    dp-accounting 0.6.0's PLD accountant ignores ``count`` for randomized response,
    so the distribution is composed with ``self_compose`` (see shared/NOTES.md).
    """
    delta = 1e-6
    event = _rr_event(epsilon, k)
    theirs = (
        privacy_loss_distribution.from_randomized_response(
            noise_parameter=event.noise_parameter,
            num_buckets=k,
            neighboring_relation=NeighboringRelation.REPLACE_ONE,
        )
        .self_compose(n)
        .get_epsilon_for_delta(delta)
    )
    ours = accounting.krr_composed_epsilon(n, epsilon, delta, k=k)
    assert ours == pytest.approx(theirs, rel=0.01)


@pytest.mark.parametrize(("n", "epsilon"), [(1, 2.0), (100, 1.0), (1000, 3.0)])
def test_krr_rdp_matches_dp_accounting(n: int, epsilon: float) -> None:
    """The RDP bound of n-fold k-RR agrees with dp-accounting's RdpAccountant within 1%."""
    acc = rdp.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    acc.compose(_rr_event(epsilon, 94), n)
    theirs = acc.get_epsilon(1e-6)
    ours, _ = accounting.krr_rdp_epsilon(n, epsilon, 1e-6)
    assert ours == pytest.approx(theirs, rel=0.01)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 400), epsilon=st.floats(0.01, 8.0))
def test_composed_never_exceeds_basic_and_grows_with_n(n: int, epsilon: float) -> None:
    """0 <= composed(n) <= n * eps and composed(n) <= composed(n + 1)."""
    a = accounting.krr_composed_epsilon(n, epsilon, 1e-6)
    b = accounting.krr_composed_epsilon(n + 1, epsilon, 1e-6)
    assert 0.0 <= a <= n * epsilon + 1e-9
    assert a <= b + 1e-7


def test_single_step_is_tight() -> None:
    """One k-RR step: delta(eps') = p(1 - e^(eps' - eps)) for eps' < eps, so eps(delta) -> eps."""
    eps = 3.0
    p = 1 / (1 + 93 * math.exp(-eps))
    for target in (0.0, 1.0, 2.5):
        assert accounting.krr_composed_delta(1, eps, target) == pytest.approx(
            p * -math.expm1(target - eps), rel=1e-9
        )
    assert accounting.krr_composed_epsilon(1, eps, 1e-9) == pytest.approx(eps, abs=1e-6)


def test_rdp_to_dp_rejects_bad_input() -> None:
    """Bad delta, orders or RDP values are refused with the value in the message."""
    with pytest.raises(InvalidParameterError, match="delta"):
        accounting.rdp_to_dp([1.0], [2.0], 0.0)
    with pytest.raises(InvalidParameterError, match="orders"):
        accounting.rdp_to_dp([1.0], [1.0], 1e-5)
    with pytest.raises(InvalidParameterError, match="-1"):
        accounting.rdp_to_dp([-1.0], [2.0], 1e-5)
    with pytest.raises(InvalidParameterError, match="sigma"):
        accounting.gaussian_rdp_epsilon([0.0], 1.0, 1e-5)


def test_no_mechanism_costs_nothing() -> None:
    """Zero events: epsilon 0."""
    assert accounting.gaussian_rdp_epsilon([], 1.0, 1e-5)[0] == 0.0
    assert accounting.krr_composed_epsilon(0, 2.0, 1e-6) == 0.0


def test_ledger_round_trip_and_corruption() -> None:
    """A ledger saves and restores exactly; corrupted state raises StateError."""
    ledger = accounting.Ledger()
    ledger.record(accounting.GaussianEvent(sigma=4.0, sensitivity=2.0), document="7")
    ledger.record(accounting.KRREvent(epsilon=1.0, count=20), site="chatgpt.com")
    ledger.record(accounting.PureDpEvent(0.5), 3, root="weight")
    restored = accounting.Ledger.from_dict(ledger.to_dict())
    assert restored == ledger
    assert restored.epsilon(1e-6) == ledger.epsilon(1e-6) > 0
    broken = ledger.to_dict()
    broken["entries"] = [{"event": {"type": "laplace"}, "count": 1}]  # type: ignore[index]
    with pytest.raises(StateError):
        accounting.Ledger.from_dict(broken)
    broken["entries"] = [{"event": {"type": "pure", "epsilon": -1}, "count": 1}]  # type: ignore[index]
    with pytest.raises(StateError):
        accounting.Ledger.from_dict(broken)
    with pytest.raises(StateError):
        accounting.Ledger.from_dict({"version": 99})


def test_ledger_labels_select_what_is_composed() -> None:
    """Only the entries carrying every requested label are composed."""
    ledger = accounting.Ledger()
    ledger.record(accounting.KRREvent(2.0, 10), site="a")
    ledger.record(accounting.KRREvent(2.0, 5), site="b")
    ledger.record(accounting.KRREvent(2.0, 1), 4, site="a")
    assert ledger.epsilon(1e-6, "basic", site="a") == pytest.approx(2.0 * 14)
    assert ledger.epsilon(1e-6, "basic", site="b") == pytest.approx(2.0 * 5)
    assert ledger.epsilon(1e-6, "basic") == pytest.approx(2.0 * 19)
    assert ledger.epsilon(1e-6, "basic", site="c") == 0.0
    with pytest.raises(InvalidParameterError, match="unknown accountant"):
        ledger.epsilon(1e-6, "moments")


def test_rdp_accountant_matches_the_gaussian_function_and_dp_accounting() -> None:
    """The accountant and gaussian_rdp_epsilon are one computation; both agree with dp-accounting."""
    sigmas = [3.0, 5.0, 5.0, 12.0]
    acc = accounting.RdpAccountant()
    for s in sigmas:
        acc.compose(accounting.GaussianEvent(s, 2.0))
    ours, order = acc.get_epsilon_and_order(1e-6)
    direct = accounting.gaussian_rdp_epsilon(sigmas, 2.0, 1e-6)
    assert ours == pytest.approx(direct[0], rel=1e-12)
    assert order == direct[1]
    theirs = rdp.RdpAccountant()
    for s in sigmas:
        theirs.compose(dp_event.GaussianDpEvent(s / 2.0))
    assert ours == pytest.approx(theirs.get_epsilon(1e-6), rel=0.01)
    # count=n is the same as composing n times
    twice = accounting.RdpAccountant().compose(accounting.GaussianEvent(3.0, 2.0), 2)
    once = accounting.RdpAccountant().compose_all([accounting.GaussianEvent(3.0, 2.0)] * 2)
    assert twice.get_epsilon(1e-6) == pytest.approx(once.get_epsilon(1e-6), rel=1e-12)


def test_krr_pld_accountant_is_the_exact_bound_and_never_above_basic() -> None:
    """One (eps, k): the exact PLD bound; mixed: min(basic, RDP); other events refused."""
    acc = accounting.KrrPldAccountant()
    acc.compose(accounting.KRREvent(1.0, 120)).compose(accounting.KRREvent(1.0, 80))
    exact = accounting.krr_composed_epsilon(200, 1.0, 1e-6)
    assert acc.get_epsilon(1e-6) == exact
    pld = privacy_loss_distribution.from_randomized_response(
        noise_parameter=_rr_event(1.0, 94).noise_parameter, num_buckets=94
    ).self_compose(200)
    assert exact == pytest.approx(pld.get_epsilon_for_delta(1e-6), rel=0.01)
    mixed = accounting.KrrPldAccountant()
    mixed.compose(accounting.KRREvent(1.0, 100)).compose(accounting.KRREvent(3.0, 2))
    assert 0 < mixed.get_epsilon(1e-6) <= 106.0
    with pytest.raises(InvalidParameterError, match="k-RR events only"):
        accounting.KrrPldAccountant().compose(accounting.GaussianEvent(1.0, 1.0))


def test_basic_accountant_adds_pure_epsilons_and_refuses_to_hide_a_gaussian() -> None:
    """Basic composition: epsilons add; a Gaussian has no pure epsilon (infinite)."""
    acc = accounting.BasicAccountant()
    acc.compose(accounting.PureDpEvent(0.25), 4).compose(accounting.KRREvent(2.0, 3))
    assert acc.get_epsilon(0.0) == pytest.approx(1.0 + 6.0)
    acc.compose(accounting.GaussianEvent(10.0, 1.0))
    assert acc.get_epsilon(0.0) == math.inf


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_pure_dp_event_rdp_bound_from_both_sides(epsilon: float) -> None:
    """min(eps, a*eps^2/2) dominates a real eps-DP mechanism's RDP, and is tight at large order."""
    event = accounting.PureDpEvent(epsilon)
    for order in (1.5, 2.0, 8.0, 64.0, 1024.0):
        # binary randomized response is eps-DP; its RDP must stay under the bound
        real = accounting.krr_rdp(epsilon, order, 2)
        assert real <= event.rdp(order) + 1e-12
    assert accounting.krr_rdp(epsilon, 1024.0, 2) >= 0.99 * event.rdp(1024.0)
    assert event.rdp(1e6) == epsilon
