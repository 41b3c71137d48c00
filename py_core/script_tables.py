"""The slot alphabets of per-script k-RR and the class (script) of every character.

What :mod:`py_core.alphabets` perturbs within, as data: each slot's :class:`Alphabet`
(:data:`ALPHABETS`), the slots of each script (:data:`SCRIPT_SLOTS`), the Latin letters as
base + mark (:func:`decompose_latin`, :func:`compose_latin`), and the byte-level
classification of a text's UTF-16 code units (:func:`classify`, :func:`script_of`).  The
mechanism itself -- drawing shifts and perturbing -- is :mod:`py_core.alphabets`; the
module docstring there says what is visible and why.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from py_core import krr
from py_core.errors import InvalidParameterError

# ---------------------------------------------------------------- the alphabets


@dataclass(frozen=True, slots=True)
class Alphabet:
    """One slot's alphabet: the symbols k-RR chooses among."""

    name: str
    symbols: tuple[str, ...]  # index -> what it stands for ("" for "none")
    description: str

    def __post_init__(self) -> None:
        if not 2 <= len(self.symbols) <= 127 or len(set(self.symbols)) != len(self.symbols):
            raise InvalidParameterError(
                f"alphabet {self.name!r} needs 2..127 distinct symbols; got {len(self.symbols)}"
            )

    @property
    def k(self) -> int:
        return len(self.symbols)


_L = tuple(chr(c) for c in range(0x1100, 0x1113))  # 19 initial consonants
_V = tuple(chr(c) for c in range(0x1161, 0x1176))  # 21 vowels
_T = ("", *(chr(c) for c in range(0x11A8, 0x11C3)))  # none + 27 final consonants
_JAMO = tuple(chr(c) for c in range(0x3131, 0x3164))  # 30 consonants + 21 vowels
_CYRILLIC = (*(chr(c) for c in range(0x0400, 0x0460)), "\u0490", "\u0491")
_GREEK_TONOS = (0x0386, 0x0388, 0x0389, 0x038A, 0x038C, 0x038E, 0x038F, 0x0390, 0x03AA, 0x03AB)
_GREEK_TONOS_SMALL = (
    0x03AC,
    0x03AD,
    0x03AE,
    0x03AF,
    0x03B0,
    0x03CA,
    0x03CB,
    0x03CC,
    0x03CD,
    0x03CE,
)
_GREEK = tuple(
    chr(c)
    for c in (*range(0x0391, 0x03AA), *range(0x03B1, 0x03CA), *_GREEK_TONOS, *_GREEK_TONOS_SMALL)
    if c != 0x03A2  # unassigned (no capital final sigma)
)

#: The combining marks of the Latin mark slot (index 1..14), then two pseudo-marks.
COMBINING_MARKS = (
    "\u0300",  # grave
    "\u0301",  # acute
    "\u0302",  # circumflex
    "\u0303",  # tilde
    "\u0304",  # macron
    "\u0306",  # breve
    "\u0307",  # dot above
    "\u0308",  # diaeresis
    "\u030a",  # ring above
    "\u030b",  # double acute
    "\u030c",  # caron
    "\u0323",  # dot below
    "\u0327",  # cedilla
    "\u0328",  # ogonek
)
STROKE, VARIANT = "stroke", "variant"
_MARKS = ("", *COMBINING_MARKS, STROKE, VARIANT)
# Letters Unicode does not decompose, as base letter + pseudo-mark.
_PSEUDO = {
    STROKE: {"o": "ø", "O": "Ø", "l": "ł", "L": "Ł", "d": "đ", "D": "Đ", "h": "ħ", "H": "Ħ"}
    | {"t": "ŧ", "T": "Ŧ"},
    VARIANT: {"a": "æ", "A": "Æ", "o": "œ", "O": "Œ", "s": "ß", "S": "ẞ", "d": "ð", "D": "Ð"}
    | {"t": "þ", "T": "Þ", "i": "\u0131", "n": "ŋ", "N": "Ŋ"},
}

ALPHABETS: dict[str, Alphabet] = {
    a.name: a
    for a in (
        Alphabet("ascii", tuple(krr.ALPHABET), "printable ASCII, codes 33..126"),
        Alphabet("latin-mark", _MARKS, "none, 14 combining marks, stroke, variant"),
        Alphabet("hangul-initial", _L, "Hangul initial consonants"),
        Alphabet("hangul-vowel", _V, "Hangul vowels"),
        Alphabet("hangul-final", _T, "Hangul final consonants, none included"),
        Alphabet("hangul-jamo", _JAMO, "Hangul compatibility jamo U+3131..U+3163"),
        Alphabet("cyrillic", _CYRILLIC, "Cyrillic U+0400..U+045F and Ґ ґ"),
        Alphabet("greek", _GREEK, "modern Greek letters, both cases, with tonos and dialytika"),
    )
}

# Character classes: the script each character is visibly perturbed within.
SPACE, ASCII, LATIN, HANGUL, JAMO, CYRILLIC, GREEK, OTHER = range(8)
CLASS_NAMES = ("space", "ascii", "latin", "hangul", "hangul-jamo", "cyrillic", "greek", "other")
_SCRIPT_NAME = dict(enumerate(CLASS_NAMES))

