"""The individual Rényi filter (Feldman and Zrnic 2021): a lifetime budget per individual."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from py_core.accounting.common import DEFAULT_ORDERS, _delta, _orders
from py_core.accounting.dp_event import Event, _check_event
from py_core.accounting.rdp.conversions import rdp_to_dp
from py_core.errors import InsufficientBudgetError, InvalidParameterError
from py_core.validate import check_positive


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
