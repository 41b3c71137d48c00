"""Several k-RR groups (different epsilons or alphabets) composed: a valid, tight-ish bound.

The groups are lifted to a common loss unit and the widest is composed exactly
with the others' distribution (:func:`_groups_epsilon`); the one-group numerics
are :mod:`py_core.accounting.pld.krr_pld`.
"""

from __future__ import annotations

import array
import math
import operator
import sys
from collections.abc import Callable, Sequence

from py_core.accounting.common import DEFAULT_ORDERS, _krr_params
from py_core.accounting.pld.krr_pld import (
    _HUGE_EPSILON,
    _TAIL_SHARE,
    _TINY,
    _ULP,
    _round_up,
    _single_epsilon,
    _trinomial,
    _Window,
    _window,
)
from py_core.accounting.rdp.conversions import rdp_to_dp

_CONVOLUTION_SHARE = 1e-8  # the mass an exact convolution's flooring may lose, as a share of delta
_MINOR_BUDGET = 3_000  # the smaller groups' window lengths (summed) convolved exactly
_SPREAD = 1e-3  # the largest lift to a common loss unit (relative); above it: also the split bound
_MAX_MULTIPLE = 12  # the largest epsilon is split into at most this many loss units


def _dot_fallback(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(map(operator.mul, a, b))


# math.sumprod: Python >= 3.12 (Pyodide), in C with an extended-precision sum.
_dot: Callable[[Sequence[float], Sequence[float]], float] = getattr(math, "sumprod", _dot_fallback)


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
