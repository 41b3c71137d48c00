"""The former O(n sqrt(n)) k-RR accounting, kept as an oracle for tests and benchmarks.

It is not part of the product (py_core.accounting.pld computes the same figures in
O(sqrt(n))): tests/test_accounting_fast_krr.py checks the fast bound against it and
bench/ledger_bench.py measures both in the same run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from py_core.accounting.common import _krr_params


def reference_loss_distribution(n: int, epsilon: float, k: int) -> tuple[dict[int, float], float]:
    """The former O(n sqrt(n)) computation, kept as the reference for tests and benchmarks.

    D = A - B with A ~ Bin(n, p) and B | A=a ~ Bin(n - a, q / (1 - p)), each summed
    over its mean +/- 12 standard deviations (+12); the mass outside that window
    is returned as the tail.
    """
    log_p, log_q, log_r = _krr_params(epsilon, k)
    p = math.exp(log_p)
    log_fact = [0.0] * (n + 1)
    for i in range(2, n + 1):
        log_fact[i] = log_fact[i - 1] + math.log(i)
    width = 12.0
    mean_a, sd_a = n * p, math.sqrt(n * p * (1 - p))
    a_lo = max(0, int(mean_a - width * sd_a) - 12)
    a_hi = min(n, int(mean_a + width * sd_a) + 12)
    q_cond = 1.0 / (k - 1)  # q / (q + r)
    dist: dict[int, float] = {}
    total = 0.0
    for a in range(a_lo, a_hi + 1):
        rest = n - a
        mean_b, sd_b = rest * q_cond, math.sqrt(rest * q_cond * (1 - q_cond))
        b_lo = max(0, int(mean_b - width * sd_b) - 12)
        b_hi = min(rest, int(mean_b + width * sd_b) + 12)
        base = log_fact[n] - log_fact[a] + a * log_p
        for b in range(b_lo, b_hi + 1):
            c = rest - b
            log_prob = base - log_fact[b] - log_fact[c] + b * log_q
            if c:
                log_prob += c * log_r
            prob = math.exp(log_prob)
            total += prob
            d = a - b
            dist[d] = dist.get(d, 0.0) + prob
    return dist, max(0.0, 1.0 - total)


def reference_hockey_stick(dist: Sequence[tuple[int, float]], unit: float, eps: float) -> float:
    result = 0.0
    for d, prob in dist:
        loss = d * unit
        if loss <= eps:
            break
        result += prob * -math.expm1(eps - loss)
    return result


def reference_krr_composed_delta(n: int, epsilon: float, target_epsilon: float, k: int) -> float:
    """The former :func:`krr_composed_delta` (reference)."""
    if n == 0:
        return 0.0
    dist, tail = reference_loss_distribution(n, float(epsilon), k)
    ordered = sorted(dist.items(), reverse=True)
    return min(1.0, reference_hockey_stick(ordered, float(epsilon), target_epsilon) + tail)


def reference_krr_composed_epsilon(n: int, epsilon: float, delta: float, k: int) -> float:
    """The former :func:`krr_composed_epsilon` (reference): bisection on the old distribution."""
    eps_step = float(epsilon)
    basic = n * eps_step
    if n == 0 or eps_step == 0.0:
        return 0.0
    dist, tail = reference_loss_distribution(n, eps_step, k)
    if tail >= delta:
        return basic
    ordered = sorted(dist.items(), reverse=True)

    def delta_at(e: float) -> float:
        return reference_hockey_stick(ordered, eps_step, e) + tail

    if delta_at(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, basic
    for _ in range(100):
        mid = (lo + hi) / 2
        if delta_at(mid) <= delta:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-9 * max(1.0, hi):
            break
    return hi
