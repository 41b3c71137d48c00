"""k-RR per script: each character is perturbed among characters of its own script.

:func:`py_core.krr.perturb` (``alphabets="ascii"``) is Veil's original
mechanism: the 94 printable ASCII characters form the one alphabet and every
other character becomes a uniformly random ASCII character.  Korean, Russian or
Greek text then reaches the model as noise at every epsilon.  With
``alphabets="scripts"`` (this module, the default of
:func:`py_core.sanitize.sanitize_prompt`) every character is perturbed by k-RR
*within the alphabet of its script*, and the output is always a valid character
of that script:

==================  =====================================================  ==============
script (visible)    slots, each perturbed by k-RR in its own alphabet      k per slot
==================  =====================================================  ==============
ASCII               the character                                          94
Latin + marks       NFD base letter (ASCII) and its mark (or "none")       94, 17
Hangul syllable     initial consonant, vowel, final consonant (or none)    19, 21, 28
Hangul jamo         a compatibility jamo (ㄱ, ㅏ, ...)                      51
Cyrillic            a letter of U+0400..U+045F or Ґ ґ                      98
Greek               a letter of the modern (monotonic) Greek alphabet      69
ASCII whitespace    kept (the six of krr.WHITESPACE; other spaces: below)  --
anything else       a uniformly random ASCII character (as in "ascii")     --
==================  =====================================================  ==============

Each slot is k-RR exactly as in :mod:`py_core.krr`: integer weights ``a, b``
with ``a + (k-1) b <= 2^16`` and ``a/b`` the largest ratio not above ``e^eps``
(:func:`py_core.krr.implementation` with the slot's ``k``), so every slot is
``eps_impl``-LDP with its own implemented epsilon (reported rounded up), and a
character of ``s`` slots is ``sum(eps_impl)``-LDP among the characters of its
script: a Hangul syllable costs three slots, an accented-Latin letter two.

**What becomes visible.**  Which script each character belongs to (like word
boundaries already are), and, per prompt, one bit: whether the prompt contains a
Latin letter with a diacritic.  When it does ("Latin marks" on), *every* ASCII
character carries a mark slot (``none`` for unaccented ones), so ``e`` and
``é`` are indistinguishable up to the two slots' epsilon and a mark can appear on
a letter that had none; a mark on a character that has no precomposed form with
it (``q`` + cedilla, ``7`` + acute) is dropped -- post-processing of the pair.
When it does not, ASCII text is perturbed exactly as in ``"ascii"`` mode.

**Why this Latin design.**  French, German, Spanish or Polish words differ from
their ASCII skeleton by a few marks; perturbing the base letter in the ASCII
alphabet keeps the letter statistics a restorer knows, and a mark set that
includes "none" lets ``é`` become ``è``, ``ë`` or ``e`` -- a typo a reader of the
language recognises -- instead of a random symbol.  Letters that Unicode does not
decompose get a pseudo-mark: *stroke* (ø ł đ ħ ŧ) and *variant* (æ œ ß ð þ ŋ, dotless i).
A letter whose NFD has two marks (Vietnamese ệ) is "anything else".

**Anything else** (CJK ideographs, emoji, symbols, other scripts): measured in
``veil eval scripts`` (docs/scripts/report.md): as one k-RR alphabet (k = 20,992) a
CJK ideograph would be kept with probability 1.9% at epsilon 6 and 12.4% at 8, and
the 1,000 most frequent Chinese words would arrive intact 0.6% / 4.9% of the time
(and the 16-bit grid would leave ``b <= 3``), so such text would be noise either
way while the alphabet revealed the script.  These characters are therefore
replaced by uniformly random ASCII characters as in ``"ascii"`` mode (hidden among
ASCII, epsilon-LDP at any epsilon, never passed through) and the receipt counts
them as unsupported so the popup can say that the model cannot read them.

**How it is fast.**  Everything is computed on whole byte strings: the text's
UTF-16 code units split into high and low bytes, classes and slot indices by
``bytes.translate``, Hangul decomposed with byte-lane arithmetic on big integers,
shifts drawn in bulk from the CSPRNG -- a keep/change decision from 16-bit draws
(looked up by their high byte; two blocks need the low byte) and a uniform other
shift from bytes by rejection -- and recomposed in 16-bit lanes.  The only
per-character Python work is for "anything else" and for marks that land on a
letter (Latin marks on).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from py_core import krr
from py_core.errors import InvalidParameterError
from py_core.script_tables import (
    _COMPOSE,
    _CYRILLIC,
    _DECOMPOSE,
    _EQ,
    _GREEK,
    _JAMO,
    ALPHABETS,
    ASCII,
    CLASS_NAMES,
    CYRILLIC,
    GREEK,
    HANGUL,
    JAMO,
    LATIN,
    OTHER,
    SCRIPT_SLOTS,
    SPACE,
    Alphabet,
    _add,
    _by_hi,
    _classify_units,
    _int,
    _units,
    classify,
    compose_latin,
    decompose_latin,
    has_latin_marks,
    script_of,
)

__all__ = [
    "ALPHABETS",
    "ALPHABET_MODES",
    "ASCII_ONLY",
    "CLASS_NAMES",
    "FOLD",
    "SCRIPTS",
    "SCRIPT_SLOTS",
    "Alphabet",
    "CharCost",
    "ScriptUse",
    "classify",
    "compose_latin",
    "cost_table",
    "decompose_latin",
    "has_latin_marks",
    "keep_or_change",
    "keep_or_change_split",
    "other_shift",
    "perturb",
    "script_of",
    "slot_implementations",
    "validate_mode",
]

SCRIPTS = "scripts"
ASCII_ONLY = "ascii"
#: Accents into ASCII, other scripts per script (:mod:`py_core.accents`).
FOLD = "fold"
#: The per-site choices: each script in its own alphabet, everything into ASCII, or
#: accented Latin letters as their ASCII base and every other script in its alphabet.
ALPHABET_MODES = (SCRIPTS, ASCII_ONLY, FOLD)


def validate_mode(mode: object) -> str:
    """``mode`` if it is one of :data:`ALPHABET_MODES`, else raise."""
    if mode not in ALPHABET_MODES:  # a tuple: an unhashable value is refused too
        raise InvalidParameterError(f"alphabets must be one of {ALPHABET_MODES}; got {mode!r}")
    assert isinstance(mode, str)
    return mode


# ------------------------------------------------------- index tables per script


def _index_tables(symbols: Iterable[str]) -> tuple[dict[int, bytes], bytes, bytes]:
    """Per high byte: low byte -> index; and index -> output high byte, low byte."""
    to_index: dict[int, bytearray] = {}
    out_hi, out_lo = bytearray(256), bytearray(256)
    for i, char in enumerate(symbols):
        code = ord(char)
        to_index.setdefault(code >> 8, bytearray(256))[code & 0xFF] = i
        out_hi[i], out_lo[i] = code >> 8, code & 0xFF
    return {h: bytes(t) for h, t in to_index.items()}, bytes(out_hi), bytes(out_lo)


_SINGLE = {
    JAMO: ("hangul-jamo", *_index_tables(_JAMO)),
    CYRILLIC: ("cyrillic", *_index_tables(_CYRILLIC)),
    GREEK: ("greek", *_index_tables(_GREEK)),
}


def _latin_tables() -> tuple[dict[int, bytes], dict[int, bytes]]:
    base: dict[int, bytearray] = {0: bytearray(256)}
    mark: dict[int, bytearray] = {0: bytearray(256)}
    for code in range(33, 127):
        base[0][code] = code - 33
    for char, (b, m) in _DECOMPOSE.items():
        code = ord(char)
        base.setdefault(code >> 8, bytearray(256))[code & 0xFF] = b
        mark.setdefault(code >> 8, bytearray(256))[code & 0xFF] = m
    return {h: bytes(t) for h, t in base.items()}, {h: bytes(t) for h, t in mark.items()}


_LATIN_BASE, _LATIN_MARK = _latin_tables()


def _mod_table(k: int) -> bytes:
    return bytes(v % k for v in range(256))


_MOD = {a.k: _mod_table(a.k) for a in ALPHABETS.values()}

# Hangul decomposition by byte arithmetic: s = cp - 0xAC00 = 256 h' + lo with h' = hi - 0xAC;
# T = s % 28, V = (s // 28) % 21, L = s // 588, computed lane-wise without division.
_H = range(0xAC, 0xD8)
_HR = bytes(((h - 0xAC) * 256) % 28 if h in _H else 0 for h in range(256))
_HQM = bytes((((h - 0xAC) * 256) // 28) % 21 if h in _H else 0 for h in range(256))
_HQD = bytes((((h - 0xAC) * 256) // 28) // 21 if h in _H else 0 for h in range(256))
_LO_MOD28 = bytes(v % 28 for v in range(256))
_LO_DIV28 = bytes(v // 28 for v in range(256))
_GE = {k: bytes(1 if v >= k else 0 for v in range(256)) for k in (21, 28)}


def _hangul_slots(hi: bytes, lo: bytes) -> tuple[bytes, bytes, bytes]:
    """(L, V, T) byte strings; meaningful where the code unit is a Hangul syllable."""
    t_sum = _add(hi.translate(_HR), lo.translate(_LO_MOD28))  # <= 54
    t = t_sum.translate(_MOD[28])
    v_sum = _add(hi.translate(_HQM), lo.translate(_LO_DIV28), t_sum.translate(_GE[28]))  # <= 30
    v = v_sum.translate(_MOD[21])
    initial = _add(hi.translate(_HQD), v_sum.translate(_GE[21])).translate(_MOD[19])
    return initial, v, t


# ------------------------------------------------------------ drawing shifts

_REJECT = 255


@lru_cache(maxsize=256)
def _keep_tables(keep_weight: int, change_weight: int) -> tuple[bytes, dict[int, bytes]]:
    """16-bit draw -> 0 keep (``a`` values), 1 change (``(k-1) b`` values), 255 reject.

    Looked up by the high byte; only the (at most two) blocks that straddle a
    boundary need their low byte.
    """
    total = keep_weight + change_weight

    def value(r: int) -> int:
        return 0 if r < keep_weight else 1 if r < total else _REJECT

    hi = bytearray(256)
    lo: dict[int, bytes] = {}
    for h in range(256):
        first, last = value(h << 8), value((h << 8) | 0xFF)
        if first == last:
            hi[h] = first
        else:
            hi[h] = 2
            lo[h] = bytes(value((h << 8) | v) for v in range(256))
    return bytes(hi), lo


@lru_cache(maxsize=128)
def _other_table(k: int) -> bytes:
    """A byte -> a uniform shift in 1..k-1, or 255 (reject) for the top ``256 % (k-1)``."""
    span = 256 - 256 % (k - 1)
    return bytes(1 + v % (k - 1) if v < span else _REJECT for v in range(256))


def keep_or_change(draws: bytes, impl: krr.Implementation) -> bytes:
    """One byte per 16-bit little-endian draw: 0 keep, 1 change, 255 reject (no RNG here)."""
    hi_table, lo_tables = _keep_tables(impl.keep_weight, (impl.k - 1) * impl.other_weight)
    hi, lo = draws[1::2], draws[0::2]
    out = hi.translate(hi_table)
    if lo_tables:
        out = _by_hi(hi, lo, lo_tables, out)
    return out


def keep_or_change_split(hi: bytes, low: Callable[[int], bytes], impl: krr.Implementation) -> bytes:
    """:func:`keep_or_change` drawing low bytes only where the high byte needs one.

    ``hi`` holds the draws' high bytes; ``low(m)`` returns the low bytes of the ``m``
    draws whose high byte falls in a block that straddles a boundary (at most two
    blocks of 256, so about 1 draw in 128), in order.  For the same 16-bit draws the
    result equals :func:`keep_or_change`'s; a low byte drawn only when needed is as
    uniform and independent as one drawn always.
    """
    hi_table, lo_tables = _keep_tables(impl.keep_weight, (impl.k - 1) * impl.other_weight)
    out = hi.translate(hi_table)
    count = out.count(2) if lo_tables else 0
    if not count:
        return out
    buf = bytearray(out)
    position = buf.find(2)
    for value in low(count):
        buf[position] = lo_tables[hi[position]][value]
        position = buf.find(2, position + 1)
    return bytes(buf)


def other_shift(draws: bytes, k: int) -> bytes:
    """One byte per draw: a uniform shift in 1..k-1, or 255 (reject; no RNG here)."""
    return draws.translate(_other_table(k))


def _accepted(fresh: object, n: int, rate: float) -> bytes:
    """The first ``n`` accepted values of a stream of independent draws.

    ``fresh(m)`` returns ``m`` new values, 255 for a rejected draw; ``rate`` is
    the share accepted.  Position ``i`` gets the ``i``-th accepted draw: each is an
    independent draw conditioned on acceptance (rejection sampling), done on whole
    byte strings.  Surplus draws are discarded unseen.
    """
    assert callable(fresh)
    reject = bytes([_REJECT])
    out = b""
    while len(out) < n:
        need = n - len(out)
        out += fresh(int(need / rate) + 64).replace(reject, b"")
    return out[:n]


def _shifts(rng: krr.RandomSource, n: int, impl: krr.Implementation) -> bytes:
    """``n`` k-RR shifts: 0 with probability ``a/M``, each of 1..k-1 with ``b/M``, exactly.

    Keep or change is decided by a 16-bit draw (``a`` keep values, ``(k-1) b``
    change values, the rest rejected; its low byte drawn only where the high byte
    does not decide, :func:`keep_or_change_split`); a change gets a uniform shift in 1..k-1
    from a byte (``256 - 256 % (k-1)`` values accepted).  So
    ``P(shift = j) = (k-1) b / M * 1/(k-1) = b/M``.
    """
    total = impl.keep_weight + (impl.k - 1) * impl.other_weight
    change = _accepted(
        lambda m: keep_or_change_split(rng.randbytes(m), rng.randbytes, impl), n, total / 65536
    )
    span = 256 - 256 % (impl.k - 1)
    other = _accepted(lambda m: other_shift(rng.randbytes(m), impl.k), n, span / 256)
    return (_int(other) & _int(change.translate(_EQ[1]))).to_bytes(n, "little")


def _perturb_index(index: bytes, rng: krr.RandomSource, impl: krr.Implementation) -> bytes:
    """k-RR of every index byte (< k) in its alphabet of ``impl.k``."""
    return _add(index, _shifts(rng, len(index), impl)).translate(_MOD[impl.k])


def _uniform(rng: krr.RandomSource, count: int, k: int) -> bytes:
    """``count`` uniform draws from 0..k-1 (rejection sampling on bytes)."""
    span = 256 - 256 % k
    table = bytes(v % k if v < span else _REJECT for v in range(256))
    return _accepted(lambda m: rng.randbytes(m).translate(table), count, span / 256)


# ----------------------------------------------------------------- perturb


@lru_cache(maxsize=64)
def slot_implementations(epsilon: float) -> dict[str, krr.Implementation]:
    """The exact weights of every slot alphabet for a request of ``epsilon`` per slot."""
    eps = krr.validate_epsilon(epsilon)
    return {name: krr.implementation(eps, a.k) for name, a in ALPHABETS.items()}


def _widen(b: bytes) -> bytearray:
    out = bytearray(2 * len(b))
    out[0::2] = b
    return out


def _mask16(cls: bytes, code: int) -> int:
    m = cls.translate(_EQ[code])
    out = bytearray(2 * len(m))
    out[0::2] = m
    out[1::2] = m
    return _int(out)


def perturb(
    text: str,
    epsilon: float,
    *,
    rng: krr.RandomSource | None = None,
    latin_marks: bool | None = None,
) -> str:
    """k-RR of ``text`` with every character in its script's alphabet (module docstring).

    ``epsilon`` is per slot.  ``latin_marks`` switches the Latin mark slot on or
    off; ``None`` decides from ``text`` (:func:`has_latin_marks`).  A caller that
    perturbs a prompt in pieces (protected spans) decides once for the whole
    prompt and passes it.  The output has exactly as many code points as ``text``;
    whitespace is kept.
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    impls = slot_implementations(krr.validate_epsilon(epsilon))
    source = rng if rng is not None else krr._default_rng()
    if not text:
        return ""
    units = _units(text)
    hi, lo = units[1::2], units[0::2]
    cls = _classify_units(hi, lo)
    if latin_marks is None:
        latin_marks = bytes([LATIN]) in cls
    if not latin_marks and bytes([LATIN]) not in cls and cls.translate(_ASCII_LIKE) == cls:
        # Only ASCII, whitespace and unsupported characters: the "ascii" mechanism itself.
        return krr.perturb(text, epsilon, rng=source)
    n = len(text)
    present = {c for c in range(8) if bytes([c]) in cls}
    out = _int(units) & _mask16(cls, SPACE) if SPACE in present else 0
    fixes: dict[int, str] = {}
    if present & {ASCII, LATIN, OTHER}:
        base = (
            _by_hi(hi, lo, _LATIN_BASE, bytes(n))
            if LATIN in present
            else lo.translate(_LATIN_BASE[0])
        )
        base_out = _perturb_index(base, source, impls["ascii"])
        chars = base_out.translate(_ASCII_CODE)
        ascii_mask = _mask16(cls, ASCII) | _mask16(cls, LATIN) | _mask16(cls, OTHER)
        out |= _int(_widen(chars)) & ascii_mask
        if latin_marks:
            mark = _by_hi(hi, lo, _LATIN_MARK, bytes(n)) if LATIN in present else bytes(n)
            mark_out = _perturb_index(mark, source, impls["latin-mark"])
            keep_classes = cls.translate(_IS_ASCII_OR_LATIN)
            mark_out = (_int(mark_out) & _int(keep_classes)).to_bytes(n, "little")
            position = _first_nonzero(mark_out, 0)
            while position != -1:
                key = (base_out[position], mark_out[position])
                composed = _COMPOSE.get(key)
                if composed is not None:
                    fixes[position] = composed
                position = _first_nonzero(mark_out, position + 1)
        if OTHER in present:
            positions = [m.start() for m in _OTHER_RUN.finditer(cls)]
            fresh = _uniform(source, len(positions), krr.K)
            marks = (
                _uniform(source, len(positions), ALPHABETS["latin-mark"].k)
                if latin_marks
                else bytes(len(positions))
            )
            for position, index, m in zip(positions, fresh, marks, strict=True):
                fixes[position] = _COMPOSE.get((index, m), krr.ALPHABET[index])
    if HANGUL in present:
        slots = _hangul_slots(hi, lo)
        initial, vowel, final = (
            _perturb_index(s, source, impls[name])
            for s, name in zip(slots, SCRIPT_SLOTS["hangul"], strict=True)
        )
        ones = _ONES16(n)
        code = _int(_widen(initial)) * 588 + _int(_widen(vowel)) * 28 + _int(_widen(final))
        out |= (code + 0xAC00 * ones) & _mask16(cls, HANGUL)
    for script, (name, to_index, out_hi, out_lo) in _SINGLE.items():
        if script not in present:
            continue
        indices = _by_hi(hi, lo, to_index, bytes(n))
        perturbed = _perturb_index(indices, source, impls[name])
        lanes = bytearray(2 * n)
        lanes[0::2] = perturbed.translate(out_lo)
        lanes[1::2] = perturbed.translate(out_hi)
        out |= _int(lanes) & _mask16(cls, script)
    result = out.to_bytes(2 * n, "little")
    if fixes:
        buf = bytearray(result)
        for position, char in fixes.items():
            buf[2 * position : 2 * position + 2] = ord(char).to_bytes(2, "little")
        result = bytes(buf)
    return result.decode("utf-16-le")


