"""Privacy accounting in pure Python: Rényi DP and exact composition of k-RR.

Two accountants, both cross-checked against google's ``dp-accounting`` in the
tests (that package is compiled and stays out of the Pyodide core):

* :func:`gaussian_rdp_epsilon` -- the Gaussian mechanism composed over a
  sequence of noise scales ``sigma_t`` with a common L2 sensitivity ``Delta``.
  Its RDP at order ``alpha`` is ``alpha * Delta^2 / (2 sigma_t^2)``; RDP adds up
  under composition and is converted to ``(eps, delta)`` with the improved
  conversion of Balle et al. 2020 (Prop. 12 of arXiv:2004.00010), minimised over
  a grid of orders.  This is what the companion's PAD receipts use.
* :func:`krr_composed_epsilon` -- the tight ``(eps, delta)`` of ``n``-fold k-ary
  randomized response (one character replaced per position), computed from the
  exact privacy-loss distribution, and :func:`krr_rdp_epsilon`, its RDP bound.

Events are kept apart from accountants, as in dp-accounting: :class:`GaussianEvent`,
:class:`KRREvent` and :class:`PureDpEvent` are frozen records; a :class:`Ledger`
keeps many of them (across prompts, answers and draws, with labels such as the
site or the document), can be saved with :meth:`Ledger.to_dict` and restored;
an :class:`Accountant` (:class:`BasicAccountant`, :class:`RdpAccountant`,
:class:`KrrPldAccountant`) composes them into ``(eps, delta)``.  Every receipt in
Veil -- k-RR prompts, decoding answers, RootGuard draws -- asks one of these.
"""

from __future__ import annotations

import array
import math
import operator
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from py_core.errors import InvalidParameterError, StateError
from py_core.krr import K as KRR_K
from py_core.validate import check_count, check_delta, check_positive

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_DELTA",
    "DEFAULT_ORDERS",
    "Accountant",
    "BasicAccountant",
    "Event",
    "GaussianEvent",
    "IndividualRdpFilter",
    "KRREvent",
    "KrrPldAccountant",
    "Ledger",
    "LedgerEntry",
    "PureDpEvent",
    "RdpAccountant",
    "event_from_dict",
    "event_to_dict",
    "filter_order",
    "gaussian_rdp",
    "gaussian_rdp_epsilon",
    "krr_composed_delta",
    "krr_composed_epsilon",
    "krr_rdp",
    "krr_rdp_epsilon",
    "rdp_budget",
    "rdp_to_dp",
]

# The delta of every (eps, delta) figure Veil shows unless a caller says otherwise.
DEFAULT_DELTA = 1e-6

# The same grid as dp-accounting's RdpAccountant default.
DEFAULT_ORDERS: tuple[float, ...] = (
    tuple(1 + x / 10.0 for x in range(1, 100))
    + tuple(float(x) for x in range(11, 64))
    + (128.0, 256.0, 512.0, 1024.0)
)


def _positive(value: object, name: str) -> float:
    return check_positive(value, name)


def _delta(delta: object) -> float:
    return check_delta(delta)


def _orders(orders: Iterable[float]) -> tuple[float, ...]:
    result = tuple(float(a) for a in orders)
    if not result or any(not (a > 1 and math.isfinite(a)) for a in result):
        raise InvalidParameterError(f"RDP orders must be finite and > 1; got {result!r}")
    return result


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


# -------------------------------------------------------------------------- k-RR


