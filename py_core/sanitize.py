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
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple

from py_core import accents, alphabets, krr
from py_core.accounting import DEFAULT_DELTA, KRREvent, KrrPldAccountant
from py_core.errors import InsecureRandomnessError, InvalidParameterError
from py_core.language import HEADERS
from py_core.memo import TEXT_UNIT as memo_units
from py_core.memo import Setting, WordMemo

__all__ = [
    "DEFAULT_DELTA",
    "DEFAULT_HEADER",
    "Receipt",
    "SanitizedPrompt",
    "ScriptCount",
    "SlotCount",
    "WordSurvival",
    "check_secure_rng",
    "sanitize_prompt",
    "word_survival",
]

#: The English restoration header; :data:`py_core.language.HEADERS` has the others.
DEFAULT_HEADER = HEADERS["en"]


class WordSurvival(NamedTuple):
    """One word of the prompt: where it is and the chance it arrives unchanged.

    A named tuple rather than a frozen dataclass: a long prompt has thousands of
    words and this is built on the send path.
    """

    start: int
    end: int
    length: int  # characters perturbed in this word
    survival_probability: float  # product of each character's keep probability (Pr[T0])
    epsilon: float  # sum of each character's epsilon (its slots')
    script: str = "ascii"  # the script of its characters, or "mixed"


class SlotCount(NamedTuple):
    """How many slots of one alphabet a prompt perturbed (for the composed bound)."""

    alphabet: str
    k: int
    epsilon: float  # implemented, rounded up
    keep_probability: float
    used: int  # slots of this alphabet perturbed


class ScriptCount(NamedTuple):
    """How many characters of one script a prompt had, and what one of them costs."""

    script: str
    chars: int
    slots: tuple[str, ...]
    epsilon_per_char: float
    keep_probability: float  # of an unaccented character for "ascii"; 0 for "other"


@dataclass(frozen=True, slots=True)
class Receipt:
    """What one sanitization spent and what it means."""

    epsilon_requested: float
    # Per ASCII character, implemented, rounded up: its slot, and with the Latin mark slot
    # on (latin_marks) its mark slot too (scripts[...].epsilon_per_char of "ascii").
    epsilon_per_char: float
    keep_probability: float  # of an unaccented ASCII letter (both slots kept, marks on)
    chars_perturbed: int
    chars_protected: int
    epsilon_total_basic: float
    epsilon_total_composed: float | None  # None when not computed (compose=False)
    delta: float
    words: tuple[WordSurvival, ...]
    header_included: bool
    alphabets: str = alphabets.SCRIPTS  # "scripts", "ascii" (everything) or "fold" (accents)
    latin_marks: bool = False  # the Latin mark slot was on (the prompt had accented letters)
    scripts: tuple[ScriptCount, ...] = ()  # per script: characters and cost of each
    slots: tuple[SlotCount, ...] = ()  # per slot alphabet: how many were perturbed
    unsupported_chars: int = 0  # characters with no alphabet: sent as random ASCII
    header_language: str | None = None  # the language of the header sent, if known
    visible: str = ""  # in plain words: what the guarantee does not hide
    # With the word memo (py_core.memo): words (memo units: "Lovelace," is "Lovelace"
    # and ",") sent again as their earlier draw, and what this prompt released for the
    # first time (all of it without the memo).
    memo: bool = False
    words_reused: int = 0
    chars_reused: int = 0
    words_fresh: int = 0
    chars_fresh: int = 0
    epsilon_fresh_basic: float = 0.0  # basic composition over the fresh characters only
    # "fold": accented Latin letters sent as their ASCII base letter (py_core.accents).
    accents_folded: int = 0

    def to_dict(self) -> dict[str, object]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["words"] = [w._asdict() for w in self.words]
        out["scripts"] = [c._asdict() for c in self.scripts]
        out["slots"] = [c._asdict() for c in self.slots]
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


_WORD = krr.WORD
_CLASS = {name: i for i, name in enumerate(alphabets.CLASS_NAMES)}