_ASCII_LIKE = bytes(v if v in (SPACE, ASCII, OTHER) else 255 for v in range(256))
_IS_ASCII_OR_LATIN = bytes(0xFF if v in (ASCII, LATIN) else 0 for v in range(256))
_ASCII_CODE = bytes((v + 33) if v < krr.K else 0 for v in range(256))
_OTHER_RUN = re.compile(bytes([OTHER]))
_NONZERO = re.compile(b"[^\x00]")


def _first_nonzero(buf: bytes, start: int) -> int:
    m = _NONZERO.search(buf, start)
    return -1 if m is None else m.start()


@lru_cache(maxsize=8)
def _ones16_cached(n: int) -> int:
    return _int(b"\x01\x00" * n)


def _ONES16(n: int) -> int:
    return _ones16_cached(n) if n <= 1 << 16 else _int(b"\x01\x00" * n)


# ------------------------------------------------------- costs for the receipt


class CharCost(NamedTuple):
    """What perturbing one character of a script costs and keeps."""

    script: str
    slots: tuple[str, ...]  # slot alphabet names
    epsilon: float  # sum of the slots' implemented epsilon
    keep_probability: float  # P(the character arrives unchanged)


@dataclass(frozen=True, slots=True)
class ScriptUse:
    """How many characters of one script a prompt had, and what each cost."""

    script: str
    chars: int
    slots: tuple[str, ...]
    epsilon_per_char: float


