"""Splitting text into chunks with their character offsets (and pages and headings).

:func:`chunk_document` (what ingest uses) packs whole sentences into a token
budget inside each section of a document (a PDF page, a heading's span), so every
chunk knows its page and heading path.  :func:`chunk_text` is the word-window
splitter it falls back on for a sentence longer than the budget:

Words are runs of non-space characters; a "word" longer than a chunk may be (a
base64 blob, a minified line) is split on characters first, so no chunk is ever
larger than ``max_bytes`` UTF-8 bytes.  A byte-level BPE tokenizer (the chat
model's) never makes more tokens than bytes, so ``max_bytes`` is also a bound on
a chunk's tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
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


# ------------------------------------------------------------ page-aware chunks
@dataclass(frozen=True, slots=True)
class Section:
    """A span of a document's text with where it came from (a PDF page, a heading path)."""

    start: int
    end: int
    page: int | None = None
    heading: str | None = None


@dataclass(frozen=True, slots=True)
class SourcedChunk:
    index: int
    text: str
    start: int
    end: int
    page: int | None = None
    heading: str | None = None


# A sentence ends at . ! ? (or their CJK forms) followed by space; a line break ends a
# unit too (list items, table rows, e-mail headers), a blank line a paragraph.
_SENTENCE_END = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+|\n+")
_TOKEN_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def approximate_tokens(text: str) -> int:
    """A WordPiece-like count without a tokenizer: words and punctuation marks, +30% for
    the sub-word pieces of long words (MiniLM averages ~1.3 pieces per English word)."""
    pieces = _TOKEN_PIECE.findall(text)
    return len(pieces) + sum(1 for p in pieces if len(p) > 6) // 2 + len(pieces) // 10


def _units(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Sentence/line spans of text[start:end], whitespace trimmed."""
    spans = []
    pos = start
    for m in _SENTENCE_END.finditer(text, start, end):
        if m.start() > pos:
            spans.append((pos, m.start()))
        pos = m.end()
    if pos < end:
        spans.append((pos, end))
    out = []
    for a, b in spans:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            out.append((a, b))
    return out


def chunk_document(
    text: str,
    sections: Sequence[Section] = (),
    *,
    max_tokens: int = 160,
    overlap_tokens: int = 32,
    count_tokens: Callable[[str], int] | None = None,
    max_bytes: int | None = None,
    max_chunks: int | None = None,
) -> list[SourcedChunk]:
    """Chunks of whole sentences within ``max_tokens`` tokens that never cross a section.

    Sentences (and lines) are packed greedily; the last sentences of a chunk, up to
    ``overlap_tokens``, start the next one.  A sentence longer than the budget is cut
    into word windows (:func:`chunk_text`).  ``count_tokens`` is the embedder's
    tokenizer (its pieces per text); without it :func:`approximate_tokens`.  No chunk
    has more than ``max_bytes`` UTF-8 bytes.  Each chunk carries its section's page
    and heading path.
    """
    if max_tokens < 8:
        raise InvalidParameterError(f"chunk budget must be >= 8 tokens; got {max_tokens!r}")
    if not 0 <= overlap_tokens < max_tokens // 2:
        raise InvalidParameterError(
            f"chunk overlap must be >= 0 and under half the budget ({max_tokens}); "
            f"got {overlap_tokens!r}"
        )
    count = count_tokens or approximate_tokens
    spans = list(sections) or [Section(0, len(text))]
    chunks: list[SourcedChunk] = []

    def emit(a: int, b: int, section: Section) -> None:
        if max_chunks is not None and len(chunks) >= max_chunks:
            raise TooManyChunksError(max_chunks)
        chunks.append(SourcedChunk(len(chunks), text[a:b], a, b, section.page, section.heading))

    for section in spans:
        units: list[tuple[int, int, int]] = []  # (start, end, tokens)
        for a, b in _units(text, section.start, section.end):
            tokens = count(text[a:b])
            too_big = max_bytes is not None and _utf8_len(text[a:b]) > max_bytes
            if tokens <= max_tokens and not too_big:
                units.append((a, b, tokens))
                continue
            words = max(1, int(len(text[a:b].split()) * max_tokens / max(tokens, 1) * 0.9))
            for piece in chunk_text(text[a:b], size=words, overlap=0, max_bytes=max_bytes or 10**9):
                units.append((a + piece.start, a + piece.end, count(piece.text)))
        i = 0
        while i < len(units):
            j, used = i, 0
            while (
                j < len(units)
                and (
                    j == i
                    or (
                        used + units[j][2] <= max_tokens
                        and (
                            max_bytes is None
                            or _utf8_len(text[units[i][0] : units[j][1]]) <= max_bytes
                        )
                        # the pieces of the joined text, not the sum of the sentences' pieces
                        and count(text[units[i][0] : units[j][1]]) <= max_tokens
                    )
                )
            ):
                used += units[j][2]
                j += 1
            emit(units[i][0], units[j - 1][1], section)
            if j >= len(units):
                break
            back, carried = j, 0
            while back - 1 > i and carried + units[back - 1][2] <= overlap_tokens:
                back -= 1
                carried += units[back][2]
            i = back
    return chunks
