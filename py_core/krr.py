"""Character-level k-ary randomized response (k-RR) over printable ASCII.

Each character ``c`` of the 94-character alphabet (codes 33..126) is kept with
probability ``p = e^eps / (e^eps + k - 1)`` and otherwise replaced by one of the
other ``k - 1`` characters, each with probability ``q = 1 / (e^eps + k - 1)``:
``eps``-local differential privacy per character.  The six ASCII whitespace
characters (:data:`WHITESPACE`: space, tab, newline, carriage return, vertical
tab, form feed) are not in the alphabet and are kept, so word lengths and
boundaries stay visible.  Every other character outside the alphabet (``é``,
``한``, an emoji, a control character, and the other Unicode spaces such as
U+00A0 or U+3000) never passes through: it becomes a uniformly random alphabet character, which satisfies any
``eps >= 0`` because ``q <= 1/k <= p``.

Implementation.  k-RR is equivalent to adding a random shift ``s`` modulo ``k``
to the character's index, with ``P(s = 0) = p`` and ``P(s = j) = q`` for
``j = 1..k-1``.  The shifts are drawn in bulk from random bytes: a 16-bit draw
is looked up in a table holding ``a`` zeros and ``b`` copies of each other
shift (``a + (k-1)·b <= 2^16``; draws beyond that are rejected and redrawn), so
the implemented probabilities are exactly ``a/M`` and ``b/M`` with
``M = a + (k-1)·b``.  ``a/b`` is chosen as the largest ratio not above ``e^eps``,
so the mechanism is never less private than requested, and every epsilon this
module reports is ``ln(a/b)`` -- the one actually implemented -- rounded up.
Requests above ``ln(2^16 - 93) ≈ 11.09`` are implemented at that ceiling.
"""

from __future__ import annotations

import math
import random
import re
from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from py_core.errors import InvalidParameterError

__all__ = [
    "ALPHABET",
    "MAX_IMPLEMENTED_EPSILON",
    "WHITESPACE",
    "WORD",
    "Implementation",
    "K",
    "RandomSource",
    "epsilon_for_keep_probability",
    "implementation",
    "implemented_epsilon",
    "keep_probability",
    "max_implemented_epsilon",
    "perturb",
    "validate_epsilon",
    "word_survival_probability",
]

ALPHABET = "".join(chr(code) for code in range(33, 127))
K = len(ALPHABET)  # 94

#: The only characters k-RR passes unchanged (every other one is perturbed).
WHITESPACE = " \t\n\r\x0b\x0c"
#: A word: a maximal run of characters that are not :data:`WHITESPACE` (``\\S`` would also
#: split at U+00A0, U+3000 and the other Unicode spaces, which k-RR perturbs).
WORD = re.compile(r"[^ \t\n\r\x0b\x0c]+")

_RESOLUTION = 1 << 16
_REJECT = 255
# Lane values 0..93 are alphabet indices; sums of index and shift stay <= 186.
# Lanes 190.. carry ASCII whitespace through unchanged.
_WS_LANES = {" ": 190, "\t": 191, "\n": 192, "\r": 193, "\x0b": 194, "\x0c": 195}
# Characters outside the alphabet that are not whitespace; they are replaced by a
# uniform alphabet character in a second pass.
_OUTSIDE = re.compile(r"[^\x21-\x7e \t\n\r\x0b\x0c]")


class RandomSource(Protocol):
    """What k-RR needs from an RNG: ``random.Random`` and ``SystemRandom`` qualify."""

    def randbytes(self, n: int, /) -> bytes: ...


