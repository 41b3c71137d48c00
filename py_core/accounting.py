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

Events are kept apart from accountants: :class:`GaussianEvent` and
:class:`KRREvent` are frozen records; :class:`RdpLedger` composes them, can be
saved with :meth:`RdpLedger.to_dict` and restored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from py_core.errors import InvalidParameterError, StateError

__all__ = [
    "DEFAULT_ORDERS",
    "GaussianEvent",
    "KRREvent",
    "RdpLedger",
    "gaussian_rdp",
    "gaussian_rdp_epsilon",
    "krr_composed_delta",
    "krr_composed_epsilon",
    "krr_rdp",
    "krr_rdp_epsilon",
    "rdp_to_dp",
]

# The same grid as dp-accounting's RdpAccountant default.
DEFAULT_ORDERS: tuple[float, ...] = (
    tuple(1 + x / 10.0 for x in range(1, 100))
    + tuple(float(x) for x in range(11, 64))
    + (128.0, 256.0, 512.0, 1024.0)
)


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidParameterError(f"{name} must be a number > 0; got {value!r}")
    if not math.isfinite(value):
        raise InvalidParameterError(f"{name} must be finite; got {value!r}")
    return float(value)


def _delta(delta: object) -> float:
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 < delta < 1:
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta!r}")
    return float(delta)


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


def krr_rdp(epsilon: float, order: float, k: int = 94) -> float:
    """RDP at ``order`` of one k-RR step for two distinct inputs (the worst pair)."""
    log_p, log_q, log_r = _krr_params(epsilon, k)
    a = order
    terms = [a * log_p + (1 - a) * log_q, a * log_q + (1 - a) * log_p]
    if log_r > -math.inf:
        terms.append(log_r)
    return max(0.0, _logsumexp(terms) / (a - 1))


def krr_rdp_epsilon(
    n: int, epsilon: float, delta: float, k: int = 94, orders: Iterable[float] = DEFAULT_ORDERS
) -> tuple[float, float]:
    """``(eps, best_order)`` of ``n``-fold k-RR by RDP composition."""
    count = _count(n)
    alphas = _orders(orders)
    if count == 0:
        return 0.0, alphas[0]
    return rdp_to_dp([count * krr_rdp(epsilon, a, k) for a in alphas], alphas, delta)