def _krr_params(epsilon: float, k: int) -> tuple[float, float, float]:
    """(log p, log q, log r) of k-RR with keep weight e^eps: r = (k-2) q."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise InvalidParameterError(f"k must be an integer >= 2; got {k!r}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not epsilon >= 0:
        raise InvalidParameterError(f"epsilon must be a finite number >= 0; got {epsilon!r}")
    if not math.isfinite(epsilon):
        raise InvalidParameterError(f"epsilon must be finite; got {epsilon!r}")
    # p = e^eps / (e^eps + k - 1), q = 1 / (e^eps + k - 1), in logs for large eps.
    log_norm = _logsumexp([epsilon, math.log(k - 1)])
    log_p = epsilon - log_norm
    log_q = -log_norm
    log_r = math.log(k - 2) + log_q if k > 2 else -math.inf
    return log_p, log_q, log_r


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


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


def _count(n: object) -> int:
    return check_count(n, "n")


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
_CONVOLUTION_SHARE = 1e-8  # the mass an exact convolution's flooring may lose, as a share of delta
_DELTA_TAIL = 1e-30  # the neglected tails of krr_composed_delta (no target to scale by)
_TINY = 1e-280  # the smallest tail we aim for (smaller floats are subnormal)
_ULP = 2.0**-52
_HUGE_EPSILON = 500.0  # above: basic composition (pessimistic by about delta; see _single_epsilon)
_MINOR_BUDGET = 3_000  # the smaller groups' window lengths (summed) convolved exactly
_SPREAD = 1e-3  # the largest lift to a common loss unit (relative); above it: also the split bound
_MAX_MULTIPLE = 12  # the largest epsilon is split into at most this many loss units


def _dot_fallback(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(map(operator.mul, a, b))


# math.sumprod: Python >= 3.12 (Pyodide), in C with an extended-precision sum.
_dot: Callable[[Sequence[float], Sequence[float]], float] = getattr(math, "sumprod", _dot_fallback)


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


def _trim(win: _Window, tau: float) -> _Window:
    """Drop the ends of ``win`` holding at most ``tau`` each; their mass goes to ``missing``."""
    v = win.values
    i, cut_lo = 0, 0.0
    while i < len(v) - 1 and cut_lo + v[i] <= tau:
        cut_lo += v[i]
        i += 1
    j, cut_hi = len(v), 0.0
    while j - 1 > i and cut_hi + v[j - 1] <= tau:
        cut_hi += v[j - 1]
        j -= 1
    return _Window(win.lo + i, v[i:j], win.missing + cut_lo + cut_hi, win.eta)


def _convolve(a: _Window, b: _Window, tau: float) -> _Window:
    """The distribution of the sum of two independent windows, by one integer product.

    Kronecker substitution: each value is floored to a multiple of 2^-bits and the
    values are packed, ``words`` 64-bit words apart, into one integer per window;
    the integers' product (CPython's big-integer multiplication, in C) holds the
    convolution exactly, unpacked 64 bits at a time.  Flooring only lowers the
    values; the mass it loses, at most ``(la + lb + la lb 2^-bits) 2^-bits <=
    tau``, goes to ``missing`` with the union bound on what each window left out.
    """
    va, vb = a.values, b.values
    la, lb = len(va), len(vb)
    bits = max(8, math.ceil(math.log2((la + lb + 1.0) / tau)))
    while (la + lb + la * lb * 2.0**-bits) * 2.0**-bits > tau:
        bits += 1
    words = -(-(2 * bits + min(la, lb).bit_length() + 1) // 64)  # a sum of products fits
    size = 8 * words
    ldexp = math.ldexp

    def pack(values: list[float]) -> int:
        return int.from_bytes(
            b"".join(int(ldexp(v, bits)).to_bytes(size, "little") for v in values), "little"
        )

    product = pack(va) * pack(vb)
    raw = array.array("Q")
    raw.frombytes(product.to_bytes((la + lb) * size, "little"))
    if sys.byteorder == "big":  # pragma: no cover - every platform Veil runs on is little-endian
        raw.byteswap()
    count = la + lb - 1
    out = [0.0] * count
    for w in range(words):
        scale = 2.0 ** (64 * w - 2 * bits)
        out = [o + x * scale for o, x in zip(out, raw[w : w + words * count : words], strict=True)]
    lost = (la + lb + la * lb * 2.0**-bits) * 2.0**-bits
    eta = a.eta + b.eta + _ULP * (2.0 * words + 2.0)
    return _Window(a.lo + b.lo, out, a.missing + b.missing + lost, eta)


def _spread(win: _Window, step: int) -> _Window:
    """``win`` on a lattice ``step`` times finer (its values ``step`` entries apart)."""
    if step == 1:
        return win
    values = [0.0] * ((len(win.values) - 1) * step + 1)
    values[::step] = win.values
    return _Window(win.lo * step, values, win.missing, win.eta)


def _convolved_epsilon(
    win: _Window, unit: float, minor: _Window, delta: float, cap: float
) -> float:
    """The tight epsilon of two independent loss distributions on one lattice (``unit``).

    delta_total(eps') = sum_e P(minor = e) delta_major(eps' - e unit); with the
    major's suffix sums A, W (see :func:`_single_epsilon`, here over any window),
    A_total(T) = sum_e P(e) A(T - e) (one dot product) is delta_total(T unit); a
    bisection over T finds the segment, solved in closed form as for one group.
    Never above ``cap`` (a valid bound computed by the caller).
    """
    v, lo1 = win.values, win.lo
    size = len(v)
    em, gap = math.exp(-unit), -math.expm1(-unit)
    a_arr = [0.0] * (size + 1)  # a_arr[i] = A(lo1 + i), a_arr[size] = A(hi + 1) = 0
    w_arr = [0.0] * (size + 1)
    a_t = w_t = 0.0
    for i in range(size - 1, -1, -1):
        a_t += gap * w_t
        w_t = v[i] + em * w_t
        a_arr[i], w_arr[i] = a_t, w_t
    a_rev, w_rev = a_arr[::-1], w_arr[::-1]
    vm, om, lm = minor.values, minor.lo, len(minor.values)
    missing = win.missing + minor.missing
    eta = win.eta + minor.eta + _ULP * 4.0 * (lm + size + 4)
    target = (delta - missing) / (1.0 + eta)
    if target <= 0.0:
        return cap

    def total(rev: list[float], t: int, low: bool) -> float:
        base = t - om - lo1  # minor value j meets the major's index base - j
        j0, j1 = max(0, base - size), min(lm - 1, base)
        s = 0.0
        if j0 <= j1:
            s = _dot(vm[j0 : j1 + 1], rev[size - base + j0 : size - base + j1 + 1])
        if base + 1 < lm:  # the major's index below 0: its tail below the window, analytically
            a0, w0 = a_arr[0], w_arr[0]
            for j in range(max(0, base + 1), lm):
                shift = (base - j) * unit  # < 0
                s += vm[j] * ((a0 - w0 * math.expm1(shift)) if low else w0 * math.exp(shift))
        return s

    lo_t, hi_t = 0, lo1 + size + om + lm + 1  # A_total(hi_t) = 0
    while lo_t < hi_t:
        mid = (lo_t + hi_t) // 2
        if total(a_rev, mid, True) <= target:
            hi_t = mid
        else:
            lo_t = mid + 1
    t = lo_t
    if t <= 0:
        return 0.0
    a_t = total(a_rev, t, True)
    w_t = total(w_rev, t, False)
    f = (target - a_t) / w_t if w_t > 0 else 0.0
    return min(cap, _round_up(t * unit + math.log1p(-min(f, gap))))


def _common_unit(epsilons: list[float]) -> tuple[float, list[int]]:
    """A loss unit u and multiples m_j with m_j u >= eps_j, each lift at most _SPREAD.

    Tries the largest epsilon split into 1, 2, ..., _MAX_MULTIPLE units (the slot
    alphabets' epsilons need 1; sites at epsilon 2 and 5 need 5); failing that,
    every group is lifted to the largest epsilon (u = max, all m_j = 1).
    """
    top = max(epsilons)
    for count in range(1, _MAX_MULTIPLE + 1):
        trial = top / count
        ms = [max(1, round(e / trial)) for e in epsilons]
        unit = max(e / m for e, m in zip(epsilons, ms, strict=True)) * (1.0 + 4.0 * _ULP)
        if all(m * unit <= e * (1.0 + _SPREAD) for e, m in zip(epsilons, ms, strict=True)):
            return unit, ms
    return top, [1] * len(epsilons)


def _groups_rdp_epsilon(items: list[tuple[float, int, int]], delta: float) -> float:
    """RDP composition of k-RR groups ``(eps, k, n)`` (krr_rdp summed, in one pass)."""
    logs = [(n, *_krr_params(e, k)) for e, k, n in items]
    rdp = []
    for a in DEFAULT_ORDERS:
        total = 0.0
        for n, lp, lq, lr in logs:
            x, y = a * lp + (1 - a) * lq, a * lq + (1 - a) * lp
            top = max(x, y, lr)
            s = (
                math.exp(x - top)
                + math.exp(y - top)
                + (math.exp(lr - top) if lr > -math.inf else 0.0)
            )
            total += n * max(0.0, (top + math.log(s)) / (a - 1))
        rdp.append(total)
    return rdp_to_dp(rdp, DEFAULT_ORDERS, delta)[0]


def _groups_epsilon(groups: dict[tuple[float, int], int], delta: float) -> float:
    """A valid upper bound on the epsilon of k-RR groups ``{(eps, k): n}`` composed.

    * One group: the tight value (:func:`_single_epsilon`).
    * Several: a common loss unit u (:func:`_common_unit`) and every group lifted to
      the multiple m_j u >= eps_j (k-RR at eps_j is post-processing of k-RR at a
      larger epsilon with the same k, so this only loosens; the slot alphabets'
      realised epsilons differ by ~1e-5 and share u = their largest); groups with
      one (m, k) merge, and the group with the widest window is composed exactly
      with the others' distribution -- their exact convolution (:func:`_convolve`)
      when their windows are at most ``_MINOR_BUDGET`` long together, else one
      trinomial at their largest multiple and smallest k (a larger k is
      post-processing of a smaller one at the same epsilon: upper bound, looser).
    * The answer is the smallest of that, basic composition and -- when some lift
      exceeds 0.1% (no common unit) or the smaller groups were merged -- RDP
      composition and the sum of each group's tight epsilon at delta / J.
    """
    items = [(e, k, n) for (e, k), n in groups.items() if n > 0 and e > 0]
    if not items:
        return 0.0
    basic = sum(n * e for e, _k, n in items)
    if len(items) == 1:
        ((e, k, n),) = items
        return min(basic, _single_epsilon(_trinomial(n, e, k), delta))
    if max(e for e, _k, _n in items) > _HUGE_EPSILON:
        return basic
    unit, multiples = _common_unit([e for e, _k, _n in items])
    lift = max(m * unit / e for (e, _k, _n), m in zip(items, multiples, strict=True)) - 1.0
    by_key: dict[tuple[int, int], int] = {}
    for (_e, k, n), m in zip(items, multiples, strict=True):
        by_key[(m, k)] = by_key.get((m, k), 0) + n
    trs = [(m, _trinomial(n, m * unit, k)) for (m, k), n in by_key.items()]
    lossy = False
    if len(trs) == 1:
        lifted = min(basic, _single_epsilon(trs[0][1], delta))
    else:
        log_tau = math.log(max(delta * _TAIL_SHARE, _TINY))
        # the widest window on the common lattice is the major
        trs.sort(key=lambda mt: mt[0] ** 2 * mt[1].n * (mt[1].p + mt[1].q), reverse=True)
        (m_major, major), minors = trs[0], trs[1:]
        # trimmed to their true tails (the Chernoff cut is wider): shorter products
        windows = [_spread(_trim(_window(t, log_tau), delta * _TAIL_SHARE), m) for m, t in minors]
        if sum(len(w.values) for w in windows) <= _MINOR_BUDGET:
            minor = windows[0]
            for w in windows[1:]:
                convolved = _convolve(minor, w, delta * _CONVOLUTION_SHARE)
                minor = _trim(convolved, delta * _TAIL_SHARE)
        else:
            lossy = True
            m_top = max(m for m, _t in minors)
            merged = _trinomial(
                sum(t.n for _m, t in minors), m_top * unit, min(t.k for _m, t in minors)
            )
            minor = _spread(_trim(_window(merged, log_tau), delta * _TAIL_SHARE), m_top)
        win = _spread(_window(major, log_tau), m_major)
        lifted = _convolved_epsilon(win, unit, minor, delta, basic)
    bounds = [lifted, basic]
    if lossy or lift > _SPREAD:
        bounds.append(_groups_rdp_epsilon(items, delta))
        share = delta / len(items)
        bounds.append(sum(_single_epsilon(_trinomial(n, e, k), share) for e, k, n in items))
    return min(bounds)


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


def _reference_loss_distribution(n: int, epsilon: float, k: int) -> tuple[dict[int, float], float]:
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


def _reference_hockey_stick(dist: Sequence[tuple[int, float]], unit: float, eps: float) -> float:
    result = 0.0
    for d, prob in dist:
        loss = d * unit
        if loss <= eps:
            break
        result += prob * -math.expm1(eps - loss)
    return result


def _reference_krr_composed_delta(n: int, epsilon: float, target_epsilon: float, k: int) -> float:
    """The former :func:`krr_composed_delta` (reference)."""
    if n == 0:
        return 0.0
    dist, tail = _reference_loss_distribution(n, float(epsilon), k)
    ordered = sorted(dist.items(), reverse=True)
    return min(1.0, _reference_hockey_stick(ordered, float(epsilon), target_epsilon) + tail)


def _reference_krr_composed_epsilon(n: int, epsilon: float, delta: float, k: int) -> float:
    """The former :func:`krr_composed_epsilon` (reference): bisection on the old distribution."""
    eps_step = float(epsilon)
    basic = n * eps_step
    if n == 0 or eps_step == 0.0:
        return 0.0
    dist, tail = _reference_loss_distribution(n, eps_step, k)
    if tail >= delta:
        return basic
    ordered = sorted(dist.items(), reverse=True)

    def delta_at(e: float) -> float:
        return _reference_hockey_stick(ordered, eps_step, e) + tail

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


# ------------------------------------------------------------ events, ledger, accountants


@dataclass(frozen=True, slots=True)
class GaussianEvent:
    """One Gaussian mechanism: noise ``sigma`` on a query of L2 ``sensitivity``."""

    sigma: float
    sensitivity: float

    def __post_init__(self) -> None:
        _positive(self.sigma, "sigma")
        _positive(self.sensitivity, "sensitivity")
        if self.sigma**2 == 0.0:  # a subnormal sigma: its square underflows, the RDP divides by 0
            raise InvalidParameterError(
                f"sigma must be at least 1e-150 (its square underflows to 0); got {self.sigma!r}"
            )

    def rdp(self, order: float) -> float:
        return order * self.sensitivity**2 / (2.0 * self.sigma**2)

    @property
    def pure_epsilon(self) -> float:
        return math.inf  # the Gaussian mechanism is never pure epsilon-DP


@dataclass(frozen=True, slots=True)
class KRREvent:
    """``count`` characters perturbed by k-RR with ``epsilon`` each."""

    epsilon: float
    count: int = 1
    k: int = KRR_K

    def __post_init__(self) -> None:
        _krr_params(self.epsilon, self.k)
        _count(self.count)

    def rdp(self, order: float) -> float:
        return self.count * krr_rdp(self.epsilon, order, self.k)

    @property
    def pure_epsilon(self) -> float:
        return self.count * float(self.epsilon)


@dataclass(frozen=True, slots=True)
class PureDpEvent:
    """A mechanism that is ``epsilon``-DP (pure), e.g. one discrete Laplace release.

    Its RDP at order ``a`` is at most ``min(epsilon, a * epsilon^2 / 2)``: pure
    epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun and Steinke 2016, Prop. 1.4), and
    a Rényi divergence never exceeds the max divergence.
    """

    epsilon: float

    def __post_init__(self) -> None:
        check_positive(self.epsilon, "epsilon", allow_zero=True)

    def rdp(self, order: float) -> float:
        eps = float(self.epsilon)
        return min(eps, order * eps * eps / 2.0)

    @property
    def pure_epsilon(self) -> float:
        return float(self.epsilon)


Event = GaussianEvent | KRREvent | PureDpEvent
_EVENT_TYPES = (GaussianEvent, KRREvent, PureDpEvent)


def _check_event(event: object) -> Event:
    if not isinstance(event, _EVENT_TYPES):
        raise InvalidParameterError(f"not a privacy event: {event!r}")
    return event


def event_to_dict(event: Event) -> dict[str, object]:
    if isinstance(event, GaussianEvent):
        return {"type": "gaussian", "sigma": event.sigma, "sensitivity": event.sensitivity}
    if isinstance(event, KRREvent):
        return {"type": "krr", "epsilon": event.epsilon, "count": event.count, "k": event.k}
    return {"type": "pure", "epsilon": event.epsilon}


def event_from_dict(raw: object) -> Event:
    """The event saved by :func:`event_to_dict`; ``StateError`` if it is not one."""
    try:
        assert isinstance(raw, dict)
        kind = raw["type"]
        if kind == "gaussian":
            return GaussianEvent(raw["sigma"], raw["sensitivity"])
        if kind == "krr":
            return KRREvent(raw["epsilon"], raw["count"], raw["k"])
        if kind == "pure":
            return PureDpEvent(raw["epsilon"])
        raise ValueError(f"unknown event type {kind!r}")
    except (AssertionError, KeyError, TypeError, ValueError) as exc:
        raise StateError(f"privacy event is corrupted or from another version: {exc}") from exc


class Accountant:
    """Composes privacy events into one ``(epsilon, delta)`` figure.

    The interface of dp-accounting's ``PrivacyAccountant``: :meth:`compose` an
    event (``count`` times), then ask :meth:`get_epsilon` at a ``delta``.
    Accountants hold no events of their own beyond what they need to compute:
    events live in a :class:`Ledger`, which any accountant can replay.
    :meth:`compose` validates before it mutates.
    """

    name = "accountant"

    def compose(self, event: Event, count: int = 1) -> Accountant:
        raise NotImplementedError

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float | None]:
        raise NotImplementedError

    def get_epsilon(self, delta: float) -> float:
        return self.get_epsilon_and_order(delta)[0]

    def compose_all(self, events: Iterable[Event]) -> Accountant:
        for event in events:
            self.compose(event)
        return self


class BasicAccountant(Accountant):
    """Basic composition of pure epsilon-DP events: the epsilons add up (delta = 0).

    A Gaussian event has no pure epsilon: composing one makes the total infinite.
    """

    name = "basic"

    def __init__(self) -> None:
        self.epsilon = 0.0

    def compose(self, event: Event, count: int = 1) -> BasicAccountant:
        _check_event(event)
        times = _count(count)
        self.epsilon += times * event.pure_epsilon if times else 0.0
        return self

    def get_epsilon_and_order(self, delta: float = 0.0) -> tuple[float, float | None]:
        return self.epsilon, None


class RdpAccountant(Accountant):
    """Rényi-DP composition over a grid of orders; Balle et al.'s conversion to (eps, delta)."""

    name = "rdp"

    def __init__(self, orders: Iterable[float] = DEFAULT_ORDERS) -> None:
        self.orders = _orders(orders)
        self._rdp = [0.0] * len(self.orders)
        self.empty = True

    def compose(self, event: Event, count: int = 1) -> RdpAccountant:
        _check_event(event)
        times = _count(count)
        if times:
            step = [event.rdp(a) for a in self.orders]
            self._rdp = [r + times * s for r, s in zip(self._rdp, step, strict=True)]
            self.empty = False
        return self

    def rdp(self) -> list[float]:
        return list(self._rdp)

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float | None]:
        _delta(delta)
        if self.empty:
            return 0.0, self.orders[0]
        return rdp_to_dp(self._rdp, self.orders, delta)


