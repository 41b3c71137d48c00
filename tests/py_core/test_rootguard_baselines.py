"""M-All / M-Roots / M-Opt and the MAP reconstruction adversary."""

from __future__ import annotations

import copy
import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from py_core.errors import InvalidParameterError
from py_core.rootguard.allocation import allocate
from py_core.rootguard.api import DEFAULT_PROFILE
from py_core.rootguard.baselines import m_all_budget, m_all_target, map_estimate, rootguard_target
from py_core.rootguard.mechanism import DiscreteLaplaceMechanism, Grid
from py_core.rootguard.profile import load_profile

MECH = DiscreteLaplaceMechanism(Grid(0, 30, 1), 0.8, 10.0)


def _brute_force(obs: list[int], mean: float | None, sd: float | None) -> float:
    best = -math.inf
    for j in range(MECH.grid.first, MECH.grid.last + 1):
        score = sum(MECH.log_probability(o, j) for o in obs)
        if mean is not None and sd is not None:
            score -= (j - mean) ** 2 / (2 * sd**2)
        best = max(best, score)
    return best


def _score(j: int, obs: list[int], mean: float | None, sd: float | None) -> float:
    score = sum(MECH.log_probability(o, j) for o in obs)
    if mean is not None and sd is not None:
        score -= (j - mean) ** 2 / (2 * sd**2)
    return score


@settings(max_examples=60, deadline=None)
@given(
    obs=st.lists(st.integers(0, 30), min_size=1, max_size=16),
    mean=st.floats(0, 30),
    sd=st.floats(0.5, 20),
    use_prior=st.booleans(),
)
def test_map_estimate_is_the_posterior_argmax(
    obs: list[int], mean: float, sd: float, use_prior: bool
) -> None:
    """The closed-form MAP equals a brute-force argmax of the exact clamped likelihood times the prior."""
    m, s = (mean, sd) if use_prior else (None, None)
    j = map_estimate(obs, MECH, prior_mean=m, prior_sd=s)
    assert _score(j, obs, m, s) == pytest.approx(_brute_force(obs, m, s), abs=1e-9)


def test_map_without_prior_is_a_median() -> None:
    """With a flat prior the MAP of Laplace observations is their median."""
    assert map_estimate([3, 9, 4], MECH) == 4
    with pytest.raises(InvalidParameterError):
        map_estimate([], MECH)


def test_averaging_attack_shrinks_m_all_error() -> None:
    """Seeded: under M-All, 16 fresh answers reconstruct much better than one."""
    rng = random.Random(2)
    mech = DiscreteLaplaceMechanism(Grid(0, 1000, 1), 0.1, 1.0)  # scale 10 steps
    err1, err16 = [], []
    for _ in range(400):
        fresh = [mech.release_index(500, rng) for _ in range(16)]
        err1.append(abs(map_estimate(fresh[:1], mech) - 500))
        err16.append(abs(map_estimate(fresh, mech) - 500))
    assert statistics.mean(err16) < 0.5 * statistics.mean(err1)


def test_configurations_spend_the_same_budget() -> None:
    """M-All spends (2k+1)ε; RootGuard's allocations sum to the same B."""
    values = copy.deepcopy(DEFAULT_PROFILE["values"])
    profile = load_profile(
        {
            "budget": 1,
            "target": "bmi",
            "values": {k: values[k] for k in ("weight_kg", "height_cm", "bmi")},
        }
    )
    budget = m_all_budget(2, 0.1)
    assert budget == pytest.approx(0.5)
    opt = allocate(profile, budget=budget)
    assert sum(opt.values()) == pytest.approx(budget)
    rng = random.Random(3)
    truth = {"weight_kg": 81.0, "height_cm": 180.0}
    g_all = m_all_target(profile, "bmi", truth, 0.1, rng)
    g_opt = rootguard_target(profile, "bmi", truth, opt, rng)
    assert 30 / 2.2**2 <= g_all <= 250 / 1.2**2
    assert 30 / 2.2**2 <= g_opt <= 250 / 1.2**2


def test_rootguard_beats_m_all_on_average() -> None:
    """Seeded: with B = (2k+1)ε on k roots, RootGuard's target error is clearly lower."""
    values = copy.deepcopy(DEFAULT_PROFILE["values"])
    for name in ("weight_kg", "height_cm"):
        values[name]["privacy_unit"] = 1.0
    profile = load_profile(
        {
            "budget": 1,
            "target": "bmi",
            "values": {k: values[k] for k in ("weight_kg", "height_cm", "bmi")},
        }
    )
    rng = random.Random(4)
    truth = {"weight_kg": 81.0, "height_cm": 180.0}
    g = profile.evaluate("bmi", truth)
    eps = 0.5
    opt = allocate(profile, budget=m_all_budget(2, eps))
    err_all = statistics.mean(
        abs(m_all_target(profile, "bmi", truth, eps, rng) - g) for _ in range(400)
    )
    err_opt = statistics.mean(
        abs(rootguard_target(profile, "bmi", truth, opt, rng) - g) for _ in range(400)
    )
    assert err_opt < err_all / 1.8
