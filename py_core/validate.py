"""Parameter validators shared by every mechanism: the bad value is always in the message.

One place for the checks the core, the decoding defenses and the accountants
all make (a finite number > 0, a count, a delta in (0, 1)), so their messages
and edge cases cannot drift apart.
"""

from __future__ import annotations

import math

from py_core.errors import InvalidParameterError

__all__ = ["check_count", "check_delta", "check_positive"]


def check_positive(value: object, name: str, *, allow_zero: bool = False) -> float:
    """``value`` as a float if it is a finite number > 0 (or >= 0 with ``allow_zero``)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):  # type: ignore[operator]
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidParameterError(f"{name} must be a finite number {bound}; got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check_count(value: object, name: str, *, minimum: int = 0) -> int:
    """``value`` if it is an integer >= ``minimum`` (booleans are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return value


def check_delta(delta: object) -> float:
    """``delta`` as a float if it is in (0, 1)."""
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 < delta < 1:
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta!r}")
    return float(delta)
