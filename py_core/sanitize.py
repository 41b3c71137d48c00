"""Turn a prompt into the text that leaves the person's hands, with a receipt.

:func:`sanitize_prompt` perturbs every character outside the protected spans
with k-RR (:mod:`py_core.krr`), prefixes an instruction asking the receiving
model to silently restore the typos first, and returns a :class:`Receipt`: the
epsilon per character actually implemented, how many characters were perturbed,
the total epsilon by basic composition and the tight composed bound
(:class:`py_core.accounting.KrrPldAccountant`, exact n-fold k-RR), and per-word survival
probabilities for a preview.

Protected spans are left untouched: they hold values another mechanism already
sanitized (RootGuard's noisy numbers), which are public by post-processing.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple

from py_core import krr
from py_core.accounting import DEFAULT_DELTA, KRREvent, KrrPldAccountant
from py_core.errors import InsecureRandomnessError, InvalidParameterError

__all__ = [
    "DEFAULT_DELTA",
    "DEFAULT_HEADER",
    "Receipt",
    "SanitizedPrompt",
    "WordSurvival",
    "check_secure_rng",
    "sanitize_prompt",
]

DEFAULT_HEADER = (
    "The message below was typed with many deliberate typos. First silently restore the "
    "intended words (fix spelling from context), then answer the restored message. "
    "Do not mention the typos or the restoration.\n\n"
)


class WordSurvival(NamedTuple):
    """One word of the prompt: where it is and the chance it arrives unchanged.

    A named tuple rather than a frozen dataclass: a long prompt has thousands of
    words and this is built on the send path.
    """

    start: int
    end: int
    length: int  # characters perturbed in this word
    survival_probability: float  # p^length (Pr[T0], docs/methods/krr.md)
    epsilon: float  # length * epsilon per character


@dataclass(frozen=True, slots=True)
class Receipt:
    """What one sanitization spent and what it means."""

    epsilon_requested: float
    epsilon_per_char: float  # implemented (after quantisation), rounded up
    keep_probability: float
    chars_perturbed: int
    chars_protected: int
    epsilon_total_basic: float
    epsilon_total_composed: float | None  # None when not computed (compose=False)
    delta: float
    words: tuple[WordSurvival, ...]
    header_included: bool

    def to_dict(self) -> dict[str, object]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["words"] = [w._asdict() for w in self.words]
        return out


@dataclass(frozen=True, slots=True)
class SanitizedPrompt:
    text: str  # what to send: header + perturbed prompt
    perturbed: str  # the perturbed prompt alone (same length as the original)
    receipt: Receipt


def check_secure_rng(rng: object) -> None:
    """Refuse an RNG that is not a CSPRNG where real data is protected.

    Accepted: ``None`` (a fresh :class:`random.SystemRandom`), a
    ``SystemRandom``, or an object that declares ``veil_secure = True`` (e.g. a
    wrapper around ``crypto.getRandomValues``).
    """
    if rng is None or isinstance(rng, random.SystemRandom):
        return
    if getattr(rng, "veil_secure", False) is True:
        return
    raise InsecureRandomnessError(
        f"a reproducible RNG ({type(rng).__name__}) was passed in secure mode; real prompts "
        "must be protected with a CSPRNG: pass rng=None, or secure=False for experiments"
    )


def _validate_spans(spans: Iterable[Sequence[int]], length: int) -> list[tuple[int, int]]:
    result: list[tuple[int, int]] = []
    for span in spans:
        if len(span) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in span):
            raise InvalidParameterError(f"a protected span must be a pair of ints; got {span!r}")
        start, end = span
        if not 0 <= start <= end <= length:
            raise InvalidParameterError(
                f"protected span {span!r} is outside the text (length {length})"
            )
        if start < end:
            result.append((start, end))
    result.sort()
    for (_, end_a), (start_b, _) in itertools.pairwise(result):
        if start_b < end_a:
            raise InvalidParameterError(f"protected spans overlap at position {start_b}")
    return result


_WORD = re.compile(r"\S+")


def _word_survival(
    text: str, spans: list[tuple[int, int]], impl: krr.Implementation
) -> tuple[int, tuple[WordSurvival, ...]]:
    """Per-word survival for the preview; words are maximal runs of non-whitespace.

    ``spans`` are sorted and disjoint; their characters are not perturbed, so
    they do not count towards a word's length.
    """
    words: list[WordSurvival] = []
    total = 0
    p = impl.keep_probability
    eps = impl.epsilon
    span_index = 0
    for match in _WORD.finditer(text):
        start, end = match.span()
        count = end - start
        while span_index < len(spans) and spans[span_index][1] <= start:
            span_index += 1
        probe = span_index
        while probe < len(spans) and spans[probe][0] < end:
            count -= min(end, spans[probe][1]) - max(start, spans[probe][0])
            probe += 1
        if count:
            words.append(WordSurvival(start, end, count, p**count, count * eps))
            total += count
    return total, tuple(words)


def sanitize_prompt(
    text: str,
    epsilon: float,
    *,
    protected_spans: Iterable[Sequence[int]] = (),
    header: str | None = DEFAULT_HEADER,
    rng: krr.RandomSource | None = None,
    secure: bool = True,
    delta: float = DEFAULT_DELTA,
    compose: bool = True,
) -> SanitizedPrompt:
    """Perturb ``text`` outside ``protected_spans`` and return what to send, with a receipt.

    ``secure=True`` (the default) refuses a seeded RNG.  ``header=None`` sends
    the perturbed text alone.  ``compose=False`` skips the tight composed bound
    (its cost grows with the length; the basic bound is always given).
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    if header is not None and not isinstance(header, str):
        raise InvalidParameterError(f"header must be a str or None; got {type(header).__name__}")
    if secure:
        check_secure_rng(rng)
    impl = krr.implementation(krr.validate_epsilon(epsilon))
    spans = _validate_spans(protected_spans, len(text))
    pieces: list[str] = []
    cursor = 0
    for start, end in spans:
        pieces.append(krr.perturb(text[cursor:start], impl.requested, rng=rng))
        pieces.append(text[start:end])
        cursor = end
    pieces.append(krr.perturb(text[cursor:], impl.requested, rng=rng))
    perturbed = "".join(pieces)
    chars, words = _word_survival(text, spans, impl)
    eps = impl.epsilon
    composed = (
        KrrPldAccountant().compose(KRREvent(eps, chars)).get_epsilon(delta) if compose else None
    )
    receipt = Receipt(
        epsilon_requested=impl.requested,
        epsilon_per_char=eps,
        keep_probability=impl.keep_probability,
        chars_perturbed=chars,
        chars_protected=sum(end - start for start, end in spans),
        epsilon_total_basic=chars * eps,
        epsilon_total_composed=composed,
        delta=delta,
        words=words,
        header_included=bool(header),
    )
    sent = (header or "") + perturbed
    return SanitizedPrompt(text=sent, perturbed=perturbed, receipt=receipt)
