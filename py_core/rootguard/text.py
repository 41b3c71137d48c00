"""Finding the person's declared values in free text and replacing them.

The RootGuard paper assumes the values are already recognised; a prompt is free
text.  :func:`find_mentions` looks for numbers that

1. stand in a recognised context -- a unit after them ("81 kg", "178 lb",
   "5'11\\"", "1.80 m", "5.4 mmol/L", "40 U/L"), an alias of a profile value
   shortly before them ("weight 81", "AST: 40", "my BMI is 24.9"; paired as in
   "AST/ALT 40/35"), or an age phrase ("I'm 52", "52 years old", "52-year-old",
   "aged 52", the clinical shorthand "52M" / "52 F"); and
2. equal the person's true value of such a value, converted to the written unit,
   at the written precision (half a unit of the last written digit, plus half the
   declared precision for roots; plus 0.5% for derived values the person may
   have computed from rounded inputs).

Numbers inside dates, times, phone numbers, long identifiers and ranges
("70-80 kg", "between 70 and 80") are never touched.  With ``drift=True`` a number
in such a context that is *not* the stored value -- "weight 83.4 kg" with 82.4
stored, "I'm 53" with 52 -- is returned too (``Mention.drift``), as long as it lies
in the value's public range (a root's domain; for a derived value, its formula over
the corners of its roots' domains): the caller draws it as a new disclosure.  A
number outside that range ("I lost 5 kg", "the map 2") is not a possible value of
the root and is left as typed.  :func:`replace_mentions`
writes the noisy value in the same unit and with the same number of decimals,
and returns the positions of the replacements in the new text so the k-RR step
can leave them alone.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from py_core.rootguard.patterns import (
    _AGE_AFTER,
    _AGE_BEFORE,
    _AGE_SEX,
    _BLOOD_PRESSURE,
    _BP_WORDS,
    _CONNECTOR,
    _FEET_INCHES,
    _FILLER,
    _LIST_GAP,
    _NEXT_NUMBER,
    _NUMBER,
    _PAIR,
    _PAIR_JOIN,
    _PROTECTED,
    _SCAN_DATES,
    _UNIT_RE,
    _UNIT_WORDS,
)
from py_core.rootguard.profile import DerivedSpec, Profile, RootSpec
from py_core.rootguard.units import QUANTITIES, convert
from py_core.rootguard.written import extra_unit_at

__all__ = [
    "AliasHits",
    "Mention",
    "Replacement",
    "alias_hits",
    "dates_and_times",
    "find_mentions",
    "names_before",
    "replace_mentions",
    "unit_after",
]


@dataclass(frozen=True, slots=True)
class Mention:
    """A span of text that writes the person's value ``name``."""

    start: int
    end: int
    name: str
    original: str
    unit: str  # a unit of the value's quantity, or "ft_in"
    decimals: int
    # For "ft_in" the span holds two numbers; their offsets inside the span.
    parts: tuple[tuple[int, int], ...] = ()
    # A number in the value's context that is *not* its stored value (``drift=True``
    # of :func:`find_mentions`): ``value`` is what was written, in the value's own unit.
    drift: bool = False
    value: float | None = None


@dataclass(frozen=True, slots=True)
class Replacement:
    """What was written instead, and where it now stands in the new text."""

    name: str
    original: str
    replacement: str
    start: int
    end: int


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def _unit_at(text: str, pos: int) -> tuple[str, int] | None:
    """The unit written right after position ``pos``, and where it ends."""
    m = _UNIT_RE.match(text, pos)
    if not m:
        return None
    for i, (_, unit) in enumerate(_UNIT_WORDS):
        if m.group(f"u{i}") is not None:
            return unit, m.end()
    return None  # pragma: no cover


def _alias_table(profile: Profile) -> tuple[re.Pattern[str], dict[str, list[str]]]:
    """One pattern matching every alias (longest first), and alias -> the names it denotes."""
    return _alias_table_of(tuple((name, profile.spec(name).aliases) for name in profile.names))


