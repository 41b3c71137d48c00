"""The Rényi-DP accountant: RDP summed over a grid of orders, then converted."""

from __future__ import annotations

from collections.abc import Iterable

from py_core.accounting.common import DEFAULT_ORDERS, _count, _delta, _orders
from py_core.accounting.dp_event import Event, _check_event
from py_core.accounting.privacy_accountant import Accountant
from py_core.accounting.rdp.conversions import rdp_to_dp


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
