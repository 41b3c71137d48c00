"""The root mechanism: a clamped discrete Laplace (two-sided geometric) on a grid.

A root value lives on a public domain ``[lo, hi]`` at a stated precision ``s``
(0.1 kg, 1 year, ...).  The mechanism

1. snaps the true value to the grid ``{j * s}`` inside the domain (rounding and
   clamping are deterministic pre-processing of the person's value),
2. adds integer noise ``Z`` with ``P(Z = z) ∝ exp(-|z| / t)``, ``t = u / (s ε)``
   grid steps, where ``u`` is the *privacy unit* (by default the domain width),
3. clamps the result to the grid's ends (post-processing).

Guarantee: for grid values ``x, x'`` every output has probability ratio at most
``exp(ε |x - x'| / u)``.  With ``u`` the domain width that is ε-DP for any two
values of the domain; with a smaller ``u`` it is ε-indistinguishability for
values within ``u`` of each other (metric DP), weaker for values further apart.

Floating point.  Mironov (2012) showed that textbook float Laplace leaks the
input through the low bits of its output.  Here nothing is floating point: the
noise is an integer drawn exactly from rational parameters with the sampler of
Canonne, Kamath and Steinke (2020, "The discrete Gaussian for differential
privacy", Algorithms 1-2), which only calls ``rng.randrange``; outputs are grid
indices.  ``ε`` is taken as the exact rational value of the float given.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

from py_core.errors import InsecureRandomnessError, InvalidParameterError

__all__ = [
    "DiscreteLaplaceMechanism",
    "Grid",
    "RandomSource",
    "discrete_laplace",
    "resolve_rng",
]


class RandomSource(Protocol):
    """What the mechanism needs from an RNG (``random.Random``, ``random.SystemRandom``)."""

    def randrange(self, start: int, stop: int | None = ..., step: int = ..., /) -> int: ...


def resolve_rng(rng: object, *, secure: bool) -> random.Random:
    """The RNG to use: a CSPRNG by default; a seeded one only when ``secure`` is False.

    In secure mode (real data) only ``None`` (a fresh :class:`random.SystemRandom`)
    or a :class:`random.SystemRandom` instance is accepted; a seeded
    ``random.Random`` is refused with :class:`InsecureRandomnessError`.
    """
    if rng is None:
        return random.SystemRandom()
    if isinstance(rng, random.SystemRandom):
        return rng
    if secure:
        raise InsecureRandomnessError(
            f"refusing {type(rng).__name__} for real data: a seeded or custom RNG is for tests "
            "and experiments only; pass rng=None (random.SystemRandom) instead"
        )
    if not callable(getattr(rng, "randrange", None)):
        raise InvalidParameterError(f"rng must provide randrange(); got {type(rng).__name__}")
    return rng  # type: ignore[return-value]


def _bernoulli(num: int, den: int, rng: RandomSource) -> bool:
    """True with probability ``num / den`` exactly (0 <= num <= den)."""
    return rng.randrange(den) < num


def _bernoulli_exp_le1(num: int, den: int, rng: RandomSource) -> bool:
    """True with probability ``exp(-num/den)`` for ``0 <= num/den <= 1`` (CKS Algorithm 1)."""
    k = 1
    while _bernoulli(num, den * k, rng):
        k += 1
    return k % 2 == 1


def _bernoulli_exp(num: int, den: int, rng: RandomSource) -> bool:
    """True with probability ``exp(-num/den)`` for any ``num/den >= 0``."""
    while num > den:
        if not _bernoulli_exp_le1(1, 1, rng):
            return False
        num -= den
    return _bernoulli_exp_le1(num, den, rng)


def discrete_laplace(scale: Fraction, rng: RandomSource) -> int:
    """An exact draw of ``Z`` with ``P(Z = z) ∝ exp(-|z| / scale)`` (CKS Algorithm 2)."""
    if scale <= 0:
        raise InvalidParameterError(f"discrete Laplace scale must be > 0; got {scale}")
    t, s = scale.numerator, scale.denominator  # scale = t / s
    while True:
        u = rng.randrange(t)
        if not _bernoulli_exp(u, t, rng):
            continue
        v = 0
        while _bernoulli_exp_le1(1, 1, rng):
            v += 1
        y = (u + t * v) // s
        negative = rng.randrange(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def _as_fraction(value: float, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidParameterError(f"{name} must be a finite number; got {value!r}")
    if isinstance(value, float):
        # A decimal written in a profile (0.1 kg) means exactly one tenth.
        return Fraction(repr(value))
    return Fraction(value)


@dataclass(frozen=True, slots=True)
class Grid:
    """The values ``j * step`` for ``first <= j <= last`` inside ``[lo, hi]``."""

    lo: float
    hi: float
    step: float
    # Derived once in __post_init__ (exact rationals): step, first/last index, decimals.
    fstep: Fraction = field(init=False, repr=False, compare=False)
    first: int = field(init=False, repr=False, compare=False)
    last: int = field(init=False, repr=False, compare=False)
    decimals: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lo, hi = _as_fraction(self.lo, "lo"), _as_fraction(self.hi, "hi")
        step = _as_fraction(self.step, "precision")
        if not step > 0:
            raise InvalidParameterError(f"precision must be > 0; got {self.step!r}")
        if not lo < hi:
            raise InvalidParameterError(f"domain [{self.lo}, {self.hi}] is empty or inverted")
        first, last = math.ceil(lo / step), math.floor(hi / step)
        if last < first:
            raise InvalidParameterError(
                f"domain [{self.lo}, {self.hi}] holds no multiple of the precision {self.step}"
            )
        if last - first + 1 > 10_000_000:
            raise InvalidParameterError(
                f"domain [{self.lo}, {self.hi}] at precision {self.step} has {last - first + 1} "
                "grid points; at most 10,000,000 (use a coarser precision)"
            )
        decimals = next((d for d in range(13) if (step * 10**d).denominator == 1), 12)
        object.__setattr__(self, "fstep", step)
        object.__setattr__(self, "first", first)
        object.__setattr__(self, "last", last)
        object.__setattr__(self, "decimals", decimals)

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def snap(self, value: float) -> int:
        """The index of the grid value nearest ``value``, clamped into the domain."""
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise InvalidParameterError(f"value must be a finite number; got {value!r}")
        index = round(Fraction(value) / self.fstep)
        return min(max(index, self.first), self.last)

    def value(self, index: int) -> float:
        """The grid value of ``index``, as a float rounded to the grid's decimals."""
        return round(float(index * self.fstep), self.decimals)

    def contains(self, index: int) -> bool:
        return self.first <= index <= self.last