class KrrPldAccountant(Accountant):
    """The tight (eps, delta) of k-RR characters, from the exact privacy-loss distribution.

    Exact (up to a pessimistic tail and rounding) when every composed event has
    the same (epsilon, k) -- one prompt, or prompts sent at one epsilon.  Several
    (epsilon, k) groups (a prompt mixing scripts, sites at different epsilons):
    a valid upper bound, the exact composition of the groups lifted to their
    largest epsilon when the smaller groups are cheap to convolve, and never
    above basic composition (see ``_groups_epsilon``).  Composes k-RR events only.
    """

    name = "krr-pld"

    def __init__(self) -> None:
        self.counts: dict[tuple[float, int], int] = {}

    def compose(self, event: Event, count: int = 1) -> KrrPldAccountant:
        if not isinstance(event, KRREvent):
            raise InvalidParameterError(
                f"the k-RR accountant composes k-RR events only; got {type(event).__name__}"
            )
        times = _count(count)
        key = (float(event.epsilon), event.k)
        if times and event.count:
            self.counts[key] = self.counts.get(key, 0) + times * event.count
        return self

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float | None]:
        d = _delta(delta)
        if not self.counts:
            return 0.0, None
        if len(self.counts) == 1:
            ((eps, k), n) = next(iter(self.counts.items()))
            return krr_composed_epsilon(n, eps, d, k), None
        return _groups_epsilon(self.counts, d), None


