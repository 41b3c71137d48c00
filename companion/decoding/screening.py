"""What the copy-aware defense screens: verbatim runs of the context and PII-like spans.

:class:`RunTracker` follows, token by token, the longest suffix of the generated
text that also occurs contiguously in a token sequence (the retrieved context,
or its PII spans).  :func:`pii_spans` finds e-mails, phone numbers, IDs, URLs,
dates of birth and name-like spans in the context text with regular
expressions -- a heuristic recogniser, stated as such: it can miss PII (a name
written in lower case) and flag non-PII (a capitalised disease name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

_EMAIL = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"
_URL = r"(?:https?://|www\.)[^\s<>\"']+"
_PHONE = r"(?:\+?\d{1,3}[\s.-]?)?(?:\(\d{3}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4}(?:\s?(?:x|ext\.?)\s?\d{1,5})?"
_SSN = r"\b\d{3}-\d{2}-\d{4}\b"
_LONG_ID = r"\b(?=[A-Z0-9-]*\d)[A-Z0-9][A-Z0-9-]{5,}\b"
_DATE = r"\b(?:\d{1,2}[/-]\d{1,2}[/-]\d{2,4}|\d{4}-\d{2}-\d{2})\b"
_TITLE_NAME = r"\b(?:Dr|Mr|Mrs|Ms|Miss|Prof)\.?\s+[A-Z][a-zA-Z'-]+(?:\s+[A-Z][a-zA-Z'-]+){0,2}"
_CUE_NAME = (
    r"(?:(?<=name is )|(?<=Name: )|(?<=Patient: )|(?<=patient )|(?<=I am )|(?<=I'm )"
    r"|(?<=Signed, )|(?<=Regards, )|(?<=From: )|(?<=To: ))"
    r"[A-Z][a-zA-Z'-]+(?:\s+[A-Z][a-zA-Z'-]+){0,2}"
)
# Two or three capitalised words not at the start of a sentence: name-like.
_CAPS_PAIR = r"(?<![.!?:]\s)(?<!^)\b[A-Z][a-z'-]+(?:\s+[A-Z][a-z'-]+){1,2}\b"

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("email", re.compile(_EMAIL)),
    ("url", re.compile(_URL)),
    ("phone", re.compile(_PHONE)),
    ("ssn", re.compile(_SSN)),
    ("id", re.compile(_LONG_ID)),
    ("date", re.compile(_DATE)),
    ("name", re.compile(_TITLE_NAME)),
    ("name", re.compile(_CUE_NAME)),
    ("name", re.compile(_CAPS_PAIR, re.MULTILINE)),
)


@dataclass(frozen=True, slots=True)
class PIISpan:
    kind: str
    start: int
    end: int
    text: str


def pii_spans(text: str) -> list[PIISpan]:
    """PII-like spans of ``text``, merged where they overlap, in order."""
    found: list[PIISpan] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if m.end() > m.start():
                found.append(PIISpan(kind, m.start(), m.end(), m.group(0)))
    found.sort(key=lambda s: (s.start, -s.end))
    merged: list[PIISpan] = []
    for span in found:
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            if span.end > last.end:
                merged[-1] = PIISpan(last.kind, last.start, span.end, text[last.start : span.end])
            continue
        merged.append(span)
    return merged


@dataclass(slots=True)
class RunTracker:
    """Longest suffix of the generated tokens that occurs contiguously in ``sequence``.

    ``sequence`` may hold ``-1`` separators between segments (never matched).
    """

    sequence: Sequence[int]
    index: dict[int, list[int]] = field(default_factory=dict)
    positions: list[int] = field(default_factory=list)  # end positions of the current match
    length: int = 0

    def __post_init__(self) -> None:
        for i, tok in enumerate(self.sequence):
            if tok >= 0:
                self.index.setdefault(int(tok), []).append(i)

    def _continuations(self, token: int) -> list[int]:
        seq = self.sequence
        n = len(seq)
        return [j + 1 for j in self.positions if j + 1 < n and seq[j + 1] == token]

    def extension_length(self, token: int) -> int:
        """Length of the match if ``token`` were generated next (0: not in the sequence)."""
        if self.length and self._continuations(token):
            return self.length + 1
        return 1 if token in self.index else 0

    def advance(self, token: int) -> None:
        cont = self._continuations(token) if self.length else []
        if cont:
            self.positions = cont
            self.length += 1
        elif token in self.index:
            self.positions = list(self.index[token])
            self.length = 1
        else:
            self.positions = []
            self.length = 0


def context_token_ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def pii_token_sequence(tokenizer: Any, text: str) -> tuple[list[int], list[PIISpan]]:
    """Token ids of the PII-like spans of ``text``, joined by -1 separators.

    Each span is tokenised with its preceding space when it has one, as it
    appears in running text.
    """
    spans = pii_spans(text)
    seq: list[int] = []
    for span in spans:
        lead = " " if span.start > 0 and text[span.start - 1].isspace() else ""
        seq.extend(context_token_ids(tokenizer, lead + span.text))
        seq.append(-1)
    return seq, spans


def distinctive_tokens(tokenizer: Any, ids: Iterable[int]) -> set[int]:
    """Tokens that mark the start of a PII span: two or more letters/digits when decoded."""
    result: set[int] = set()
    for tok in set(ids):
        if tok < 0:
            continue
        piece = tokenizer.decode([tok])
        if sum(ch.isalnum() for ch in piece) >= 2:
            result.add(tok)
    return result


_WORD_STARTS: dict[int, frozenset[int]] = {}


def word_start_tokens(tokenizer: Any) -> frozenset[int]:
    """Token ids that begin a new word (decode to text starting with whitespace); cached."""
    key = id(tokenizer)
    cached = _WORD_STARTS.get(key)
    if cached is None:
        vocab = tokenizer.get_vocab()
        ids = []
        for tok_id in vocab.values():
            piece = tokenizer.decode([tok_id])
            if piece[:1].isspace():
                ids.append(int(tok_id))
        cached = frozenset(ids)
        _WORD_STARTS[key] = cached
    return cached