@dataclass(frozen=True, slots=True)
class DiscreteLaplaceMechanism:
    """ε-DP over ``privacy_unit`` for one root: clamped discrete Laplace on ``grid``."""

    grid: Grid
    epsilon: float
    privacy_unit: float

    def __post_init__(self) -> None:
        if (
            isinstance(self.epsilon, bool)
            or not isinstance(self.epsilon, int | float)
            or not math.isfinite(self.epsilon)
            or self.epsilon <= 0
        ):
            raise InvalidParameterError(
                f"epsilon must be a finite number > 0; got {self.epsilon!r}"
            )
        unit = _as_fraction(self.privacy_unit, "privacy_unit")
        if unit <= 0:
            raise InvalidParameterError(f"privacy_unit must be > 0; got {self.privacy_unit!r}")

    @property
    def scale(self) -> Fraction:
        """The noise scale ``t`` in grid steps: ``privacy_unit / (precision * ε)``, exact."""
        return (
            _as_fraction(self.privacy_unit, "privacy_unit")
            / self.grid.fstep
            / Fraction(self.epsilon)
        )

    def epsilon_for_distance(self, distance: float) -> float:
        """The ε guaranteed between two grid values ``distance`` apart (rounded up)."""
        steps = math.ceil(Fraction(abs(distance)) / self.grid.fstep)
        return math.nextafter(float(steps / self.scale), math.inf) if steps else 0.0

    @property
    def domain_epsilon(self) -> float:
        """The ε guaranteed between any two values of the domain (rounded up).

        Counted in whole grid steps: going through the float width (14.8 for
        creatinine's [0.2, 15] at 0.01) rounded one step too many onto it.
        """
        steps = self.grid.last - self.grid.first
        return math.nextafter(float(steps / self.scale), math.inf) if steps else 0.0

    def release_index(self, value: float, rng: RandomSource) -> int:
        """Snap ``value`` to the grid, add exact discrete Laplace noise, clamp; the index."""
        index = self.grid.snap(value) + discrete_laplace(self.scale, rng)
        return min(max(index, self.grid.first), self.grid.last)

    def log_probability(self, output: int, index: int) -> float:
        """``log P(output | true grid index)``, exact up to float rounding (for tests)."""
        if not (self.grid.contains(output) and self.grid.contains(index)):
            return -math.inf
        a = math.exp(-1.0 / float(self.scale))
        log_norm = math.log((1 - a) / (1 + a))
        if output == self.grid.first:  # mass of every z <= first - index
            return log_norm + (index - output) * math.log(a) - math.log(1 - a)
        if output == self.grid.last:
            return log_norm + (output - index) * math.log(a) - math.log(1 - a)
        return log_norm + abs(output - index) * math.log(a)