ACCOUNTANTS: dict[str, type[Accountant]] = {
    BasicAccountant.name: BasicAccountant,
    RdpAccountant.name: RdpAccountant,
    KrrPldAccountant.name: KrrPldAccountant,
}


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One recorded event: what it was, how many times, and free-form labels (site, document)."""

    event: Event
    count: int = 1
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check_event(self.event)
        _count(self.count)


@dataclass(slots=True)
class Ledger:
    """Privacy events kept apart from the accountants that compose them.

    Holds many events across prompts and answers; :meth:`epsilon` replays them
    (optionally only those carrying a label, e.g. one site or one document)
    through any accountant.  Saved with :meth:`to_dict` and restored with
    :meth:`from_dict`, which refuses a corrupted state rather than starting over.
    """

    entries: list[LedgerEntry] = field(default_factory=list)

    def record(self, event: Event, count: int = 1, **labels: str) -> LedgerEntry:
        entry = LedgerEntry(event, count, tuple(sorted((k, str(v)) for k, v in labels.items())))
        self.entries.append(entry)
        return entry

    def select(self, **labels: str) -> list[LedgerEntry]:
        wanted = {(k, str(v)) for k, v in labels.items()}
        return [e for e in self.entries if wanted <= set(e.labels)]

    def accountant(self, kind: str | Accountant = "rdp", **labels: str) -> Accountant:
        if isinstance(kind, Accountant):
            acc = kind
        else:
            if kind not in ACCOUNTANTS:
                raise InvalidParameterError(
                    f"unknown accountant {kind!r}; choose one of {', '.join(ACCOUNTANTS)}"
                )
            acc = ACCOUNTANTS[kind]()
        for entry in self.select(**labels):
            acc.compose(entry.event, entry.count)
        return acc

    def epsilon(self, delta: float, kind: str = "rdp", **labels: str) -> float:
        return self.accountant(kind, **labels).get_epsilon(delta)

    def to_dict(self) -> dict[str, object]:
        return {
            "version": 2,
            "entries": [
                {"event": event_to_dict(e.event), "count": e.count, "labels": dict(e.labels)}
                for e in self.entries
            ],
        }

    @classmethod
    def from_dict(cls, state: object) -> Ledger:
        try:
            assert isinstance(state, dict) and state.get("version") == 2
            entries = []
            for raw in state["entries"]:
                labels = raw.get("labels", {})
                assert isinstance(labels, dict)
                entries.append(
                    LedgerEntry(
                        event_from_dict(raw["event"]),
                        raw["count"],
                        tuple(sorted((str(k), str(v)) for k, v in labels.items())),
                    )
                )
        except (AssertionError, KeyError, TypeError, ValueError, InvalidParameterError) as exc:
            raise StateError(
                f"privacy ledger state is corrupted or from another version: {exc}"
            ) from exc
        return cls(entries=entries)


# ------------------------------------------------------- individual Rényi filter


def rdp_budget(epsilon: float, delta: float, order: float) -> float:
    """The largest RDP at ``order`` that :func:`rdp_to_dp` converts to at most ``epsilon``.

    Balle et al.'s conversion solved for the RDP at one fixed order:
    ``rdp = epsilon - log1p(-1/a) + log(delta * a) / (a - 1)``.  ``InvalidParameterError``
    if that is not positive (``epsilon`` is too small for ``delta`` at this order).
    """
    eps = check_positive(epsilon, "epsilon")
    d = _delta(delta)
    (a,) = _orders([order])
    if a <= 1.01:
        raise InvalidParameterError(f"the filter's order must be > 1.01; got {order!r}")
    budget = eps - math.log1p(-1.0 / a) + math.log(d * a) / (a - 1)
    if not budget > 0:
        raise InvalidParameterError(
            f"epsilon {epsilon!r} at delta {delta!r} leaves no RDP budget at order {order!r}"
        )
    return budget


def filter_order(epsilon: float, delta: float, orders: Iterable[float] = DEFAULT_ORDERS) -> float:
    """The order at which an individual filter with budget ``(epsilon, delta)`` runs.

    Chosen once from the budget alone: the order of ``orders`` that maximises
    ``rdp_budget(a) / a``.  A Gaussian mechanism's RDP is linear in the order,
    so this is the order at which the most Gaussian charges of any one size fit
    (the same order whatever the noise scale); it never depends on the data or
    on any answer.
    """
    best: tuple[float, float] | None = None
    for a in _orders(orders):
        if a <= 1.01:
            continue
        try:
            ratio = rdp_budget(epsilon, delta, a) / a
        except InvalidParameterError:
            continue
        if best is None or ratio > best[0]:
            best = (ratio, a)
    if best is None:
        raise InvalidParameterError(
            f"epsilon {epsilon!r} at delta {delta!r} leaves no RDP budget at any order"
        )
    return best[1]


@dataclass(slots=True)
class IndividualRdpFilter:
    """The individual Rényi filter of Feldman and Zrnic (2021) at one fixed order.

    Each individual (here: a document) has the RDP budget ``budget`` at
    ``order``, derived from ``(epsilon, delta)`` by :func:`rdp_budget`.  An
    interaction charges each individual it touches the RDP of the mechanism at
    ``order`` (:meth:`charge_of`); an individual is admitted only if its spend
    plus the charge stays within the budget, so the spend never exceeds it and
    the whole adaptive interaction is ``(order, budget)``-RDP, hence
    ``(epsilon, delta)``-DP, for every individual.  This in-memory filter is
    the reference; the companion keeps the same arithmetic in SQLite.
    """

    epsilon: float
    delta: float
    order: float = 0.0  # 0: chosen by filter_order(epsilon, delta)
    spent: dict[str, float] = field(default_factory=dict)
    budget: float = field(init=False)

    def __post_init__(self) -> None:
        self.epsilon = check_positive(self.epsilon, "epsilon")
        self.delta = _delta(self.delta)
        if not self.order:
            self.order = filter_order(self.epsilon, self.delta)
        self.budget = rdp_budget(self.epsilon, self.delta, self.order)

    def charge_of(self, events: Iterable[Event]) -> float:
        """The RDP at the filter's order of the composed ``events`` (one interaction)."""
        return sum(_check_event(e).rdp(self.order) for e in events)

    def admits(self, spent: float, charge: float) -> bool:
        """Whether an individual that has spent ``spent`` may pay ``charge`` more."""
        return spent + charge <= self.budget

    def remaining(self, spent: float) -> float:
        return max(0.0, self.budget - spent)

    def epsilon_of(self, spent: float) -> float:
        """The ``(epsilon at delta)`` an individual's spend amounts to, at the filter's order."""
        if spent <= 0:
            return 0.0
        return rdp_to_dp([spent], [self.order], self.delta)[0]

    def gaussian_epsilon_of(self, spent: float, orders: Iterable[float] = DEFAULT_ORDERS) -> float:
        """The tightest ``(epsilon at delta)`` of a spend made of Gaussian charges only.

        A Gaussian mechanism's RDP is linear in the order, so a spend of ``spent``
        at the filter's order is ``spent * a / order`` at any order ``a``; the
        conversion is then minimised over ``orders``.  (The filter's guarantee is
        the one at its own order; this is the figure to show for a partial spend,
        which at the fixed order would carry the whole ``log(1/delta)/(order-1)``.)
        """
        if spent <= 0:
            return 0.0
        alphas = _orders(orders)
        return rdp_to_dp([spent * a / self.order for a in alphas], alphas, self.delta)[0]

    def charge(self, keys: Iterable[str], events: Iterable[Event]) -> float:
        """Charge every key the RDP of ``events``; all or none (``InsufficientBudgetError``)."""
        from py_core.errors import InsufficientBudgetError

        amount = self.charge_of(events)
        wanted = sorted(set(keys))
        for key in wanted:
            spent = self.spent.get(key, 0.0)
            if not self.admits(spent, amount):
                raise InsufficientBudgetError(
                    f"{key!r} has {self.remaining(spent):.6g} of its RDP budget left at order "
                    f"{self.order:g}; this interaction needs {amount:.6g}",
                    remaining=self.remaining(spent),
                    requested=amount,
                )
        for key in wanted:
            self.spent[key] = self.spent.get(key, 0.0) + amount
        return amount
