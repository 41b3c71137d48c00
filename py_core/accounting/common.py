"""What every accountant shares: the default delta and orders, validation, k-RR's logs."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from py_core.errors import InvalidParameterError
from py_core.validate import check_count, check_delta, check_positive

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


def _count(n: object) -> int:
    return check_count(n, "n")
