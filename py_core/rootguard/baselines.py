"""The configurations the evaluation compares, and the reconstruction adversary.

* **M-All** -- every disclosure is noised afresh.  In a session of a template
  with ``k`` roots the person discloses each root twice (two services) and the
  target once, ``2k + 1`` releases of ε each; the service computing the target
  evaluates ``g`` on one fresh disclosure of each root.
* **M-Roots** -- RootGuard with the same total ``B = (2k + 1) ε``, split equally
  over the ``k`` roots; every disclosure is answered from the cache.
* **M-Opt** -- RootGuard with ``B`` split by the sensitivity rule
  (:func:`~py_core.rootguard.allocation.allocate`).

:func:`map_estimate` is the MAP reconstruction adversary: it knows the mechanism
(clamped discrete Laplace, its scale and grid) and a Gaussian prior over the
population, sees ``q`` answers about a root and returns the grid value that
maximises the posterior.  Under M-All the answers are independent draws; under
RootGuard they are the same cached value, which the adversary (knowing the
mechanism) counts once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from py_core.errors import InvalidParameterError
from py_core.rootguard.cache import RootCache
from py_core.rootguard.mechanism import DiscreteLaplaceMechanism, RandomSource
from py_core.rootguard.profile import Profile

__all__ = [
    "CONFIGURATIONS",
    "m_all_budget",
    "m_all_target",
    "map_estimate",
    "rootguard_target",
]

CONFIGURATIONS = ("M-All", "M-Roots", "M-Opt")


def m_all_budget(k: int, epsilon: float) -> float:
    """Total ε M-All spends on a session of ``k`` roots: ``(2k + 1) ε``."""
    return (2 * k + 1) * epsilon


def m_all_target(
    profile: Profile,
    target: str,
    true_roots: Mapping[str, float],
    epsilon: float,
    rng: RandomSource,
) -> float:
    """The target as the M-All service computes it: ``g`` of fresh ε-noised roots."""
    noisy = {}
    for name in sorted(profile.root_dependencies(target)):
        spec = profile.roots[name]
        mech = DiscreteLaplaceMechanism(spec.grid, epsilon, spec.privacy_unit)
        noisy[name] = spec.grid.value(mech.release_index(true_roots[name], rng))
    return profile.evaluate(target, noisy)


def rootguard_target(
    profile: Profile,
    target: str,
    true_roots: Mapping[str, float],
    allocation: Mapping[str, float],
    rng: RandomSource,
) -> float:
    """The target under RootGuard: its roots drawn once with ``allocation``, ``g`` of them.

    ``allocation`` is ``B / k`` per root for M-Roots and
    :func:`~py_core.rootguard.allocation.allocate` for M-Opt.
    """
    cache = RootCache(profile=profile, allocation=dict(allocation))
    cache.draw(true_roots, rng, names=sorted(profile.root_dependencies(target)), event="init")
    return cache.value(target)


def map_estimate(
    observations: Sequence[int],
    mechanism: DiscreteLaplaceMechanism,
    *,
    prior_mean: float | None = None,
    prior_sd: float | None = None,
) -> int:
    """The grid index maximising the posterior given independent ``observations``.

    The clamped discrete Laplace has ``log P(o | j) = -|o - j| / t + const`` for
    every output, boundary outputs included, so the negative log posterior is
    ``Σ |o_k - j| / t + (j - μ)² / (2 σ²)`` (the prior term only with a prior):
    convex in ``j``.  Its continuous minimiser is one of the observations or a
    stationary point between two of them; the best integer is beside it.
    """
    if not observations:
        raise InvalidParameterError("the adversary needs at least one observation")
    grid = mechanism.grid
    t = float(mechanism.scale)
    step = float(grid.fstep)
    mu = None if prior_mean is None else prior_mean / step
    var = None if prior_sd is None else (prior_sd / step) ** 2
    obs = sorted(observations)

    def cost(j: float) -> float:
        c = sum(abs(o - j) for o in obs) / t
        if mu is not None and var:
            c += (j - mu) ** 2 / (2 * var)
        return c

    candidates: list[float] = [float(o) for o in obs]
    if mu is not None and var:
        n = len(obs)
        for below in range(n + 1):  # ``below`` observations lie under the point
            j = mu - var * (below - (n - below)) / t
            lo = -math.inf if below == 0 else obs[below - 1]
            hi = math.inf if below == n else obs[below]
            if lo <= j <= hi:
                candidates.append(j)
    best = min(candidates, key=cost)
    integers = {min(max(v, grid.first), grid.last) for v in (math.floor(best), math.ceil(best))}
    return min(sorted(integers), key=cost)