class _Costs:
    """Per-character keep probability and epsilon for one (epsilon, alphabets, marks)."""

    def __init__(self, epsilon: float, mode: str, latin_marks: bool) -> None:
        self.mode = mode
        self.latin_marks = latin_marks
        self.epsilon = epsilon
        if mode == alphabets.ASCII_ONLY:
            impl = krr.implementation(epsilon)
            cost = alphabets.CharCost("ascii", ("ascii",), impl.epsilon, impl.keep_probability)
            other = cost._replace(script="other", keep_probability=0.0)
            self.table = {"ascii": cost, "other": other}
            self.by_class = [other] * len(alphabets.CLASS_NAMES)
            self.by_class[_CLASS["ascii"]] = cost
            self.by_class[_CLASS["space"]] = cost._replace(script="space", slots=(), epsilon=0.0)
        else:
            self.table = alphabets.cost_table(epsilon, latin_marks)
            self.by_class = [self.table[name] for name in alphabets.CLASS_NAMES]
        # A class whose characters all share one keep probability.
        self.uniform = {
            i
            for i, name in enumerate(alphabets.CLASS_NAMES)
            if not (name == "ascii" and latin_marks) and name != "latin"
        }

        self._keep: dict[str, float] = {}  # per character, for the non-uniform classes

    def keep(self, char: str, code: int) -> float:
        if code in self.uniform:
            return self.by_class[code].keep_probability
        found = self._keep.get(char)
        if found is None:
            found = alphabets.char_keep_probability(char, self.epsilon, self.latin_marks)
            self._keep[char] = found
        return found

    def keep_all(self, chars: str) -> float:
        """The product of the keep probabilities of ``chars`` (all of non-uniform classes)."""
        table = self._keep
        try:
            return math.prod(map(table.__getitem__, chars))
        except KeyError:
            for char in chars:
                self.keep(char, -1)
            return math.prod(map(table.__getitem__, chars))

    def script_name(self, code: int) -> str:
        if self.mode == alphabets.ASCII_ONLY:
            return "ascii" if code == _CLASS["ascii"] else "other"
        return alphabets.CLASS_NAMES[code]


def _classes(text: str, mode: str) -> bytes:
    cls = alphabets.classify(text)
    if mode == alphabets.ASCII_ONLY:
        # One alphabet: everything that is not ASCII or whitespace is "other".
        table = bytes(
            v if v in (_CLASS["space"], _CLASS["ascii"]) else _CLASS["other"] for v in range(256)
        )
        cls = cls.translate(table)
    return cls


def _word_survival(
    text: str, cls: bytes, spans: list[tuple[int, int]], costs: _Costs
) -> tuple[WordSurvival, ...]:
    """Per-word survival for the preview; words are maximal runs of non-whitespace.

    ``spans`` are sorted and disjoint; their characters are not perturbed, so
    they do not count towards a word.  A word's survival is the product of its
    characters' keep probabilities, its epsilon the sum of theirs.  On the send
    path: a word is counted per class with ``bytes.count`` (C speed); only
    characters whose keep probability is their own (Latin marks on) are looked
    at one by one.
    """
    words: list[WordSurvival] = []
    by_class = costs.by_class
    present = [
        code
        for code in range(len(alphabets.CLASS_NAMES))
        if code != _CLASS["space"] and bytes([code]) in cls
    ]
    if len(present) == 1 and present[0] in costs.uniform and not spans:
        # One script with one keep probability (e.g. English): the original fast loop.
        cost = by_class[present[0]]
        p, eps, name = cost.keep_probability, cost.epsilon, costs.script_name(present[0])
        for match in _WORD.finditer(text):
            start, end = match.span()
            count = end - start
            words.append(WordSurvival(start, end, count, p**count, count * eps, name))
        return tuple(words)
    singles = [(code, bytes([code]), by_class[code]) for code in present]
    span_index = 0
    for match in _WORD.finditer(text):
        start, end = match.span()
        while span_index < len(spans) and spans[span_index][1] <= start:
            span_index += 1
        if span_index < len(spans) and spans[span_index][0] < end:
            word = _word_with_spans(text, cls, start, end, spans[span_index:], costs)
            if word is not None:
                words.append(word)
            continue
        count, survival, eps, found, own = 0, 1.0, 0.0, -1, 0
        for code, key, cost in singles:
            n = cls.count(key, start, end)
            if not n:
                continue
            found = code if found == -1 else -2
            count += n
            eps += n * cost.epsilon
            if code in costs.uniform:
                survival *= cost.keep_probability**n
            else:
                own += n
        if own == end - start:  # e.g. a French word: every character has its own keep
            survival *= costs.keep_all(text[start:end])
        elif own:
            for position in range(start, end):
                if cls[position] not in costs.uniform:
                    survival *= costs.keep(text[position], cls[position])
        script = costs.script_name(found) if found >= 0 else "mixed"
        words.append(WordSurvival(start, end, count, survival, eps, script))
    return tuple(words)