@functools.lru_cache(maxsize=32)
def _alias_table_of(
    aliases: tuple[tuple[str, tuple[str, ...]], ...],
) -> tuple[re.Pattern[str], dict[str, list[str]]]:
    names_of: dict[str, list[str]] = {}
    for name, own in aliases:
        for alias in (*own, name.replace("_", " ")):
            key = " ".join(alias.lower().split())
            if name not in names_of.setdefault(key, []):
                names_of[key].append(name)
    alternatives = sorted(names_of, key=len, reverse=True)
    body = "|".join(re.escape(a).replace(r"\ ", r"\s+") for a in alternatives)
    return re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", re.IGNORECASE), names_of


@dataclass(frozen=True, slots=True)
class _AliasHits:
    """Every alias occurrence in a text, sorted by end position."""

    ends: list[int]
    hits: list[tuple[int, int, str]]  # (end, start, name)

    @classmethod
    def scan(cls, text: str, table: tuple[re.Pattern[str], dict[str, list[str]]]) -> _AliasHits:
        pattern, names_of = table
        hits = sorted(
            (m.end(), m.start(), name)
            for m in pattern.finditer(text)
            for name in names_of[" ".join(m.group(0).lower().split())]
        )
        return cls([h[0] for h in hits], hits)


def _aliased_names(text: str, start: int, hits: _AliasHits) -> set[str]:
    """Names whose alias ends shortly before ``start`` with only filler words between."""
    window_start = max(0, start - 60)
    cut = max(text.rfind(c, window_start, start) for c in ";!?\n")  # -1 when none
    found: dict[str, int] = {}
    for end, alias_start, name in hits.hits[
        bisect_left(hits.ends, window_start) : bisect_right(hits.ends, start)
    ]:
        if alias_start < window_start or alias_start <= cut:
            continue
        if _FILLER.match(text[end:start]) and end > found.get(name, -1):
            found[name] = end
    if not found:
        return set()
    nearest = max(found.values())
    return {name for name, end in found.items() if end == nearest}


def _aliased_pair(text: str, start: int, hits: _AliasHits) -> tuple[set[str], set[str]] | None:
    """The names of "LABEL1/LABEL2" written shortly before ``start`` (only filler between)."""
    window_start = max(0, start - 60)
    cut = max(text.rfind(c, window_start, start) for c in ";!?\n")
    window = hits.hits[bisect_left(hits.ends, window_start) : bisect_right(hits.ends, start)]
    seconds = [h for h in window if h[1] > cut and _FILLER.match(text[h[0] : start])]
    if not seconds:
        return None
    second_end = max(h[0] for h in seconds)
    second = [h for h in seconds if h[0] == second_end]
    second_start = min(h[1] for h in second)
    firsts = [
        h for h in window if h[0] <= second_start and h[1] > cut
        and _PAIR_JOIN.match(text[h[0] : second_start])
    ]  # fmt: skip
    if not firsts:
        return None
    first_end = max(h[0] for h in firsts)
    return (
        {h[2] for h in firsts if h[0] == first_end},
        {h[2] for h in second},
    )


def _tolerance(profile: Profile, name: str, unit: str, decimals: int, written: float) -> float:
    spec = profile.spec(name)
    tol = 0.5 * 10.0**-decimals
    if isinstance(spec, DerivedSpec):
        return tol + 0.005 * abs(written)
    step = spec.grid.step
    return tol + 0.5 * abs(convert(step, spec.quantity, spec.unit, unit))


def _matching(
    profile: Profile,
    truth: Mapping[str, float],
    candidates: set[str],
    written: float,
    unit: str | None,
    decimals: int,
) -> list[str]:
    out = []
    for name in profile.names:
        if name not in candidates or name not in truth:
            continue
        spec = profile.spec(name)
        target_unit = spec.unit if unit is None else unit
        if target_unit not in QUANTITIES[spec.quantity].factors:
            continue
        value = convert(truth[name], spec.quantity, spec.unit, target_unit)
        # Strict: the written interval must overlap the declared value's rounding interval.
        if abs(value - written) < _tolerance(profile, name, target_unit, decimals, written) - 1e-9:
            out.append(name)
    return out


