"""The accountant interface (dp-accounting's ``PrivacyAccountant``) and basic composition."""

from __future__ import annotations

from collections.abc import Iterable

from py_core.accounting.common import _count
from py_core.accounting.dp_event import Event, _check_event


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