def _word_with_spans(
    text: str, cls: bytes, start: int, end: int, spans: list[tuple[int, int]], costs: _Costs
) -> WordSurvival | None:
    inside = [(max(start, s), min(end, e)) for s, e in spans if s < end and e > start]
    count, survival, eps, seen = 0, 1.0, 0.0, set()
    for position in range(start, end):
        if any(s <= position < e for s, e in inside):
            continue
        code = cls[position]
        count += 1
        survival *= costs.keep(text[position], code)
        eps += costs.by_class[code].epsilon
        seen.add(code)
    if not count:
        return None
    script = costs.script_name(seen.pop()) if len(seen) == 1 else "mixed"
    return WordSurvival(start, end, count, survival, eps, script)


def _counts(
    cls: bytes, spans: list[tuple[int, int]], costs: _Costs
) -> tuple[tuple[ScriptCount, ...], tuple[SlotCount, ...], int]:
    pieces, cursor = [], 0
    for start, end in spans:
        pieces.append(cls[cursor:start])
        cursor = end
    pieces.append(cls[cursor:])
    free = b"".join(pieces)
    scripts: list[ScriptCount] = []
    slot_totals: dict[str, int] = {}
    for code, name in enumerate(alphabets.CLASS_NAMES):
        count = free.count(bytes([code]))
        if not count or name == "space":
            continue
        cost = by = costs.by_class[code]
        scripts.append(
            ScriptCount(
                costs.script_name(code), count, by.slots, cost.epsilon, cost.keep_probability
            )
        )
        for slot in by.slots:
            slot_totals[slot] = slot_totals.get(slot, 0) + count
    impls = alphabets.slot_implementations(costs.epsilon)
    slots = tuple(
        SlotCount(name, impls[name].k, impls[name].epsilon, impls[name].keep_probability, n)
        for name, n in slot_totals.items()
    )
    unsupported = free.count(bytes([_CLASS["other"]]))
    return tuple(scripts), slots, unsupported