def _count(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidParameterError(f"n must be an integer >= 0; got {n!r}")
    return n


def _loss_distribution(n: int, epsilon: float, k: int) -> tuple[dict[int, float], float]:
    """Distribution of D = A - B for n-fold k-RR, and the probability mass left out.

    Per step the privacy loss is +eps (output = the true input, prob p), -eps
    (output = the neighbour's input, prob q) or 0 (prob (k-2) q); the total loss
    is eps * D.  A ~ Bin(n, p) and B | A=a ~ Bin(n - a, q / (1 - p)); each is
    summed over its mean +/- 12 standard deviations (+12), and the mass outside
    that window is returned so callers can add it to delta (pessimistic).
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


def _hockey_stick(dist: Sequence[tuple[int, float]], loss_unit: float, eps: float) -> float:
    """delta(eps) = E[(1 - e^(eps - L))_+] over the loss distribution (sorted by d desc)."""
    result = 0.0
    for d, prob in dist:
        loss = d * loss_unit
        if loss <= eps:
            break
        result += prob * -math.expm1(eps - loss)
    return result


def krr_composed_delta(n: int, epsilon: float, target_epsilon: float, k: int = 94) -> float:
    """The exact (up to a pessimistic tail) delta of n-fold k-RR at ``target_epsilon``."""
    count = _count(n)
    if count == 0:
        return 0.0
    dist, tail = _loss_distribution(count, float(epsilon), k)
    ordered = sorted(dist.items(), reverse=True)
    return min(1.0, _hockey_stick(ordered, float(epsilon), target_epsilon) + tail)


def krr_composed_epsilon(n: int, epsilon: float, delta: float, k: int = 94) -> float:
    """Tight ``eps`` of ``n``-fold k-RR (``epsilon`` per step) at ``delta``.

    Computed from the exact privacy-loss distribution (REPLACE_ONE: each of the
    ``n`` positions may hold a different character), then rounded up by a
    bisection that stops on the safe side.  Never exceeds basic composition
    ``n * epsilon``.
    """
    count = _count(n)
    d = _delta(delta)
    eps_step = float(epsilon)
    _krr_params(eps_step, k)
    basic = count * eps_step
    if count == 0 or eps_step == 0.0:
        return 0.0
    dist, tail = _loss_distribution(count, eps_step, k)
    if tail >= d:
        return basic
    ordered = sorted(dist.items(), reverse=True)

    def delta_at(e: float) -> float:
        return _hockey_stick(ordered, eps_step, e) + tail

    if delta_at(0.0) <= d:
        return 0.0
    lo, hi = 0.0, basic
    for _ in range(100):
        mid = (lo + hi) / 2
        if delta_at(mid) <= d:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-9 * max(1.0, hi):
            break
    return hi


# ----------------------------------------------------------------- events+ledger


@dataclass(frozen=True, slots=True)
class GaussianEvent:
    """One Gaussian mechanism: noise ``sigma`` on a query of L2 ``sensitivity``."""

    sigma: float
    sensitivity: float

    def __post_init__(self) -> None:
        _positive(self.sigma, "sigma")
        _positive(self.sensitivity, "sensitivity")

    def rdp(self, order: float) -> float:
        return order * self.sensitivity**2 / (2.0 * self.sigma**2)


@dataclass(frozen=True, slots=True)
class KRREvent:
    """``count`` characters perturbed by k-RR with ``epsilon`` each."""

    epsilon: float
    count: int = 1
    k: int = 94

    def __post_init__(self) -> None:
        _krr_params(self.epsilon, self.k)
        _count(self.count)

    def rdp(self, order: float) -> float:
        return self.count * krr_rdp(self.epsilon, order, self.k)


Event = GaussianEvent | KRREvent


@dataclass(slots=True)
class RdpLedger:
    """Composes events by RDP; validates before it mutates; saves to and loads from dicts."""

    orders: tuple[float, ...] = DEFAULT_ORDERS
    events: list[Event] = field(default_factory=list)

    def compose(self, event: Event) -> None:
        if not isinstance(event, GaussianEvent | KRREvent):
            raise InvalidParameterError(f"not a privacy event: {event!r}")
        self.events.append(event)

    def rdp(self) -> list[float]:
        return [sum(e.rdp(a) for e in self.events) for a in self.orders]

    def epsilon(self, delta: float) -> float:
        if not self.events:
            return 0.0
        return rdp_to_dp(self.rdp(), self.orders, delta)[0]

    def to_dict(self) -> dict[str, object]:
        events: list[dict[str, object]] = []
        for e in self.events:
            if isinstance(e, GaussianEvent):
                events.append({"type": "gaussian", "sigma": e.sigma, "sensitivity": e.sensitivity})
            else:
                events.append({"type": "krr", "epsilon": e.epsilon, "count": e.count, "k": e.k})
        return {"version": 1, "orders": list(self.orders), "events": events}

    @classmethod
    def from_dict(cls, state: object) -> RdpLedger:
        try:
            assert isinstance(state, dict) and state.get("version") == 1
            orders = _orders(state["orders"])
            events: list[Event] = []
            for raw in state["events"]:
                if raw["type"] == "gaussian":
                    events.append(GaussianEvent(raw["sigma"], raw["sensitivity"]))
                elif raw["type"] == "krr":
                    events.append(KRREvent(raw["epsilon"], raw["count"], raw["k"]))
                else:
                    raise ValueError(f"unknown event type {raw['type']!r}")
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise StateError(
                f"privacy ledger state is corrupted or from another version: {exc}"
            ) from exc
        return cls(orders=orders, events=events)
