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

import math
from collections.abc import Iterable, Sequence
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


def krr_composed_delta(n: int, epsilon: float, target_epsilon: float, k: int = KRR_K) -> float:
    """The exact (up to a pessimistic tail) delta of n-fold k-RR at ``target_epsilon``."""
    count = _count(n)
    if count == 0:
        return 0.0
    dist, tail = _loss_distribution(count, float(epsilon), k)
    ordered = sorted(dist.items(), reverse=True)
    return min(1.0, _hockey_stick(ordered, float(epsilon), target_epsilon) + tail)


def krr_composed_epsilon(n: int, epsilon: float, delta: float, k: int = KRR_K) -> float:
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

    Exact when every composed event has the same (epsilon, k) -- one prompt, or
    prompts sent at one epsilon; otherwise the smaller of basic and RDP
    composition (both valid upper bounds).  Composes k-RR events only.
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
        basic = sum(n * eps for (eps, _k), n in self.counts.items())
        rdp = RdpAccountant()
        for (eps, k), n in self.counts.items():
            rdp.compose(KRREvent(eps, n, k))
        return min(basic, rdp.get_epsilon(d)), None


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