def validate_epsilon(epsilon: object, *, name: str = "epsilon") -> float:
    """Return ``epsilon`` as a float, or raise if it is not a finite number >= 0."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise InvalidParameterError(
            f"{name} must be a finite number >= 0; got {epsilon!r} ({type(epsilon).__name__})"
        )
    value = float(epsilon)
    if not math.isfinite(value) or value < 0:
        raise InvalidParameterError(f"{name} must be a finite number >= 0; got {epsilon!r}")
    return value


def _validate_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise InvalidParameterError(f"k must be an integer >= 2; got {k!r}")
    return k


def keep_probability(epsilon: float, k: int = K) -> float:
    """The ideal keep probability ``e^eps / (e^eps + k - 1)`` of k-RR."""
    eps = validate_epsilon(epsilon)
    k = _validate_k(k)
    # Written as 1 / (1 + (k-1) e^-eps) so large eps does not overflow.
    return 1.0 / (1.0 + (k - 1) * math.exp(-eps))


def epsilon_for_keep_probability(p: float, k: int = K) -> float:
    """The epsilon at which k-RR keeps a character with probability ``p``."""
    k = _validate_k(k)
    if not (isinstance(p, int | float) and 1.0 / k <= p < 1.0):
        raise InvalidParameterError(
            f"keep probability must be in [1/k, 1) = [{1 / k}, 1); got {p!r}"
        )
    return math.log(p * (k - 1) / (1.0 - p))


def word_survival_probability(length: int, epsilon: float, k: int = K) -> float:
    """``p^length``: chance that no character of a word changes (Pr[T0], docs/methods/krr.md)."""
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise InvalidParameterError(f"length must be an integer >= 0; got {length!r}")
    return keep_probability(epsilon, k) ** length


@dataclass(frozen=True, slots=True)
class Implementation:
    """The exact probabilities a request for ``requested`` epsilon is implemented with."""

    requested: float
    keep_weight: int  # a: table entries that keep the character
    other_weight: int  # b: table entries for each of the k-1 other characters
    k: int = K  # the alphabet's size (94 for printable ASCII; py_core.alphabets has others)

    @property
    def total(self) -> int:
        return self.keep_weight + (self.k - 1) * self.other_weight

    @property
    def keep_probability(self) -> float:
        return self.keep_weight / self.total

    @property
    def replace_probability(self) -> float:
        """Probability of each single other character (q)."""
        return self.other_weight / self.total

    @property
    def epsilon(self) -> float:
        """``ln(a/b)``, the epsilon actually implemented, rounded up."""
        return _log_ratio_up(self.keep_weight, self.other_weight)


def _log_ratio_up(a: int, b: int) -> float:
    """``ln(a / b)`` for integers ``a >= b >= 1``, never below the exact value.

    ``log1p((a - b) / b)``: ``a - b`` is exact, the division is within half an ulp
    (relative), which moves ``log1p`` by at most that share of its value since
    ``y / (1 + y) <= log1p(y)``, and ``log1p`` itself is within one ulp.  The
    error is therefore relative, at most three ulps: four steps up cover it.
    (``log(a / b)`` was not: the division's half ulp of ``a / b`` becomes an
    *absolute* 1.1e-16 on the logarithm, several ulps of a small epsilon.)
    """
    if a <= b:
        return 0.0
    x = math.log1p((a - b) / b)
    for _ in range(4):
        x = math.nextafter(x, math.inf)
    return x


MAX_IMPLEMENTED_EPSILON = _log_ratio_up(_RESOLUTION - (K - 1), 1)


def max_implemented_epsilon(k: int = K) -> float:
    """The largest epsilon implementable for an alphabet of ``k``: ``ln(2^16 - (k-1))``."""
    k = _validate_k(k)
    return _log_ratio_up(_RESOLUTION - (k - 1), 1)


@lru_cache(maxsize=256)
def implementation(epsilon: float, k: int = K) -> Implementation:
    """Integer weights ``a, b`` with ``a/b <= e^eps`` and ``a + (k-1) b <= 2^16``, maximal.

    ``k`` is the alphabet's size: 94 (printable ASCII) unless given; the other
    alphabets of :mod:`py_core.alphabets` (Hangul's jamo slots, Cyrillic, Greek,
    the Latin marks) are implemented on the same 16-bit grid.
    """
    eps = validate_epsilon(epsilon)
    k = _validate_k(k)
    if k - 1 >= _RESOLUTION // 2:
        raise InvalidParameterError(f"k must be below {_RESOLUTION // 2}; got {k!r}")
    ratio = math.exp(min(eps, 50.0))
    b = max(1, int(_RESOLUTION // (ratio + k - 1)))
    a = min(math.floor(b * ratio), _RESOLUTION - (k - 1) * b)
    # floor(b * e^eps) in floating point could round up across an integer; step down.
    while a > b and math.log(a / b) > eps:
        a -= 1
    return Implementation(requested=eps, keep_weight=max(a, b), other_weight=b, k=k)


def implemented_epsilon(epsilon: float, k: int = K) -> float:
    """The epsilon per character that :func:`perturb` really satisfies for a request."""
    return implementation(epsilon, k).epsilon


@lru_cache(maxsize=64)
def _shift_table(keep_weight: int, other_weight: int) -> bytes:
    table = bytearray([0]) * keep_weight
    for shift in range(1, K):
        table += bytes([shift]) * other_weight
    table += bytes([_REJECT]) * (_RESOLUTION - len(table))
    return bytes(table)


def _lane_tables() -> tuple[bytes, bytes, bytes]:
    to_lane = bytearray(range(256))
    for code in range(256):
        to_lane[code] = code - 33 if 33 <= code <= 126 else 0
    for char, lane in _WS_LANES.items():
        to_lane[ord(char)] = lane
    # Whitespace lanes get a zero shift; everything else keeps its shift.
    mask = bytes(0 if lane >= 190 else 0xFF for lane in range(256))
    from_lane = bytearray(256)
    for lane in range(256):
        from_lane[lane] = ord(ALPHABET[lane % K]) if lane < 190 else ord("?")
    for char, lane in _WS_LANES.items():
        from_lane[lane] = ord(char)
    return bytes(to_lane), mask, bytes(from_lane)


_TO_LANE, _MASK, _FROM_LANE = _lane_tables()
_UNIFORM_TABLE = bytes(v % K if v < 2 * K else _REJECT for v in range(256))


def _random_bytes(rng: RandomSource, n: int) -> bytes:
    return rng.randbytes(n) if n else b""


def _draw_shifts(rng: RandomSource, n: int, impl: Implementation) -> bytes:
    table = _shift_table(impl.keep_weight, impl.other_weight)
    words = array("H", _random_bytes(rng, 2 * n))
    shifts = bytearray(map(table.__getitem__, words))
    _redraw_rejected(shifts, rng, lambda: table[int.from_bytes(_random_bytes(rng, 2), "little")])
    return bytes(shifts)


def _uniform_indices(rng: RandomSource, n: int) -> bytes:
    """``n`` independent uniform draws from ``0..K-1`` (rejection sampling on bytes)."""
    out = bytearray(_random_bytes(rng, n).translate(_UNIFORM_TABLE))
    _redraw_rejected(out, rng, lambda: _UNIFORM_TABLE[_random_bytes(rng, 1)[0]])
    return bytes(out)


def _redraw_rejected(buf: bytearray, rng: RandomSource, draw_one: object) -> None:
    assert callable(draw_one)
    position = buf.find(_REJECT)
    while position != -1:
        value = _REJECT
        while value == _REJECT:
            value = draw_one()
        buf[position] = value
        position = buf.find(_REJECT, position + 1)


def _default_rng() -> RandomSource:
    return random.SystemRandom()


def perturb(text: str, epsilon: float, *, rng: RandomSource | None = None) -> str:
    """Apply k-RR with ``epsilon`` per character to ``text``; whitespace is kept.

    ``rng`` defaults to a CSPRNG (:class:`random.SystemRandom`).  A seeded
    ``random.Random`` may be passed for tests and experiments; callers that
    protect real data should use :func:`py_core.sanitize.sanitize_prompt`, which
    refuses one in secure mode.  The output has exactly as many characters as
    ``text``.

    This is the "ascii" mechanism: everything outside printable ASCII becomes a
    random ASCII character.  Each character within its own script ("scripts") is
    :func:`py_core.alphabets.perturb`, which builds on this module (never the
    other way round).
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    impl = implementation(validate_epsilon(epsilon))
    source = rng if rng is not None else _default_rng()
    n = len(text)
    if n == 0:
        return ""
    ascii_view = text.encode("ascii", "replace")  # one byte per code point
    lanes = ascii_view.translate(_TO_LANE)
    shifts = _draw_shifts(source, n, impl)
    masked = int.from_bytes(shifts, "little") & int.from_bytes(lanes.translate(_MASK), "little")
    summed = (int.from_bytes(lanes, "little") + masked).to_bytes(n, "little")
    result = summed.translate(_FROM_LANE).decode("ascii")
    outside = [m.start() for m in _OUTSIDE.finditer(text)]
    if not outside:
        return result
    chars = list(result)
    fresh = _uniform_indices(source, len(outside))
    for position, index in zip(outside, fresh, strict=True):
        chars[position] = ALPHABET[index]
    return "".join(chars)