#: The slots of each script (with Latin marks on, ASCII characters also carry a mark slot).
SCRIPT_SLOTS: dict[str, tuple[str, ...]] = {
    "space": (),
    "ascii": ("ascii",),
    "latin": ("ascii", "latin-mark"),
    "hangul": ("hangul-initial", "hangul-vowel", "hangul-final"),
    "hangul-jamo": ("hangul-jamo",),
    "cyrillic": ("cyrillic",),
    "greek": ("greek",),
    "other": ("ascii",),  # hidden among ASCII: its output is a uniform ASCII character
}


def _build_latin() -> tuple[dict[str, tuple[int, int]], dict[tuple[int, int], str]]:
    decompose: dict[str, tuple[int, int]] = {}
    compose: dict[tuple[int, int], str] = {}
    letters = [c for c in krr.ALPHABET if c.isalpha()]
    for m, mark in enumerate(_MARKS):
        if not mark:
            continue
        for base in letters:
            if mark in _PSEUDO:
                char = _PSEUDO[mark].get(base, "")
            else:
                char = unicodedata.normalize("NFC", base + mark)
            if len(char) != 1:
                continue
            key = (ord(base) - 33, m)
            assert char not in decompose, char
            decompose[char] = key
            compose[key] = char
    return decompose, compose


_DECOMPOSE, _COMPOSE = _build_latin()


def decompose_latin(char: str) -> tuple[str, str] | None:
    """``(base, mark)`` of a Latin letter with a mark of :data:`COMBINING_MARKS` or a pseudo-mark."""
    key = _DECOMPOSE.get(char)
    return None if key is None else (krr.ALPHABET[key[0]], _MARKS[key[1]])


def compose_latin(base: str, mark: str) -> str:
    """The character for ``base`` + ``mark``; ``base`` itself when no precomposed one exists."""
    if not mark:
        return base
    return _COMPOSE.get((ord(base) - 33, _MARKS.index(mark)), base)


# ------------------------------------------------------------ classification

_SPACES = krr.WHITESPACE  # only these pass unchanged; U+00A0, U+3000, ... are "other"


def _class_table() -> bytearray:
    table = bytearray([OTHER]) * 65536
    for code in range(33, 127):
        table[code] = ASCII
    for char in _SPACES:
        table[ord(char)] = SPACE
    for char in _DECOMPOSE:
        table[ord(char)] = LATIN
    table[0xAC00:0xD7A4] = bytes([HANGUL]) * (0xD7A4 - 0xAC00)
    for char in _JAMO:
        table[ord(char)] = JAMO
    for char in _CYRILLIC:
        table[ord(char)] = CYRILLIC
    for char in _GREEK:
        table[ord(char)] = GREEK
    return table


_CLASS16 = bytes(_class_table())
# Per high byte of a UTF-16 code unit: its class when the whole block of 256 has one,
# else 255 and the block's own table of 256 (indexed by the low byte).
_MIXED = 255
_CLASS_HI = bytes(
    block[0] if block.count(block[0]) == 256 else _MIXED
    for block in (_CLASS16[h << 8 : (h + 1) << 8] for h in range(256))
)
_CLASS_LO = {h: _CLASS16[h << 8 : (h + 1) << 8] for h in range(256) if _CLASS_HI[h] == _MIXED}
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _eq_table(value: int) -> bytes:
    return bytes(0xFF if v == value else 0 for v in range(256))


_EQ = [_eq_table(v) for v in range(256)]


def _units(text: str) -> bytes:
    """UTF-16-LE with one code unit per code point (astral ones become U+FFFF: "other")."""
    raw = text.encode("utf-16-le", "surrogatepass")
    if len(raw) != 2 * len(text):
        raw = _ASTRAL.sub("\uffff", text).encode("utf-16-le", "surrogatepass")
    return raw


def _int(b: bytes | bytearray) -> int:
    return int.from_bytes(b, "little")


def _merge(base: bytes, new: bytes, mask: bytes) -> bytes:
    """``new`` where ``mask`` is 0xFF, else ``base`` (byte lanes)."""
    b = _int(base)
    return (b ^ ((b ^ _int(new)) & _int(mask))).to_bytes(len(base), "little")


def _add(*parts: bytes) -> bytes:
    """Lane-wise sum of byte strings; the caller ensures no lane exceeds 255."""
    return sum(_int(p) for p in parts).to_bytes(len(parts[0]), "little")


def _by_hi(hi: bytes, lo: bytes, tables: dict[int, bytes], default: bytes) -> bytes:
    """``tables[h][lo]`` where the high byte is ``h`` (``default`` elsewhere)."""
    out = default
    for h, table in tables.items():
        if bytes([h]) in hi:
            out = _merge(out, lo.translate(table), hi.translate(_EQ[h]))
    return out


def _classify_units(hi: bytes, lo: bytes) -> bytes:
    coarse = hi.translate(_CLASS_HI)
    if _MIXED not in coarse:
        return coarse
    return _by_hi(hi, lo, _CLASS_LO, coarse)


def classify(text: str) -> bytes:
    """One class code per code point of ``text`` (indices into :data:`CLASS_NAMES`)."""
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    units = _units(text)
    return _classify_units(units[1::2], units[0::2])


def script_of(char: str) -> str:
    """The script name (:data:`CLASS_NAMES`) k-RR perturbs ``char`` within."""
    return CLASS_NAMES[classify(char)[0]]


def has_latin_marks(text: str) -> bool:
    """Whether ``text`` holds a Latin letter with a mark (switches the mark slot on)."""
    return bytes([LATIN]) in classify(text)
