"""Splitting text into overlapping chunks of words, with their character offsets.

Words are runs of non-space characters; a "word" longer than a chunk may be (a
base64 blob, a minified line) is split on characters first, so no chunk is ever
larger than ``max_bytes`` UTF-8 bytes.  A byte-level BPE tokenizer (the chat
model's) never makes more tokens than bytes, so ``max_bytes`` is also a bound on
a chunk's tokens.
"""

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


class TooManyChunksError(InvalidParameterError):
    """The text makes more chunks than allowed (raised as soon as the limit is passed)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the text makes more than {limit:,} chunks")
        self.limit = limit


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _pieces(text: str, start: int, end: int, max_bytes: int) -> list[tuple[int, int]]:
    """Split text[start:end] into spans of at most ``max_bytes`` UTF-8 bytes."""
    spans = []
    i = start
    while i < end:
        j = min(end, i + max_bytes)  # at least one byte per character
        while j > i + 1 and _utf8_len(text[i:j]) > max_bytes:
            over = _utf8_len(text[i:j]) - max_bytes
            j = max(i + 1, j - max(1, over // 4))
        spans.append((i, j))
        i = j
    return spans


def chunk_text(
    text: str,
    *,
    size: int = 120,
    overlap: int = 30,
    max_bytes: int | None = None,
    max_chunks: int | None = None,
) -> list[Chunk]:
    """Chunks of at most ``size`` words and ``max_bytes`` bytes; ``overlap`` words shared.

    Chunk boundaries prefer the end of a sentence within the last quarter of the
    window, so a chunk rarely stops mid-sentence.  ``max_chunks`` stops the work
    as soon as the text would make more chunks (:class:`TooManyChunksError`).
    """
    if size < 1:
        raise InvalidParameterError(f"chunk size must be >= 1 word; got {size!r}")
    if not 0 <= overlap < size:
        raise InvalidParameterError(
            f"chunk overlap must be >= 0 and smaller than the size ({size}); got {overlap!r}"
        )
    if max_bytes is not None and max_bytes < 4:
        raise InvalidParameterError(f"max_bytes must be >= 4; got {max_bytes!r}")
    words: list[tuple[int, int]] = []
    for m in _WORD.finditer(text):
        long = max_bytes is not None and m.end() - m.start() > max_bytes // 4
        if long and max_bytes is not None and _utf8_len(m.group()) > max_bytes:
            words.extend(_pieces(text, m.start(), m.end(), max_bytes))
            continue
        words.append((m.start(), m.end()))
        if max_chunks is not None and len(words) > (max_chunks + 1) * size:
            break  # already more words than the chunks allowed can hold
    chunks: list[Chunk] = []
    i = 0
    while i < len(words):
        j = min(i + size, len(words))
        if max_bytes is not None:
            while j > i + 1 and _utf8_len(text[words[i][0] : words[j - 1][1]]) > max_bytes:
                j -= 1
        if j < len(words):
            for k in range(j - 1, i + (3 * (j - i)) // 4 - 1, -1):
                if text[words[k][1] - 1] in ".!?":
                    j = k + 1
                    break
        start, end = words[i][0], words[j - 1][1]
        if max_chunks is not None and len(chunks) >= max_chunks:
            raise TooManyChunksError(max_chunks)
        chunks.append(Chunk(len(chunks), text[start:end], start, end))
        if j >= len(words):
            break
        i = max(j - min(overlap, (j - i) // 2), i + 1)
    return chunks