# After an age phrase ("I'm 30 ..."), a number followed by one of these words is a
# count or a duration, not an age; only a drift needs this (an exact match is rare).
_NOT_AN_AGE = re.compile(
    r"^\s*(?:minutes?|mins?|hours?|hrs?|h\b|seconds?|secs?|days?|weeks?|months?|times|"
    r"percent|per\s*cent|miles?|km|steps|people|of\b|out\s+of|points?|dollars?|euros?|"
    r"pounds?\s+(?:short|over)|x\b|st\b|nd\b|rd\b|th\b)",
    re.IGNORECASE,
)


# Quantities whose unit alone says "this is one of the person's body measures".
_BODY_QUANTITIES = frozenset({"age", "mass", "length", "pressure"})


class _Ranges:
    """The public range of each value: a root's domain; a derived value's formula
    evaluated at every corner of its roots' domains (exact for a formula monotone in
    each root, as every built-in one is), computed once per call."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.cache: dict[str, tuple[float, float] | None] = {}

    def of(self, name: str) -> tuple[float, float] | None:
        if name not in self.cache:
            self.cache[name] = self._compute(name)
        return self.cache[name]

    def _compute(self, name: str) -> tuple[float, float] | None:
        profile = self.profile
        if name in profile.roots:
            grid = profile.roots[name].grid
            return (grid.lo, grid.hi)
        deps = sorted(profile.root_dependencies(name))
        if not deps or len(deps) > 10:
            return None
        found = []
        for corner in itertools.product(*((0, 1) for _ in deps)):
            point = {
                d: (profile.roots[d].grid.lo, profile.roots[d].grid.hi)[c]
                for d, c in zip(deps, corner, strict=True)
            }
            try:
                value = profile.evaluate(name, point)
            except (ArithmeticError, ValueError):
                continue
            if math.isfinite(value):
                found.append(value)
        return (min(found), max(found)) if found else None


def _drifting(
    profile: Profile,
    truth: Mapping[str, float],
    ranges: _Ranges,
    candidates: set[str],
    written: float,
    unit: str | None,
) -> tuple[str, float] | None:
    """The value ``written`` (in ``unit``; None: the value's own) most plausibly stands
    for when it is not the stored value, and ``written`` in that value's unit.

    Only values whose public range holds ``written`` qualify; among them the one whose
    stored value is nearest (in privacy units, or range widths for a derived value),
    then one with no stored value, then profile order."""
    options = []
    for order, name in enumerate(profile.names):
        if name not in candidates:
            continue
        spec = profile.spec(name)
        from_unit = spec.unit if unit is None else unit
        if from_unit not in QUANTITIES[spec.quantity].factors:
            continue
        value = convert(written, spec.quantity, from_unit, spec.unit)
        span = ranges.of(name)
        if span is None or not span[0] - 1e-9 <= value <= span[1] + 1e-9:
            continue
        if name in truth:
            width = (
                spec.privacy_unit if isinstance(spec, RootSpec) else max(span[1] - span[0], 1e-12)
            )
            distance = abs(value - truth[name]) / width
        else:
            distance = math.inf
        options.append((distance, order, name, value))
    if not options:
        return None
    _, _, name, value = min(options)
    return name, value


def find_mentions(
    text: str, profile: Profile, true_values: Mapping[str, float], *, drift: bool = False
) -> list[Mention]:
    """Every place ``text`` writes one of the person's values (see the module doc).

    ``drift=True`` also returns, with ``Mention.drift`` set, every number in a value's
    context that is not its stored value but lies in its public range.
    """
    truth = profile.evaluate_all({k: v for k, v in true_values.items() if v is not None})
    ranges = _Ranges(profile)
    aliases = _AliasHits.scan(text, _alias_table(profile))
    taken = [False] * (len(text) + 1)
    for m in _PROTECTED.finditer(text):
        for i in range(m.start(), m.end()):
            taken[i] = True
    mentions: list[Mention] = []

    def free(a: int, b: int) -> bool:
        return not any(taken[a:b])

    def claim(mention: Mention) -> None:
        mentions.append(mention)
        for i in range(mention.start, mention.end):
            taken[i] = True

    lengths = {n for n in profile.names if profile.spec(n).quantity == "length"}
    for m in _FEET_INCHES.finditer(text):
        if not free(m.start(), m.end()):
            continue
        feet, inches = float(m.group("ft")), float(m.group("in"))
        if inches >= 12:
            continue
        cm = feet * 30.48 + inches * 2.54
        near = _aliased_names(text, m.start(), aliases) & lengths or lengths
        decimals = _decimals(m.group("in"))
        names = [
            n
            for n in profile.names
            if n in near
            and n in truth
            and abs(_in_cm(profile, truth, n) - cm)
            < 1.27 * 10.0**-decimals + 0.5 * _step_cm(profile, n) - 1e-9
        ]
        if names:
            span = (
                (m.start("ft") - m.start(), m.end("ft") - m.start()),
                (
                    m.start("in") - m.start(),
                    m.end("in") - m.start(),
                ),
            )
            end = m.end()
            while end > m.start() and text[end - 1].isspace():
                end -= 1
            original = text[m.start() : end]
            claim(Mention(m.start(), end, names[0], original, "ft_in", decimals, span))
        elif drift:
            hit = _drifting(profile, truth, ranges, near, cm, "cm")
            if hit:
                span = (
                    (m.start("ft") - m.start(), m.end("ft") - m.start()),
                    (m.start("in") - m.start(), m.end("in") - m.start()),
                )
                end = m.end()
                while end > m.start() and text[end - 1].isspace():
                    end -= 1
                original = text[m.start() : end]
                claim(
                    Mention(
                        m.start(), end, hit[0], original, "ft_in", decimals, span,
                        drift=True, value=hit[1],
                    )
                )  # fmt: skip

    pressures = [n for n in profile.names if profile.spec(n).quantity == "pressure"]
    for m in _BLOOD_PRESSURE.finditer(text):
        if not free(m.start(), m.end()):
            continue
        if not (m.group("unit") or _BP_WORDS.search(text[max(0, m.start() - 40) : m.start()])):
            continue
        for group in ("sys", "dia"):
            written = float(m.group(group))
            names = _matching(profile, truth, set(pressures), written, "mmHg", 0)
            # Prefer the reading that fits its position (systolic first).
            names.sort(key=lambda n: 0 if _looks_like(profile, n, group) else 1)
            if names:
                claim(Mention(m.start(group), m.end(group), names[0], m.group(group), "mmHg", 0))
            elif drift:
                fitting = {n for n in pressures if _looks_like(profile, n, group)}
                hit = _drifting(profile, truth, ranges, fitting or set(pressures), written, "mmHg")
                if hit:
                    claim(
                        Mention(
                            m.start(group), m.end(group), hit[0], m.group(group), "mmHg", 0,
                            drift=True, value=hit[1],
                        )
                    )  # fmt: skip

    for m in _PAIR.finditer(text):
        if not free(m.start(), m.end()):
            continue
        labels = _aliased_pair(text, m.start(), aliases)
        if labels is None:
            continue
        unit_info = _unit_at(text, m.end("b"))
        unit = unit_info[0] if unit_info else None
        found = []
        for group, names_here in zip(("a", "b"), labels, strict=True):
            written_text = m.group(group)
            decimals = _decimals(written_text)
            names = _matching(profile, truth, names_here, float(written_text), unit, decimals)
            if names:
                spec_unit = unit or profile.spec(names[0]).unit
                found.append(
                    Mention(
                        m.start(group), m.end(group), names[0], written_text, spec_unit, decimals
                    )
                )
            elif drift:
                hit = _drifting(profile, truth, ranges, names_here, float(written_text), unit)
                if hit:
                    spec_unit = unit or profile.spec(hit[0]).unit
                    found.append(
                        Mention(
                            m.start(group), m.end(group), hit[0], written_text, spec_unit,
                            decimals, drift=True, value=hit[1],
                        )
                    )  # fmt: skip
        for mention in found:
            claim(mention)

    ages = {n for n in profile.names if profile.spec(n).quantity == "age"}
    for m in _AGE_SEX.finditer(text):
        start, end = m.span("age")
        if not free(start, end):
            continue
        names = _matching(profile, truth, ages, float(m.group("age")), None, 0)
        if names:
            claim(Mention(start, end, names[0], m.group("age"), profile.spec(names[0]).unit, 0))
        elif drift:
            hit = _drifting(profile, truth, ranges, ages, float(m.group("age")), None)
            if hit:
                unit_of = profile.spec(hit[0]).unit
                claim(
                    Mention(
                        start, end, hit[0], m.group("age"), unit_of, 0, drift=True, value=hit[1]
                    )
                )

    for m in _NUMBER.finditer(text):
        start, end = m.span(1)
        if not free(start, end):
            continue
        written_text = m.group(1)
        written = float(written_text)
        decimals = _decimals(written_text)
        unit_info = _unit_at(text, end)
        unit = unit_info[0] if unit_info else None
        if unit is None and text[end : end + 1].isalpha():
            continue  # glued to a word that is not a unit ("3rd", "4x")
        near = _aliased_names(text, start, aliases)
        age_phrase = unit is None and (
            _AGE_AFTER.match(text[end:]) or _AGE_BEFORE.search(text[max(0, start - 20) : start])
        )
        if age_phrase:
            near |= ages
        if unit == "years":
            near = (near & ages) or ages
        if unit is not None:
            by_unit = {
                n for n in profile.names if unit in QUANTITIES[profile.spec(n).quantity].factors
            }
            candidates = (near & by_unit) or by_unit
        else:
            candidates = near
        if not candidates:
            continue
        unit_for_match = unit if unit not in (None, "years") else None
        names = _matching(profile, truth, candidates, written, unit_for_match, decimals)
        if names:
            spec_unit = unit_for_match or profile.spec(names[0]).unit
            claim(Mention(start, end, names[0], written_text, spec_unit, decimals))
            continue
        if not drift:
            continue
        if unit is None and not (near - ages) and _NOT_AN_AGE.match(text[end:]):
            continue  # "I'm 30 minutes late": a duration after an age phrase
        if unit is not None and not near:
            # A unit alone marks a drift only for a body measure: lab units are shared
            # with analytes the profile does not declare ("Urea 3.8 mmol/L", "ALP 62
            # U/L", "TSH 2.45 mIU/L"), and "in" is mostly the preposition ("Postfach 71
            # in Albligen"); those need an alias of the value before them.
            if unit == "in":
                continue
            candidates = {n for n in candidates if profile.spec(n).quantity in _BODY_QUANTITIES}
        hit = _drifting(profile, truth, ranges, candidates, written, unit_for_match)
        if hit:
            spec_unit = unit_for_match or profile.spec(hit[0]).unit
            claim(
                Mention(
                    start, end, hit[0], written_text, spec_unit, decimals,
                    drift=True, value=hit[1],
                )
            )  # fmt: skip
    mentions.sort(key=lambda x: x.start)
    return mentions


def _looks_like(profile: Profile, name: str, group: str) -> bool:
    words = " ".join((name, *profile.spec(name).aliases)).lower()
    keys = ("sys", "sbp") if group == "sys" else ("dia", "dbp")
    return any(k in words for k in keys)


def _in_cm(profile: Profile, truth: Mapping[str, float], name: str) -> float:
    spec = profile.spec(name)
    return convert(truth[name], spec.quantity, spec.unit, "cm")


def _step_cm(profile: Profile, name: str) -> float:
    spec = profile.spec(name)
    step = spec.precision if isinstance(spec, DerivedSpec) else spec.grid.step
    return abs(convert(step, spec.quantity, spec.unit, "cm"))


def _format(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}"


def replace_mentions(
    text: str,
    mentions: list[Mention],
    profile: Profile,
    noisy_value: Callable[[str], float],
    *,
    by_mention: Callable[[Mention], float] | None = None,
) -> tuple[str, list[Replacement]]:
    """``text`` with every mention rewritten from ``noisy_value(name)`` (declared unit).

    ``by_mention``, when given, answers each mention instead (a drifted number gets
    the draw cached under its own written value, not the stored value's).
    """
    out: list[str] = []
    replacements: list[Replacement] = []
    position = 0
    shift = 0
    for mention in sorted(mentions, key=lambda x: x.start):
        spec = profile.spec(mention.name)
        noisy = by_mention(mention) if by_mention is not None else noisy_value(mention.name)
        if mention.unit == "ft_in":
            inches_total = convert(noisy, spec.quantity, spec.unit, "in")
            scale = 10**mention.decimals
            inches_total = round(inches_total * scale) / scale
            feet = int(inches_total // 12)
            inches = inches_total - 12 * feet
            (fa, fb), (ia, ib) = mention.parts
            o = mention.original
            new = o[:fa] + str(feet) + o[fb:ia] + _format(inches, mention.decimals) + o[ib:]
        else:
            value = convert(noisy, spec.quantity, spec.unit, mention.unit)
            new = _format(value, mention.decimals)
            if not math.isfinite(value):  # pragma: no cover - formulas are checked
                new = mention.original
        out.append(text[position : mention.start])
        start = mention.start + shift
        out.append(new)
        replacements.append(
            Replacement(mention.name, mention.original, new, start, start + len(new))
        )
        shift += len(new) - (mention.end - mention.start)
        position = mention.end
    out.append(text[position:])
    return "".join(out), replacements


# -- for callers that read every number (the MCP proxy): context through ranges and lists ----------


def dates_and_times(text: str) -> list[tuple[int, int]]:
    """Spans of ``text`` that are calendar dates or clock times ("2026-11-03", "03/11/2026",
    "May 12, 2024", "10:47"): their numbers are not values.  A date's parts must be a date
    (month 1-12, day 1-31): "117/38/29" is three numbers, not a date."""
    out = []
    for m in _SCAN_DATES.finditer(text):
        if m.group("m1") is not None:
            if not (1 <= int(m.group("m1")) <= 12 and 1 <= int(m.group("d1")) <= 31):
                continue
        elif m.group("a2") is not None:
            a, b = int(m.group("a2")), int(m.group("b2"))
            if not (1 <= min(a, b) <= 12 and 1 <= max(a, b) <= 31):
                continue
        out.append(m.span())
    return out


AliasHits = _AliasHits


def alias_hits(text: str, profile: Profile) -> AliasHits:
    """Every occurrence of a profile value's alias in ``text`` (for :func:`names_before`)."""
    return _AliasHits.scan(text, _alias_table(profile))


def names_before(text: str, start: int, hits: AliasHits, *, window: int = 80) -> set[str]:
    """Names whose alias stands before ``start`` in the same clause with only filler, other
    numbers of a range or list, their units and connectors between ("weight 92-93.7 kg",
    "between 93.7 and 95", "weights: 92, 93.7 and 95")."""
    window_start = max(0, start - window)
    cut = max(text.rfind(c, window_start, start) for c in "!?\n")
    found: dict[str, int] = {}
    for end, alias_start, name in hits.hits[
        bisect_left(hits.ends, window_start) : bisect_right(hits.ends, start)
    ]:
        if alias_start < window_start or alias_start <= cut:
            continue
        gap = text[end:start]
        if ";" in gap:
            continue
        if _LIST_GAP.match(gap) and end > found.get(name, -1):
            found[name] = end
    if not found:
        return set()
    nearest = max(found.values())
    return {name for name, end in found.items() if end == nearest}


def unit_after(text: str, pos: int, *, through_lists: bool = True) -> tuple[str, int] | None:
    """The unit written right after ``pos`` (RootGuard's units, then
    :data:`py_core.rootguard.written.EXTRA_UNITS`) -- or, with ``through_lists``, after
    the range or list the number at ``pos`` ends ("93.7-95 kg", "92, 93.7 and 95 kg")."""
    for _ in range(12):
        found = _unit_at(text, pos)
        if found is not None:
            # "mm" and "m" before "/" or "^3" are the cells-per-volume units of written.py.
            extra = extra_unit_at(text, pos)
            if extra is not None and extra[1] > found[1]:
                return extra
            return found
        extra = extra_unit_at(text, pos)
        if extra is not None:
            return extra
        if not through_lists:
            return None
        m = _CONNECTOR.match(text, pos)
        if m is None:
            return None
        n = _NEXT_NUMBER.match(text, m.end())
        if n is None:
            return None
        pos = n.end()
    return None