def cost_table(epsilon: float, latin_marks: bool) -> dict[str, CharCost]:
    """Per script, the cost of a character (ASCII: the unaccented-letter case)."""
    return dict(_cost_table(krr.validate_epsilon(epsilon), bool(latin_marks)))


@lru_cache(maxsize=64)
def _cost_table(epsilon: float, latin_marks: bool) -> tuple[tuple[str, CharCost], ...]:
    impls = slot_implementations(epsilon)
    out = []
    for script, slots in SCRIPT_SLOTS.items():
        if latin_marks and script in ("ascii", "other"):
            slots = ("ascii", "latin-mark")
        eps = sum(impls[s].epsilon for s in slots)
        keep = math.prod(impls[s].keep_probability for s in slots) if slots else 1.0
        if script == "other":
            keep = 0.0
        out.append((script, CharCost(script, slots, eps, keep)))
    return tuple(out)


def char_keep_probability(char: str, epsilon: float, latin_marks: bool) -> float:
    """P(``char`` arrives unchanged) under :func:`perturb`, exactly from the weights."""
    return _char_keep(char, krr.validate_epsilon(epsilon), bool(latin_marks))


@lru_cache(maxsize=4096)
def _char_keep(char: str, epsilon: float, latin_marks: bool) -> float:
    script = script_of(char)
    costs = dict(_cost_table(epsilon, latin_marks))
    if script != "ascii" or not latin_marks:
        return costs[script].keep_probability
    # An unaccented character is also kept when a mark lands that it has no form with.
    impls = slot_implementations(epsilon)
    mark = impls["latin-mark"]
    free = sum(1 for m in range(1, mark.k) if (ord(char) - 33, m) not in _COMPOSE)
    return impls["ascii"].keep_probability * (
        mark.keep_probability + free * mark.replace_probability
    )
