"""Accents into ASCII: a Latin letter with diacritics becomes its base letter before k-RR.

The per-site alphabet ``"fold"`` ("accents into ASCII, other scripts per script")
is the ``"scripts"`` mechanism (:mod:`py_core.alphabets`) applied to the prompt
after :func:`fold`: every Latin letter with a diacritic (``é è ê ë ñ ç ü å ő``,
Vietnamese ``ệ`` with two marks, ...) and every letter Unicode does not decompose
but Veil's mark slot treats as base + pseudo-mark (``ø ł đ ħ ŧ æ œ ß ẞ ð þ \u0131 ŋ``)
is replaced by its one ASCII base letter; every other character is left as it is.
The folded text has no accented Latin letter, so the mark slot is never on: each
Latin letter is one ASCII slot (epsilon per slot), and Hangul, Cyrillic and Greek
keep their own alphabets exactly as in ``"scripts"``.

**What is protected, exactly.**  Folding is a fixed, public function of the
person's own text, applied before any randomness (pre-processing, not a release).
For two prompts that differ in one character ``c`` vs ``c'`` the outputs' ratio is
bounded by the k-RR of ``fold(c)`` vs ``fold(c')``: if both are Latin letters
(accented or not) that is one ASCII slot, ``eps_impl`` of the 94-letter alphabet,
exactly the receipt's ``epsilon_per_char``; characters of other scripts cost their
slots as in ``"scripts"``.  The neighbouring relation is therefore the usual one
(one character changed), with ``é`` and ``e`` one and the same input: a site can
never tell them apart (ratio 1), which is the point, and the person's text is read
without its accents.  The fold is one character to one character, so word
lengths, positions and protected spans are unchanged and the receipt's per-word
Pr[T0] is the chance that the *folded* word arrives intact.  (Multi-letter
transliterations such as ``ß -> ss`` would make the output's length depend on
which letter was typed, so they are not used.)

The word memo keeps the person's own word (with its accents) as the key, so a
restored reply shows ``école``, not ``ecole``; ``école`` and ``ecole`` are then two
releases of the same folded input, each counted in the ledger (conservative).

Measured in ``veil eval accents`` (docs/accents/report.md).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from py_core.alphabets import FOLD
from py_core.errors import InvalidParameterError
from py_core.script_tables import _PSEUDO

__all__ = ["FOLD", "fold", "fold_char", "fold_table"]

# Where precomposed Latin letters live: Latin-1 Supplement, Latin Extended-A and -B,
# Latin Extended Additional (Vietnamese and the rest), Latin Extended-C..E.
_LATIN_RANGES = (
    (0x00C0, 0x0250),
    (0x1E00, 0x1F00),
    (0x2C60, 0x2C80),
    (0xA720, 0xA800),
    (0xAB30, 0xAB70),
)


def _base(char: str) -> str | None:
    """The ASCII letter ``char`` decomposes into with combining marks only, else None."""
    nfd = unicodedata.normalize("NFD", char)
    base, marks = nfd[:1], nfd[1:]
    if len(base) != 1 or not ("a" <= base <= "z" or "A" <= base <= "Z"):
        return None
    if not marks or not all(unicodedata.category(m) == "Mn" for m in marks):
        return None
    return base


@lru_cache(maxsize=1)
def fold_table() -> dict[int, str]:
    """Code point -> its ASCII base letter, for every letter :func:`fold` replaces."""
    table: dict[int, str] = {}
    for start, end in _LATIN_RANGES:
        for code in range(start, end):
            base = _base(chr(code))
            if base is not None:
                table[code] = base
    for letters in _PSEUDO.values():
        for base, char in letters.items():
            table[ord(char)] = base
    return table


def fold_char(char: str) -> str:
    """``char``'s ASCII base letter if it is an accented (or pseudo-marked) Latin letter."""
    if not isinstance(char, str) or len(char) != 1:
        raise InvalidParameterError(f"fold_char takes one character; got {char!r}")
    return fold_table().get(ord(char), char)


def fold(text: str) -> tuple[str, int]:
    """``text`` with every accented Latin letter as its ASCII base, and how many changed.

    One code point for one code point (``len(fold(t)[0]) == len(t)``).
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    if text.isascii():
        return text, 0
    folded = text.translate(fold_table())
    changed = sum(1 for a, b in zip(text, folded, strict=True) if a != b)
    return folded, changed
