"""Privacy events: frozen records of what a mechanism did, apart from the accountants.

As google's dp-accounting keeps ``GaussianDpEvent`` and
``RandomizedResponseDpEvent`` apart from the accountants that compose them: an
event states the mechanism and its parameters (and its RDP at an order), an
accountant (:mod:`py_core.accounting.privacy_accountant`) composes events, and a
:class:`py_core.accounting.ledger.Ledger` keeps them with labels and saves them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from py_core.accounting.common import _count, _krr_params, _positive
from py_core.accounting.rdp.conversions import krr_rdp
from py_core.errors import InvalidParameterError, StateError
from py_core.krr import K as KRR_K
from py_core.validate import check_positive


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


@dataclass(frozen=True, slots=True)
class SampledGaussianEvent:
    """A Gaussian mechanism run on a Poisson subsample: each record kept with ``rate``.

    RDP for add/remove of one record (Mironov, Talwar and Zhang 2019, "Rényi
    differential privacy of the sampled Gaussian mechanism", integer orders): with
    ``s = sigma / sensitivity``, ``A_a = sum_k C(a, k) (1 - q)^(a - k) q^k
    exp((k^2 - k) / (2 s^2))`` and ``rdp(a) = log(A_a) / (a - 1)``.  At a fractional
    order the next integer's value is returned: RDP does not decrease with the order, so
    that is an upper bound (dp-accounting's ``PoissonSampledDpEvent`` gives the exact
    fractional value; the tests compare both).
    """

    sigma: float
    sensitivity: float
    rate: float

    def __post_init__(self) -> None:
        _positive(self.sigma, "sigma")
        _positive(self.sensitivity, "sensitivity")
        if not 0.0 < float(self.rate) <= 1.0:
            raise InvalidParameterError(f"the sampling rate must be in (0, 1]; got {self.rate!r}")

    def rdp(self, order: float) -> float:
        if order <= 1.0:
            raise InvalidParameterError(f"RDP orders must be > 1; got {order!r}")
        q = float(self.rate)
        s2 = (self.sigma / self.sensitivity) ** 2
        if q >= 1.0:
            return order / (2.0 * s2)
        a = math.ceil(order)
        if a == 1:  # an order in (1, 1] cannot occur; kept for the integer arithmetic
            a = 2
        terms = [
            math.lgamma(a + 1)
            - math.lgamma(k + 1)
            - math.lgamma(a - k + 1)
            + (a - k) * math.log1p(-q)
            + k * math.log(q)
            + (k * k - k) / (2.0 * s2)
            for k in range(a + 1)
        ]
        top = max(terms)
        log_a = top + math.log(sum(math.exp(t - top) for t in terms))
        return max(0.0, log_a / (a - 1))

    @property
    def pure_epsilon(self) -> float:
        return math.inf


Event = GaussianEvent | KRREvent | PureDpEvent | SampledGaussianEvent
_EVENT_TYPES = (GaussianEvent, KRREvent, PureDpEvent, SampledGaussianEvent)


def _check_event(event: object) -> Event:
    if not isinstance(event, _EVENT_TYPES):
        raise InvalidParameterError(f"not a privacy event: {event!r}")
    return event


def event_to_dict(event: Event) -> dict[str, object]:
    if isinstance(event, GaussianEvent):
        return {"type": "gaussian", "sigma": event.sigma, "sensitivity": event.sensitivity}
    if isinstance(event, SampledGaussianEvent):
        return {
            "type": "sampled_gaussian",
            "sigma": event.sigma,
            "sensitivity": event.sensitivity,
            "rate": event.rate,
        }
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
        if kind == "sampled_gaussian":
            return SampledGaussianEvent(raw["sigma"], raw["sensitivity"], raw["rate"])
        if kind == "krr":
            return KRREvent(raw["epsilon"], raw["count"], raw["k"])
        if kind == "pure":
            return PureDpEvent(raw["epsilon"])
        raise ValueError(f"unknown event type {kind!r}")
    except (AssertionError, KeyError, TypeError, ValueError) as exc:
        raise StateError(f"privacy event is corrupted or from another version: {exc}") from exc