def word_survival(
    text: str, epsilon: float, alphabets_mode: str = alphabets.SCRIPTS
) -> tuple[WordSurvival, ...]:
    """Per-word Pr[T0] of ``text`` as :func:`sanitize_prompt` would perturb it (no spans)."""
    mode = alphabets.validate_mode(alphabets_mode)
    eps = krr.validate_epsilon(epsilon)
    if mode == alphabets.FOLD:
        text = accents.fold(text)[0]
    cls = _classes(text, mode)
    latin_marks = mode == alphabets.SCRIPTS and bytes([_CLASS["latin"]]) in cls
    return _word_survival(text, cls, [], _Costs(eps, mode, latin_marks))


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
    alphabets_mode: str = alphabets.SCRIPTS,
    header_language: str | None = None,
    memo: WordMemo | None = None,
) -> SanitizedPrompt:
    """Perturb ``text`` outside ``protected_spans`` and return what to send, with a receipt.

    ``secure=True`` (the default) refuses a seeded RNG.  ``header=None`` sends
    the perturbed text alone.  ``compose=False`` skips the tight composed bound
    (its cost grows with the length; the basic bound is always given).
    ``alphabets_mode``: ``"scripts"`` perturbs each character within its script
    (:mod:`py_core.alphabets`; epsilon per slot), ``"ascii"`` puts everything into
    printable ASCII (Veil's original mechanism), ``"fold"`` sends every accented
    Latin letter as its ASCII base letter and the rest as ``"scripts"``
    (:mod:`py_core.accents`: pre-processing of the person's text, so ``é`` and ``e``
    are one input; protected spans are sent as typed).  ``header_language`` is only
    reported in the receipt.

    ``memo`` (:class:`py_core.memo.WordMemo`): each word already in it is sent as
    its stored draw, each other word is drawn fresh and added to it (the caller
    stores ``memo.added``); the receipt says how many of each.
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    if header is not None and not isinstance(header, str):
        raise InvalidParameterError(f"header must be a str or None; got {type(header).__name__}")
    if secure:
        check_secure_rng(rng)
    mode = alphabets.validate_mode(alphabets_mode)
    impl = krr.implementation(krr.validate_epsilon(epsilon))
    spans = _validate_spans(protected_spans, len(text))
    source, folded = _folded(text, spans) if mode == alphabets.FOLD else (text, 0)
    cls = _classes(source, mode)
    latin_marks = False
    if mode == alphabets.SCRIPTS:
        latin = bytes([_CLASS["latin"]])
        latin_marks = latin in cls and (
            not spans or any(latin in cls[a:b] for a, b in _free_ranges(spans, len(text)))
        )
    pieces: list[str] = []
    cursor = 0
    for start, end in spans:
        pieces.append(_perturb(source[cursor:start], impl.requested, rng, mode, latin_marks))
        pieces.append(text[start:end])
        cursor = end
    pieces.append(_perturb(source[cursor:], impl.requested, rng, mode, latin_marks))
    perturbed = "".join(pieces)
    costs = _Costs(impl.requested, mode, latin_marks)
    words = _word_survival(source, cls, spans, costs)
    scripts, slots, unsupported = _counts(cls, spans, costs)
    chars = sum(c.chars for c in scripts)
    basic = sum(c.chars * c.epsilon_per_char for c in scripts)
    fresh = _Fresh(len(words), chars, basic)
    if memo is not None:
        perturbed, fresh = _apply_memo(
            text, perturbed, cls, spans, costs, memo, Setting(mode, latin_marks, impl.requested)
        )
    composed = None
    if compose:
        accountant = KrrPldAccountant()
        for slot in slots:
            accountant.compose(KRREvent(slot.epsilon, slot.used, slot.k))
        composed = accountant.get_epsilon(delta)
    # What one ASCII character costs: with the Latin mark slot on, its two slots.
    ascii_cost = costs.table["ascii"]
    receipt = Receipt(
        epsilon_requested=impl.requested,
        epsilon_per_char=ascii_cost.epsilon,
        keep_probability=ascii_cost.keep_probability,
        chars_perturbed=chars,
        chars_protected=sum(end - start for start, end in spans),
        epsilon_total_basic=basic,
        epsilon_total_composed=composed,
        delta=delta,
        words=words,
        header_included=bool(header),
        alphabets=mode,
        latin_marks=latin_marks,
        scripts=scripts,
        slots=slots,
        unsupported_chars=unsupported,
        header_language=header_language if header else None,
        visible=_visible(mode, scripts, latin_marks, bool(header and header_language)),
        memo=memo is not None,
        words_reused=fresh.words_reused,
        chars_reused=fresh.chars_reused,
        words_fresh=fresh.words,
        chars_fresh=fresh.chars,
        epsilon_fresh_basic=fresh.epsilon,
        accents_folded=folded,
    )
    sent = (header or "") + perturbed
    return SanitizedPrompt(text=sent, perturbed=perturbed, receipt=receipt)


class _Fresh(NamedTuple):
    words: int
    chars: int
    epsilon: float
    words_reused: int = 0
    chars_reused: int = 0


def _apply_memo(
    text: str,
    perturbed: str,
    cls: bytes,
    spans: list[tuple[int, int]],
    costs: _Costs,
    memo: WordMemo,
    setting: Setting,
) -> tuple[str, _Fresh]:
    """``perturbed`` with every memoised word replaced by its stored draw.

    The units are :data:`py_core.memo.UNIT` runs inside the words between the
    protected spans (what k-RR perturbed).  A unit not in the memo keeps the fresh
    draw just made for it -- an ordinary k-RR release -- and is added, so a second
    occurrence in the same prompt is sent as the first.  The fresh draws of the
    other units are discarded unseen.  (The receipt's ``words_*`` count units.)
    """
    out: list[str] = []
    cursor = 0
    fresh_words = fresh_chars = reused_words = reused_chars = 0
    fresh_eps = 0.0
    by_class = costs.by_class
    here: dict[str, str] = {}  # units met in this prompt -> their form (saves the memo's lookup)
    for start, end in _free_ranges(spans, len(text)):
        for match in memo_units.finditer(text, start, end):
            a, b = match.span()
            word = match.group()
            stored = here.get(word)
            if stored is None:
                stored = memo.get(word, setting)
            if stored is None:
                slot_counts: dict[str, int] = {}
                for code in set(cls[a:b]):
                    n = cls.count(bytes([code]), a, b)
                    fresh_eps += n * by_class[code].epsilon
                    for slot in by_class[code].slots:
                        slot_counts[slot] = slot_counts.get(slot, 0) + n
                here[word] = perturbed[a:b]
                memo.add(word, setting, here[word], slot_counts)
                fresh_words += 1
                fresh_chars += b - a
                continue
            here[word] = stored
            out.append(perturbed[cursor:a])
            out.append(stored)
            cursor = b
            reused_words += 1
            reused_chars += b - a
    out.append(perturbed[cursor:])
    return "".join(out), _Fresh(fresh_words, fresh_chars, fresh_eps, reused_words, reused_chars)


def _visible(mode: str, scripts: Sequence[ScriptCount], latin_marks: bool, language: bool) -> str:
    """What the receipt says stays visible, in plain words."""
    parts = ["the length of every word and where words, lines and spaces are"]
    if mode != alphabets.ASCII_ONLY:
        # With the mark slot on, ASCII and accented Latin are one class (e and é alike).
        rename = {"latin": "ascii"} if latin_marks else {}
        names = sorted({rename.get(s.script, s.script) for s in scripts if s.script != "other"})
        parts.append(
            "which script each character is in" + (f" ({', '.join(names)})" if names else "")
        )
        if latin_marks:
            parts.append("that the prompt has accented Latin letters (not which ones)")
    if language:
        parts.append("the language of the header")
    out = "Visible to the site: " + "; ".join(parts) + "."
    unsupported = sum(s.chars for s in scripts if s.script == "other")
    if unsupported:
        what = (
            "without an alphabet (e.g. Chinese, emoji)"
            if mode != alphabets.ASCII_ONLY
            else "outside printable ASCII"
        )
        out += (
            f" {unsupported} character{'s' if unsupported != 1 else ''} {what} went as "
            "random ASCII: the model cannot read them."
        )
    return out


def _folded(text: str, spans: list[tuple[int, int]]) -> tuple[str, int]:
    """``text`` with accents folded outside ``spans`` (same length), and how many were."""
    folded, count = accents.fold(text)
    if not count or not spans:
        return folded, count
    pieces, cursor = [], 0
    for start, end in spans:
        pieces += [folded[cursor:start], text[start:end]]
        count -= sum(1 for a, b in zip(text[start:end], folded[start:end], strict=True) if a != b)
        cursor = end
    pieces.append(folded[cursor:])
    return "".join(pieces), count


def _free_ranges(spans: list[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    out, cursor = [], 0
    for start, end in spans:
        out.append((cursor, start))
        cursor = end
    out.append((cursor, length))
    return out


def _perturb(
    text: str, epsilon: float, rng: krr.RandomSource | None, mode: str, latin_marks: bool
) -> str:
    if mode == alphabets.ASCII_ONLY:
        return krr.perturb(text, epsilon, rng=rng)
    return alphabets.perturb(text, epsilon, rng=rng, latin_marks=latin_marks)
