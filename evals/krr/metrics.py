"""Word-level restoration metrics and small statistics helpers."""

from __future__ import annotations

import difflib
import math
import re
import string
from collections.abc import Sequence

__all__ = [
    "aligned_matches",
    "lenient",
    "rate_with_ci",
    "restored_flags",
]

_PUNCT = string.punctuation


def lenient(word: str) -> str:
    """Case-folded word without surrounding punctuation (for leak checks across methods)."""
    return word.strip(_PUNCT).casefold()


def aligned_matches(original: Sequence[str], output: Sequence[str]) -> list[bool]:
    """For each original word, whether the output reproduces it at the aligned position.

    Same length: position by position (k-RR keeps word boundaries, and so do the
    offline restorers).  Otherwise the words are aligned with difflib's matching
    blocks (an LLM may drop or add words), and a word counts as restored only if it
    falls inside a matching block.
    """
    if len(original) == len(output):
        return [a == b for a, b in zip(original, output, strict=True)]
    flags = [False] * len(original)
    matcher = difflib.SequenceMatcher(a=list(original), b=list(output), autojunk=False)
    for block in matcher.get_matching_blocks():
        for i in range(block.a, block.a + block.size):
            flags[i] = True
    return flags


def restored_flags(
    original_words: Sequence[str], restored_text: str, *, strict: bool = True
) -> list[bool]:
    """Restoration flag per original word; ``strict`` compares exact strings, else :func:`lenient`."""
    output = re.findall(r"\S+", restored_text)
    if strict:
        return aligned_matches(original_words, output)
    return aligned_matches([lenient(w) for w in original_words], [lenient(w) for w in output])


def rate_with_ci(hits: int, n: int, z: float = 1.96) -> tuple[float, float, float]:
    """(rate, low, high): the Wilson score interval at ``z`` standard errors."""
    if n == 0:
        return (math.nan, math.nan, math.nan)
    p = hits / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (p, max(0.0, centre - half), min(1.0, centre + half))
