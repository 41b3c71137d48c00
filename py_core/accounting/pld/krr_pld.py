"""The exact privacy-loss distribution of n-fold k-RR, and its tight ``(eps, delta)``.

:func:`krr_composed_epsilon` and :func:`krr_composed_delta` for one group of
``n`` characters at one ``(epsilon, k)``; several groups are composed in
:mod:`py_core.accounting.pld.composition`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from py_core.accounting.common import _count, _delta, _krr_params
from py_core.errors import InvalidParameterError
from py_core.krr import K as KRR_K

# Exact n-fold k-RR (REPLACE_ONE).  Per step the privacy loss is +eps (output =
# the true input, prob p), -eps (output = the neighbour's input, prob q) or 0
# (prob r = (k - 2) q), with p / q = e^eps; the total loss is eps * D where
# c_d = P(D = d) is the coefficient of x^d in (p x + r + q / x)^n.  From
# (p x^3 + r x^2 + q x) f' = n (p x^2 - q) f the coefficients satisfy
#     p (m - n) c_m + r (m + 1) c_(m+1) + q (m + 2 + n) c_(m+2) = 0,
# run downward from two values at the top of the window (every term positive
# for m >= 0: no cancellation, the error grows by a few ulps a step); the
# negative side is the mirror c_(-d) = e^(-eps d) c_d.  Docs: docs/methods/krr.md.

_TAIL_SHARE = 1e-10  # each neglected tail: at most this share of the target delta
_DELTA_TAIL = 1e-30  # the neglected tails of krr_composed_delta (no target to scale by)
_TINY = 1e-280  # the smallest tail we aim for (smaller floats are subnormal)
_ULP = 2.0**-52
_HUGE_EPSILON = 500.0  # above: basic composition (pessimistic by about delta; see _single_epsilon)


@dataclass(frozen=True, slots=True)
class _Trinomial:
    """D of ``n`` k-RR steps at ``eps``: the privacy loss is ``eps * D``."""

    n: int
    eps: float
    k: int
    p: float
    q: float
    r: float
    lp: float
    lq: float
    lr: float

    @property
    def mean(self) -> float:
        return self.n * (self.p - self.q)

    @property
    def log_magnitude(self) -> float:
        """A bound on the magnitude of the log-space sums that give a start value."""
        logs = [abs(v) for v in (self.lp, self.lq, self.lr) if v > -math.inf]
        return 2.0 * math.lgamma(self.n + 1.0) + self.n * max(logs) + 8.0


def _trinomial(n: int, epsilon: float, k: int) -> _Trinomial:
    lp, lq, lr = _krr_params(epsilon, k)
    r = math.exp(lr) if lr > -math.inf else 0.0
    return _Trinomial(n, float(epsilon), k, math.exp(lp), math.exp(lq), r, lp, lq, lr)


def _log_tail(tr: _Trinomial, t: int, upper: bool) -> float:
    """log of a Chernoff bound on P(D >= t) (``upper``) or P(D <= t): 0 means none.

    ``E[x^D] x^-t = g(x)^n x^-t`` with ``g(x) = p x + r + q / x``, at the
    stationary point ``(n - t) p x^2 - t r x - (n + t) q = 0``; any ``x >= 1``
    (``x <= 1`` for the lower tail) gives a valid bound, so rounding in ``x``
    only loosens it.
    """
    n = tr.n
    if upper and t >= n:
        return -math.inf if t > n else n * tr.lp
    if not upper and t <= -n:
        return -math.inf if t < -n else n * tr.lq
    a, b, c = (n - t) * tr.p, t * tr.r, (n + t) * tr.q
    root = math.sqrt(b * b + 4.0 * a * c)
    x = (b + root) / (2.0 * a) if b >= 0 else 2.0 * c / (root - b)
    if (upper and x <= 1.0) or (not upper and x >= 1.0):
        return 0.0
    return min(0.0, n * math.log(tr.p * x + tr.r + tr.q / x) - t * math.log(x))


def _upper_cut(tr: _Trinomial, log_tau: float) -> tuple[int, float]:
    """The smallest ``hi >= mean`` with (Chernoff) P(D > hi) <= tau, and that bound."""
    lo, hi = max(0, math.ceil(tr.mean)), tr.n
    while lo < hi:
        mid = (lo + hi) // 2
        if _log_tail(tr, mid + 1, True) <= log_tau:
            hi = mid
        else:
            lo = mid + 1
    return hi, math.exp(_log_tail(tr, hi + 1, True))


def _lower_cut(tr: _Trinomial, log_tau: float) -> tuple[int, float]:
    """The largest ``lo <= mean`` with (Chernoff) P(D < lo) <= tau, and that bound."""
    lo, hi = -tr.n, min(tr.n, math.floor(tr.mean))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _log_tail(tr, mid - 1, False) <= log_tau:
            lo = mid
        else:
            hi = mid - 1
    return lo, math.exp(_log_tail(tr, lo - 1, False))


def _coefficient(tr: _Trinomial, d: int) -> tuple[float, int]:
    """``P(D = d)`` for ``0 <= d``, summed over b (the outputs equal to the neighbour).

    The terms ``n! / (a! b! c!) p^a q^b r^c`` (``a = d + b``, ``c = n - d - 2b``)
    are log-concave in b: the largest is found by bisection on the ratio of
    neighbours, the rest by that ratio outward, in scaled floats, until a term
    is below 1e-17 of the sum; the geometric bound on what is left is added
    (never below).  Returns the value and the number of terms summed.
    """
    n = tr.n
    if d > n:
        return 0.0, 0
    rest = n - d
    lgn = math.lgamma(n + 1.0)
    if tr.r == 0.0:  # k = 2: D has the parity of n
        if rest % 2:
            return 0.0, 1
        b = rest // 2
        a = d + b
        log_t = lgn - math.lgamma(a + 1.0) - math.lgamma(b + 1.0) + a * tr.lp + b * tr.lq
        return math.exp(log_t), 1
    pq_rr = math.exp(tr.lp + tr.lq - 2.0 * tr.lr)

    def ratio(b: int) -> float:  # term(b + 1) / term(b)
        c = rest - 2 * b
        return c * (c - 1) * pq_rr / ((d + b + 1) * (b + 1))

    lo, hi = 0, rest // 2  # ratio(rest // 2) = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if ratio(mid) < 1.0:
            hi = mid
        else:
            lo = mid + 1
    top = lo
    c0 = rest - 2 * top
    log_t = (
        lgn
        - math.lgamma(d + top + 1.0)
        - math.lgamma(top + 1.0)
        - math.lgamma(c0 + 1.0)
        + (d + top) * tr.lp
        + top * tr.lq
        + c0 * tr.lr
    )
    total, terms = 1.0, 1
    term, b, bmax = 1.0, top, rest // 2
    while b < bmax:
        step = ratio(b)
        term *= step
        b += 1
        total += term
        terms += 1
        if term < 1e-17 * total:
            nxt = ratio(b)
            total += term * nxt / (1.0 - nxt) if nxt < 1.0 else term * (bmax - b)
            break
    term, b = 1.0, top
    while b > 0:
        step = 1.0 / ratio(b - 1)
        term *= step
        b -= 1
        total += term
        terms += 1
        if term < 1e-17 * total:
            nxt = 1.0 / ratio(b - 1) if b > 0 else 0.0
            total += term * nxt / (1.0 - nxt) if nxt < 1.0 else term * b
            break
    return math.exp(log_t) * total, terms


def _round_up(x: float) -> float:
    """``x`` rounded up by 1e-13 of itself (a non-positive ``x`` is float error around 0)."""
    return max(x, 0.0) + 1e-13 * abs(x) + 1e-300


def _descend(tr: _Trinomial, top: int, bottom: int) -> tuple[list[float], int]:
    """``[c_bottom, ..., c_top]`` (``0 <= bottom <= top``) by the downward recurrence."""
    n, p, q, r = tr.n, tr.p, tr.q, tr.r
    c_up, terms_up = _coefficient(tr, top + 1)
    c_t, terms = _coefficient(tr, top)
    out = [c_t]
    for m in range(top - 1, bottom - 1, -1):
        c_m = (r * (m + 1) * c_t + q * (m + 2 + n) * c_up) / (p * (n - m))
        out.append(c_m)
        c_up, c_t = c_t, c_m
    out.reverse()
    return out, terms + terms_up


def _single_epsilon(tr: _Trinomial, delta: float) -> float:
    """The tight epsilon of one trinomial at ``delta`` (module comment above).

    delta(eps') = sum_(d > eps'/eps) c_d (1 - e^(eps' - d eps)).  With the suffix
    sums A(t) = delta(t eps) and W(t) = sum_(d >= t) c_d e^(-(d - t) eps)::

        A(t - 1) = A(t) + (1 - e^-eps) W(t),   W(t - 1) = c_(t-1) + e^-eps W(t)

    (both positive), and inside a segment delta(eps') = A(t) + W(t) (1 - e^(eps'
    - t eps)), solved in closed form.  The scan runs down from the window's top
    and stops at the segment holding the answer.  What is pessimistic: the
    Chernoff bound on the mass above the window (at most 1e-10 delta), a
    relative margin for the float error of the start values and the
    recurrence, and a 1e-13 relative round-up of the answer.
    """
    n, eps = tr.n, tr.eps
    basic = n * eps
    if n == 0 or eps == 0.0:
        return 0.0
    if eps > _HUGE_EPSILON:
        # p^n = 1 in floats: the exact value is basic + log(1 - delta) (>= basic - 2 delta).
        return basic
    log_tau = math.log(max(delta * _TAIL_SHARE, _TINY))
    hi, miss = _upper_cut(tr, log_tau)
    if hi < 1:  # no mass above 0 but the neglected tail
        return 0.0 if miss < delta else basic
    lo, miss_lo = _lower_cut(tr, log_tau)
    floor_t = max(lo, 1)
    if lo <= 1:
        miss_lo = 0.0  # the window reaches d = 1: nothing below it counts
    eta = _ULP * (8.0 * tr.log_magnitude + 6.0 * (hi - floor_t + 4.0)) + 1e-15
    target = (delta - miss) / (1.0 + eta)
    if target <= 0.0:
        return basic
    n_, p, q, r = n, tr.p, tr.q, tr.r
    c_up, terms_up = _coefficient(tr, hi + 1)
    c_t, terms = _coefficient(tr, hi)
    eta += _ULP * 6.0 * (terms + terms_up)
    target = (delta - miss) / (1.0 + eta)
    em, gap = math.exp(-eps), -math.expm1(-eps)
    a_t, w_t, t = 0.0, c_t, hi
    while t > floor_t:
        a_prev = a_t + gap * w_t
        if a_prev > target:
            f = (target - a_t) / w_t
            return min(basic, _round_up(t * eps + math.log1p(-f)))
        m = t - 1
        c_m = (r * (m + 1) * c_t + q * (m + 2 + n_) * c_up) / (p * (n_ - m))
        c_up, c_t = c_t, c_m
        w_t = c_m + em * w_t
        a_t = a_prev
        t = m
    # t = floor_t: below t eps, delta <= A(t) + W(t)(1 - e^(eps' - t eps)) + the lower tail.
    low_target = (delta - miss - miss_lo) / (1.0 + eta)
    if low_target < a_t:
        return min(basic, _round_up(t * eps))
    f = (low_target - a_t) / w_t
    if f >= -math.expm1(-t * eps):
        return 0.0
    return min(basic, _round_up(t * eps + math.log1p(-f)))


@dataclass(slots=True)
class _Window:
    """``values[i] = P(D = lo + i)``; ``missing`` bounds the mass outside; ``eta`` the
    relative float error of the values."""

    lo: int
    values: list[float]
    missing: float
    eta: float

    @property
    def hi(self) -> int:
        return self.lo + len(self.values) - 1


def _window(tr: _Trinomial, log_tau: float) -> _Window:
    """The distribution of D over its window (both signs), the negative side by the mirror."""
    hi, _ = _upper_cut(tr, log_tau)
    lo, miss_lo = _lower_cut(tr, log_tau)
    top = max(hi, -lo)
    miss_hi = math.exp(_log_tail(tr, top + 1, True))
    positive, terms = _descend(tr, top, max(lo, 0))
    values = positive
    if lo < 0:
        eps = tr.eps
        mirror = [positive[-d] * math.exp(eps * d) for d in range(lo, 0)]
        values = mirror + positive
    eta = _ULP * (8.0 * tr.log_magnitude + 6.0 * (len(values) + terms + 4.0)) + 1e-15
    # + what a mirrored value lost to underflow (each below 1e-300)
    return _Window(lo, values, miss_hi + miss_lo + 1e-300 * len(values), eta)


def krr_composed_delta(n: int, epsilon: float, target_epsilon: float, k: int = KRR_K) -> float:
    """The exact (up to a pessimistic tail of 1e-30) delta of n-fold k-RR at ``target_epsilon``."""
    count = _count(n)
    eps = float(epsilon)
    _krr_params(eps, k)
    if isinstance(target_epsilon, bool) or not isinstance(target_epsilon, int | float):
        raise InvalidParameterError(f"target_epsilon must be a number; got {target_epsilon!r}")
    target = float(target_epsilon)
    if math.isnan(target):
        raise InvalidParameterError("target_epsilon must be a number; got nan")
    if count == 0 or eps == 0.0:  # the loss is 0: delta = (1 - e^target)_+
        return -math.expm1(target) if target < 0 else 0.0
    if math.isinf(target):  # delta(+inf) = 0; delta(-inf) = 1
        return 0.0 if target > 0 else 1.0
    if eps > _HUGE_EPSILON:
        # D = n with probability p^n = 1 in floats; the rest cannot be resolved: delta <= 1.
        return 1.0 if target < count * eps else 0.0
    tr = _trinomial(count, eps, k)
    log_tau = math.log(_DELTA_TAIL)
    t_need = math.floor(target / eps) + 1  # the smallest d with d eps > target
    while t_need * eps <= target:
        t_need += 1
    while (t_need - 1) * eps > target:
        t_need -= 1
    if target < eps:  # d <= 0 may count: the whole window, both signs
        win = _window(tr, log_tau)
        start = max(t_need, win.lo)
        vals = win.values[start - win.lo :]
        miss, eta = win.missing, win.eta
    else:
        hi, miss = _upper_cut(tr, log_tau)
        if t_need > hi:
            return min(1.0, miss)
        lo, miss_lo = _lower_cut(tr, log_tau)
        start = max(t_need, lo)
        if start > t_need:
            miss += miss_lo
        vals, terms = _descend(tr, hi, start)
        eta = _ULP * (8.0 * tr.log_magnitude + 6.0 * (len(vals) + terms + 4.0)) + 1e-15
    total = 0.0
    for i, c in enumerate(vals):
        total += c * -math.expm1(target - (start + i) * eps)
    return min(1.0, total * (1.0 + eta) + miss)


def krr_composed_epsilon(n: int, epsilon: float, delta: float, k: int = KRR_K) -> float:
    """Tight ``eps`` of ``n``-fold k-RR (``epsilon`` per step) at ``delta``.

    Computed from the exact privacy-loss distribution (REPLACE_ONE: each of the
    ``n`` positions may hold a different character) by the recurrence above, in
    O(sqrt(n)) steps; never below the exact value (the neglected tail, float
    error and the last digits are all rounded up) and never above basic
    composition ``n * epsilon``.
    """
    count = _count(n)
    d = _delta(delta)
    eps_step = float(epsilon)
    _krr_params(eps_step, k)
    if count == 0 or eps_step == 0.0:
        return 0.0
    return min(count * eps_step, _single_epsilon(_trinomial(count, eps_step, k), d))
