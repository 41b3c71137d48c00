"""Splitting text into overlapping chunks of words, with their character offsets."""

from __future__ import annotations

import re
from dataclasses import dataclass

from py_core.errors import InvalidParameterError

_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Chunk:
    index: int
    text: str
    start: int  # character offsets in the document text
    end: int


def chunk_text(text: str, *, size: int = 120, overlap: int = 30) -> list[Chunk]:
    """Chunks of at most ``size`` words; consecutive chunks share ``overlap`` words.

    Chunk boundaries prefer the end of a sentence within the last quarter of the
    window, so a chunk rarely stops mid-sentence.
    """
    if size < 1:
        raise InvalidParameterError(f"chunk size must be >= 1 word; got {size!r}")
    if not 0 <= overlap < size:
        raise InvalidParameterError(
            f"chunk overlap must be >= 0 and smaller than the size ({size}); got {overlap!r}"
        )
    words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    chunks: list[Chunk] = []
    i = 0
    while i < len(words):
        j = min(i + size, len(words))
        if j < len(words):
            for k in range(j - 1, i + (3 * size) // 4 - 1, -1):
                if text[words[k][1] - 1] in ".!?":
                    j = k + 1
                    break
        start, end = words[i][0], words[j - 1][1]
        chunks.append(Chunk(len(chunks), text[start:end], start, end))
        if j >= len(words):
            break
        i = max(j - overlap, i + 1)
    return chunks
