"""The clamped discrete Laplace root mechanism: its ε bound from both sides, exact sampling."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from py_core.errors import InsecureRandomnessError, InvalidParameterError
from py_core.rootguard.mechanism import (
    DiscreteLaplaceMechanism,
    Grid,
    discrete_laplace,
    resolve_rng,
)


def _max_log_ratio(mech: DiscreteLaplaceMechanism, max_distance: int | None = None) -> float:
    grid = mech.grid
    worst = 0.0
    indices = range(grid.first, grid.last + 1)
    for a, b in itertools.combinations(indices, 2):
        if max_distance is not None and abs(a - b) > max_distance:
            continue
        for out in indices:
            worst = max(worst, abs(mech.log_probability(out, a) - mech.log_probability(out, b)))
    return worst


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 3.0])
def test_domain_epsilon_bound_holds_and_is_tight(epsilon: float) -> None:
    """With the domain as privacy unit every output ratio is <= e^ε, and ε itself is reached."""
    mech = DiscreteLaplaceMechanism(Grid(0, 2, 0.25), epsilon, 2.0)
    worst = _max_log_ratio(mech)
    assert worst <= epsilon * (1 + 1e-9)
    # Tight: the mechanism does NOT satisfy any smaller ε (fails ε·(1 - 1e-6)).
    assert worst > epsilon * (1 - 1e-6)
    assert mech.domain_epsilon == pytest.approx(epsilon, rel=1e-12)
    assert mech.domain_epsilon >= epsilon


def test_metric_epsilon_bound_scales_with_distance() -> None:
    """With a smaller privacy unit u, values d apart get ε·d/u, tight at d = u."""
    mech = DiscreteLaplaceMechanism(Grid(0, 10, 1), 0.7, 2.0)
    assert _max_log_ratio(mech, max_distance=2) <= 0.7 * (1 + 1e-9)
    assert _max_log_ratio(mech, max_distance=2) > 0.7 * (1 - 1e-6)
    assert _max_log_ratio(mech) == pytest.approx(0.7 * 10 / 2, rel=1e-9)
    assert mech.epsilon_for_distance(2) == pytest.approx(0.7)
    assert mech.domain_epsilon == pytest.approx(3.5)


def test_probabilities_sum_to_one() -> None:
    """The clamped output distribution is a distribution for every input."""
    mech = DiscreteLaplaceMechanism(Grid(10, 20, 0.5), 0.3, 10.0)
    for index in range(mech.grid.first, mech.grid.last + 1):
        total = sum(
            math.exp(mech.log_probability(out, index))
            for out in range(mech.grid.first, mech.grid.last + 1)
        )
        assert total == pytest.approx(1.0, abs=1e-12)


def test_discrete_laplace_frequencies_match_pmf() -> None:
    """Seeded: the exact sampler's frequencies are within 4 standard errors of the pmf."""
    rng = random.Random(7)
    scale = Fraction(5, 2)
    n = 40_000
    counts: dict[int, int] = {}
    for _ in range(n):
        z = discrete_laplace(scale, rng)
        counts[z] = counts.get(z, 0) + 1
    a = math.exp(-1 / float(scale))
    for z in range(-6, 7):
        p = (1 - a) / (1 + a) * a ** abs(z)
        se = math.sqrt(p * (1 - p) / n)
        assert abs(counts.get(z, 0) / n - p) < 4 * se, z


def test_release_frequencies_match_log_probability() -> None:
    """Seeded: clamped releases follow the stated output distribution (4 standard errors)."""
    rng = random.Random(11)
    mech = DiscreteLaplaceMechanism(Grid(0, 8, 1), 1.0, 4.0)
    n = 30_000
    counts = [0] * 9
    for _ in range(n):
        counts[mech.release_index(2.2, rng)] += 1
    for out in range(9):
        p = math.exp(mech.log_probability(out, 2))
        se = math.sqrt(p * (1 - p) / n)
        assert abs(counts[out] / n - p) < 4 * se + 1e-12, out


def test_sampler_needs_only_randrange() -> None:
    """The sampler draws integers only (no floating point), from any randrange source."""

    class OnlyRandrange:
        def __init__(self) -> None:
            self.inner = random.Random(3)
            self.calls = 0

        def randrange(self, start: int, stop: int | None = None, step: int = 1, /) -> int:
            self.calls += 1
            return self.inner.randrange(start, stop, step)

    source = OnlyRandrange()
    values = {discrete_laplace(Fraction(3), source) for _ in range(200)}
    assert all(isinstance(v, int) for v in values)
    assert source.calls > 0


def test_outputs_are_exact_grid_values() -> None:
    """Released values are grid points printed at the grid's decimals (no float low bits)."""
    grid = Grid(30, 250, 0.1)
    mech = DiscreteLaplaceMechanism(grid, 1.0, 10.0)
    rng = random.Random(5)
    for _ in range(200):
        value = grid.value(mech.release_index(81.37, rng))
        assert value == round(value, 1)
        assert 30 <= value <= 250
    assert grid.snap(81.37) == 814
    assert grid.snap(1000) == grid.last == 2500
    assert grid.decimals == 1


def test_scale_is_exact_rational() -> None:
    """The noise scale is privacy_unit / (precision · ε) exactly, in grid steps."""
    mech = DiscreteLaplaceMechanism(Grid(0, 100, 0.1), 0.5, 10.0)
    assert mech.scale == Fraction(10) / Fraction(1, 10) / Fraction(0.5)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((5, 5, 1), "empty or inverted"),
        ((5, 1, 1), "empty or inverted"),
        ((0, 1, 0), "precision must be > 0"),
        ((0.1, 0.2, 0.5), "holds no multiple"),
        ((0, 1e9, 1), "grid points"),
    ],
)
def test_grid_validation(args: tuple[float, float, float], fragment: str) -> None:
    """Bad domains and precisions are refused with the bad value named."""
    with pytest.raises(InvalidParameterError, match=fragment):
        Grid(*args)


def test_mechanism_validation() -> None:
    """ε must be > 0 and finite; the privacy unit > 0."""
    grid = Grid(0, 1, 0.1)
    for eps in (0, -1, math.inf, math.nan, True):
        with pytest.raises(InvalidParameterError):
            DiscreteLaplaceMechanism(grid, eps, 1.0)
    with pytest.raises(InvalidParameterError, match="privacy_unit"):
        DiscreteLaplaceMechanism(grid, 1.0, 0.0)


def test_secure_mode_refuses_seeded_rng() -> None:
    """Secure mode accepts None and SystemRandom, refuses a seeded random.Random."""
    assert isinstance(resolve_rng(None, secure=True), random.SystemRandom)
    system = random.SystemRandom()
    assert resolve_rng(system, secure=True) is system
    with pytest.raises(InsecureRandomnessError, match="SystemRandom"):
        resolve_rng(random.Random(1), secure=True)
    seeded = random.Random(1)
    assert resolve_rng(seeded, secure=False) is seeded
    with pytest.raises(InvalidParameterError, match="randrange"):
        resolve_rng(object(), secure=False)
