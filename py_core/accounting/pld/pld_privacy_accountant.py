"""The k-RR accountant: the tight ``(eps, delta)`` from the exact privacy-loss distribution."""

from __future__ import annotations

from py_core.accounting.common import _count, _delta
from py_core.accounting.dp_event import Event, KRREvent
from py_core.accounting.pld.composition import _groups_epsilon
from py_core.accounting.pld.krr_pld import krr_composed_epsilon
from py_core.accounting.privacy_accountant import Accountant
from py_core.errors import InvalidParameterError


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
