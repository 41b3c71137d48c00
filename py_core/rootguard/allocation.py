"""Splitting the budget B across independent roots (Level 2).

Without a target every root gets ``B / k``.  With a target ``g`` the roots it
depends on share their part ``B * |T| / k`` in proportion to

    w_i = (|h_i| * D_i) ** exponent,   h_i = ∂g/∂x_i at the reference point,

where ``D_i`` is the root's privacy unit (the domain width by default) and the
exponent is 1/2: minimising ``Σ |h_i| D_i / ε_i`` (the first-order error of
``g``, each root's noise having scale ``D_i / ε_i``) subject to ``Σ ε_i = B``
gives ``ε_i ∝ (|h_i| D_i)^{1/2}`` (Lagrange).  Roots the target does not use keep
the equal share.  A root whose sensitivity is zero at the reference point keeps
a floor weight of 1/1000 of the largest, so every root gets some budget.
Derivatives are central differences of the target evaluated through the
profile's formulas.
"""

from __future__ import annotations

from collections.abc import Mapping

from py_core.errors import InvalidParameterError
from py_core.rootguard.profile import Profile

__all__ = ["allocate", "sensitivities", "split_by_weights"]

_FLOOR = 1e-3


def sensitivities(
    profile: Profile, target: str, point: Mapping[str, float] | None = None
) -> dict[str, float]:
    """``|∂g/∂x_i|`` for every root the target depends on, at ``point`` (default: references)."""
    base = {name: spec.reference for name, spec in profile.roots.items()}
    if point:
        base.update(point)
    result: dict[str, float] = {}
    for name in sorted(profile.root_dependencies(target)):
        spec = profile.roots[name]
        h = 1e-6 * max(abs(base[name]), spec.grid.step, 1e-9)
        up, down = dict(base), dict(base)
        up[name] += h
        down[name] -= h
        result[name] = abs(profile.evaluate(target, up) - profile.evaluate(target, down)) / (2 * h)
    return result


def split_by_weights(total: float, weights: Mapping[str, float]) -> dict[str, float]:
    """``total`` split in proportion to ``weights`` (all > 0)."""
    s = sum(weights.values())
    if not s > 0:
        raise InvalidParameterError(f"weights must sum to > 0; got {dict(weights)}")
    return {name: total * w / s for name, w in weights.items()}


def allocate(
    profile: Profile,
    *,
    target: str | None = None,
    budget: float | None = None,
    exponent: float = 0.5,
    point: Mapping[str, float] | None = None,
    equal_split: bool = False,
) -> dict[str, float]:
    """ε per independent root; sums to the budget (the profile's unless given).

    ``target`` defaults to the profile's; ``equal_split=True`` ignores any target.
    """
    total = profile.budget if budget is None else budget
    goal = None if equal_split else (profile.target if target is None else target)
    roots = list(profile.roots)
    equal = total / len(roots)
    if goal is None:
        return dict.fromkeys(roots, equal)
    h = sensitivities(profile, goal, point)
    if not h:
        return dict.fromkeys(roots, equal)
    raw = {name: (h[name] * profile.roots[name].privacy_unit) ** exponent for name in h}
    top = max(raw.values())
    if not top > 0:
        weights = dict.fromkeys(raw, 1.0)
    else:
        weights = {name: max(w, _FLOOR * top) for name, w in raw.items()}
    shares = split_by_weights(equal * len(h), weights)
    return {name: shares.get(name, equal) for name in roots}
