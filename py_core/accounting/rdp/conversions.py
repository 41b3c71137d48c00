"""Rényi DP of Veil's mechanisms and Balle et al.'s conversion to ``(eps, delta)``.

* :func:`gaussian_rdp_epsilon` -- the Gaussian mechanism composed over a
  sequence of noise scales ``sigma_t`` with a common L2 sensitivity ``Delta``.
  Its RDP at order ``alpha`` is ``alpha * Delta^2 / (2 sigma_t^2)``; RDP adds up
  under composition and is converted to ``(eps, delta)`` with the improved
  conversion of Balle et al. 2020 (Prop. 12 of arXiv:2004.00010), minimised over
  a grid of orders.  This is what the companion's PAD receipts use.
* :func:`krr_rdp` / :func:`krr_rdp_epsilon` -- the RDP bound of k-ary randomized
  response (the tight figure is :mod:`py_core.accounting.pld`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from py_core.accounting.common import (
    DEFAULT_ORDERS,
    _count,
    _delta,
    _krr_params,
    _logsumexp,
    _orders,
    _positive,
)
from py_core.errors import InvalidParameterError
from py_core.krr import K as KRR_K


def rdp_to_dp(rdp: Sequence[float], orders: Sequence[float], delta: float) -> tuple[float, float]:
    """Convert RDP values at ``orders`` to ``(eps, best_order)`` at ``delta``.

    Uses ``eps = rdp + log1p(-1/a) - log(delta * a) / (a - 1)`` (Balle et al.
    2020), and the KL bound ``eps = 0`` when ``delta^2 >= 1 - exp(-rdp)``.
    """
    d = _delta(delta)
    alphas = _orders(orders)
    if len(rdp) != len(alphas):
        raise InvalidParameterError(f"got {len(rdp)} RDP values for {len(alphas)} orders")
    best = (math.inf, alphas[0])
    for a, r in zip(alphas, rdp, strict=True):
        if r < 0 or math.isnan(r):
            raise InvalidParameterError(f"RDP values must be >= 0; got {r!r} at order {a}")
        if d * d + math.expm1(-r) > 0:
            eps = 0.0
        elif a > 1.01:
            eps = r + math.log1p(-1.0 / a) - math.log(d * a) / (a - 1)
        else:
            eps = math.inf
        if eps < best[0]:
            best = (eps, a)
    return max(0.0, best[0]), best[1]


# --------------------------------------------------------------------- Gaussian


def gaussian_rdp(sigmas: Iterable[float], sensitivity: float, order: float) -> float:
    """RDP at ``order`` of Gaussian mechanisms with noise ``sigmas`` composed."""
    delta_sq = _positive(sensitivity, "sensitivity") ** 2
    inverse = 0.0
    for s in sigmas:
        inverse += 1.0 / _positive(s, "sigma") ** 2
    return order * delta_sq * inverse / 2.0


def gaussian_rdp_epsilon(
    sigmas: Iterable[float],
    sensitivity: float,
    delta: float,
    orders: Iterable[float] = DEFAULT_ORDERS,
) -> tuple[float, float]:
    """``(eps, best_order)`` of the composition of Gaussian mechanisms.

    ``sigmas`` are the noise standard deviations of each mechanism (e.g. each
    protected token), all with L2 ``sensitivity``.  No mechanism: ``eps = 0``.
    """
    alphas = _orders(orders)
    sig = [_positive(s, "sigma") for s in sigmas]
    sens = _positive(sensitivity, "sensitivity")
    _delta(delta)
    if not sig:
        return 0.0, alphas[0]
    inverse = sum(1.0 / (s * s) for s in sig)
    rdp = [a * sens * sens * inverse / 2.0 for a in alphas]
    return rdp_to_dp(rdp, alphas, delta)


def krr_rdp(epsilon: float, order: float, k: int = KRR_K) -> float:
    """RDP at ``order`` of one k-RR step for two distinct inputs (the worst pair)."""
    log_p, log_q, log_r = _krr_params(epsilon, k)
    a = order
    terms = [a * log_p + (1 - a) * log_q, a * log_q + (1 - a) * log_p]
    if log_r > -math.inf:
        terms.append(log_r)
    return max(0.0, _logsumexp(terms) / (a - 1))


def krr_rdp_epsilon(
    n: int, epsilon: float, delta: float, k: int = KRR_K, orders: Iterable[float] = DEFAULT_ORDERS
) -> tuple[float, float]:
    """``(eps, best_order)`` of ``n``-fold k-RR by RDP composition."""
    count = _count(n)
    alphas = _orders(orders)
    if count == 0:
        return 0.0, alphas[0]
    return rdp_to_dp([count * krr_rdp(epsilon, a, k) for a in alphas], alphas, delta)
