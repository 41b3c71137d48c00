"""Rewriting a tool call's arguments so that only noisy values leave.

:meth:`Rewriter.rewrite` walks the JSON arguments beside the tool's input schema
and replaces the person's values by what a :class:`~companion.mcp.guard.NoiseSource`
answers (RootGuard: the one cached draw; a derived value: ``f(noisy roots)``):

1. **Fields.**  A field whose name, or failing that whose schema description,
   names a profile value (an alias: ``weight``, ``body_weight_lb``,
   ``systolicBP``, "Patient's weight in kilograms"), and the value of a
   name/value pair (``{"name": "ALT", "value": 35, "unit": "U/L"}``).  A number,
   or a string that is a number with an optional unit (``"81.3"``,
   ``"178 lb"``), is replaced by the noisy value in the unit it was written in
   (from the string, a sibling ``unit`` field, the field's name or description;
   else the profile's unit), with as many decimals.  A root's field whose number
   lies outside the root's public domain and is not the true value (the
   ``height`` of a font) is left alone.
2. **Free text.**  Every other string goes through RootGuard's finder
   (:func:`py_core.rootguard.text.find_mentions`): numbers in a recognised
   context that equal the person's true value.
3. **Declared values anywhere** (``strict``, the default).  Any other JSON
   number or numeric string that equals one of the person's true values at its
   written precision is replaced as if its field had named that value; one that
   equals several is refused (:class:`ArgumentRefused`), not guessed.

Every replacement is returned as a :class:`Rewrite`: where, which value, how it
was found and what was sent -- never what was there.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from companion.mcp.guard import NoiseSource, decimals_of, precision_of
from py_core.errors import InvalidParameterError
from py_core.rootguard.profile import DerivedSpec, Profile
from py_core.rootguard.text import find_mentions, replace_mentions
from py_core.rootguard.units import QUANTITIES, convert

__all__ = ["ArgumentRefused", "Rewrite", "Rewriter"]


class ArgumentRefused(InvalidParameterError):
    """A tool call that cannot be sanitized without guessing; it is not forwarded."""


@dataclass(frozen=True, slots=True)
class Rewrite:
    """One replaced value: where, which, how it was found, and what was sent instead."""

    path: str  # JSON path in the arguments, e.g. "$.vitals[0].value"
    name: str  # the profile value
    how: str  # "field" | "pair" | "text" | "value"
    sent: str  # what the service received there (a noisy value)

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "name": self.name, "how": self.how, "sent": self.sent}


# Unit words (lower case, spaces removed, µ/μ -> u, ² -> 2) -> the units of units.py.
_UNITS = {
    **dict.fromkeys(("kg", "kgs", "kilo", "kilos", "kilogram", "kilograms"), "kg"),
    **dict.fromkeys(("lb", "lbs", "pound", "pounds"), "lb"),
    **dict.fromkeys(("cm", "centimeter", "centimeters", "centimetre", "centimetres"), "cm"),
    **dict.fromkeys(("m", "meter", "meters", "metre", "metres"), "m"),
    **dict.fromkeys(("mm", "millimeter", "millimeters", "millimetre", "millimetres"), "mm"),
    **dict.fromkeys(("in", "inch", "inches"), "in"),
    **dict.fromkeys(("ft", "feet", "foot"), "ft"),
    "mmhg": "mmHg",
    **dict.fromkeys(("mg/dl", "mgdl", "mg/100ml"), "mg/dL"),
    **dict.fromkeys(("mmol/l", "mmoll", "mmol"), "mmol/L"),
    **dict.fromkeys(("umol/l", "umoll", "umol"), "umol/L"),
    **dict.fromkeys(("uu/ml", "uiu/ml", "uuml", "microu/ml"), "uU/mL"),
    **dict.fromkeys(("mu/l", "miu/l"), "mU/L"),
    **dict.fromkeys(("pmol/l", "pmoll", "pmol"), "pmol/L"),
    "u/l": "U/L",
    "iu/l": "IU/L",
    **dict.fromkeys(("10^9/l", "x10^9/l", "10e9/l", "giga/l"), "10^9/L"),
    **dict.fromkeys(("10^3/ul", "x10^3/ul", "k/ul", "thousand/ul"), "10^3/uL"),
    **dict.fromkeys(("years", "year", "yrs", "yr", "y", "yo", "yearsold"), "years"),
    **dict.fromkeys(("kg/m2", "kgm2"), "kg/m2"),
    **dict.fromkeys(("%", "percent", "pct"), "%"),
    **dict.fromkeys(("ml/min/1.73m2", "ml/min"), "mL/min/1.73m2"),
}
# Words that say nothing about which value a field holds.
_FILLER = frozenset(
    {"patient", "patients", "my", "the", "a", "current", "latest", "last", "measured", "value"}
    | {"val", "reported", "self", "user", "person", "persons", "of", "in", "at", "baseline"}
    | {"recent", "today", "s"}
)
_LABEL_KEYS = frozenset(
    {"name", "type", "key", "metric", "label", "code", "parameter", "test", "measure", "kind"}
    | {"field", "observation", "analyte", "variable", "item"}
)
_VALUE_KEYS = frozenset(
    {"value", "amount", "result", "reading", "quantity", "val", "number", "measurement"}
)
_UNIT_KEYS = frozenset(("unit", "units", "uom", "unit_of_measure"))
_NUMERIC = re.compile(r"^\s*(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>\S(?:.*\S)?)?\s*$")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SPLIT = re.compile(r"[^a-z0-9]+")


def _norm_unit(text: str) -> str:
    return (
        text.lower().replace(" ", "").replace("µ", "u").replace("μ", "u").replace("²", "2")
    ).strip(".")


def _words(text: str) -> list[str]:
    return [w for w in _SPLIT.split(_CAMEL.sub(r"\1 \2", text).lower()) if w]


def _written_decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def _number_decimals(value: float) -> int:
    text = repr(float(value))
    if "e" in text or "E" in text:
        return 6
    return _written_decimals(text)


class Rewriter:
    """Rewrites tool-call arguments for one profile (see the module docstring)."""

    def __init__(self, profile: Profile, *, strict: bool = True) -> None:
        self.profile = profile
        self.strict = strict
        self._phrases: dict[tuple[str, ...], str] = {}
        for name in profile.names:
            spec = profile.spec(name)
            for alias in (name, *spec.aliases):
                key = tuple(_words(alias))
                if key and key not in self._phrases:
                    self._phrases[key] = name
        self._longest = max((len(k) for k in self._phrases), default=1)
        self._field_cache: dict[tuple[str, str], str | None] = {}

    # -- which value a field holds -------------------------------------------------------------
    def _phrase_in(self, words: list[str]) -> str | None:
        """The value named by the longest alias among ``words``, earliest first."""
        best: tuple[int, int, str] | None = None  # (-length, position, name)
        for n in range(min(self._longest, len(words)), 0, -1):
            for i in range(len(words) - n + 1):
                name = self._phrases.get(tuple(words[i : i + n]))
                if name is not None and (best is None or (-n, i) < best[:2]):
                    best = (-n, i, name)
            if best is not None:
                return best[2]
        return None

    def field_value(self, key: str, description: str = "") -> str | None:
        """The profile value a field named ``key`` (described by ``description``) holds."""
        cached = self._field_cache.get((key, description), "")
        if cached != "":
            return cached
        words = [w for w in _words(key) if w not in _FILLER and _norm_unit(w) not in _UNITS]
        found = self._phrases.get(tuple(words)) if words else None
        if found is None and words:
            found = self._phrase_in(words)
        if found is None and description:
            found = self._phrase_in(_words(description))
        self._field_cache[(key, description)] = found
        return found

    def _unit_hint(self, name: str, *texts: str) -> str | None:
        """A unit of ``name``'s quantity written in ``texts`` (a key, a description, a unit)."""
        factors = QUANTITIES[self.profile.spec(name).quantity].factors
        for text in texts:
            if not text:
                continue
            whole = _UNITS.get(_norm_unit(text))
            if whole in factors:
                return whole
            tokens = re.split(r"[\s_,;()\[\]]+", _CAMEL.sub(r"\1 \2", text))
            for token in tokens:
                unit = _UNITS.get(_norm_unit(token))
                if unit in factors:
                    return unit
            words = _words(text)
            for a, b in itertools.pairwise(words):
                unit = _UNITS.get(f"{a}/{b}")
                if unit in factors:
                    return unit
        return None

    # -- the walk -------------------------------------------------------------------------------
    def rewrite(
        self,
        arguments: Mapping[str, Any],
        schema: Mapping[str, Any] | None,
        source: NoiseSource,
    ) -> tuple[dict[str, Any], list[Rewrite]]:
        """``arguments`` with the person's values replaced, and the list of replacements."""
        log: list[Rewrite] = []
        out = self._walk(dict(arguments), schema or {}, "$", None, (), source, log)
        return out, log

    def _walk(
        self,
        value: Any,
        schema: Mapping[str, Any],
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
    ) -> Any:
        if isinstance(value, Mapping):
            return self._walk_object(value, schema, path, name, hints, source, log)
        if isinstance(value, list):
            raw = schema.get("items")
            items: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            return [
                self._walk(v, items, f"{path}[{i}]", name, hints, source, log)
                for i, v in enumerate(value)
            ]
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            return self._number(value, path, name, hints, source, log, "field")
        if isinstance(value, str):
            return self._string(value, path, name, hints, source, log)
        return value

    def _walk_object(
        self,
        value: Mapping[str, Any],
        schema: Mapping[str, Any],
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
    ) -> dict[str, Any]:
        raw = schema.get("properties")
        props: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        pair = None
        label = ""
        unit_text = ""
        for key, v in value.items():
            if key.lower() in _LABEL_KEYS and isinstance(v, str) and pair is None:
                pair, label = self.field_value(v), v
            if key.lower() in _UNIT_KEYS and isinstance(v, str):
                unit_text = v
        out: dict[str, Any] = {}
        for key, v in value.items():
            found = props.get(key)
            sub: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            description = sub.get("description") or sub.get("title") or ""
            sub_path = f"{path}.{key}" if re.fullmatch(r"[A-Za-z_]\w*", key) else f"{path}[{key!r}]"
            if key.lower() in _UNIT_KEYS or (key.lower() in _LABEL_KEYS and isinstance(v, str)):
                # A label or unit field is text about the value, not the value.
                out[key] = self._walk(v, sub, sub_path, None, (), source, log)
                continue
            if pair is not None and key.lower() in _VALUE_KEYS:
                out[key] = self._walk(
                    v, sub, sub_path, pair, (unit_text, label, str(description)), source, log
                )
                continue
            field = self.field_value(key, str(description))
            if field is not None:
                out[key] = self._walk(
                    v, sub, sub_path, field, (key, str(description), unit_text), source, log
                )
            else:
                out[key] = self._walk(v, sub, sub_path, name, hints, source, log)
        return out

    def _number(
        self,
        value: int | float,
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
        how: str,
    ) -> int | float:
        if not math.isfinite(value):
            return value
        decimals = 0 if isinstance(value, int) else _number_decimals(value)
        unit = None if name is None else self._unit_hint(name, *hints)
        target = self._target(float(value), decimals, name, unit, path, source)
        if target is None:
            return value
        target_name, target_unit = target
        noisy = self._noisy_in(target_name, target_unit, source)
        if noisy is None:
            return value
        if isinstance(value, int):
            sent: int | float = round(noisy)
        else:
            keep = decimals
            if target_unit == self.profile.spec(target_name).unit:
                keep = max(decimals, decimals_of(precision_of(self.profile, target_name)))
            sent = round(noisy, max(keep, 1))
        log.append(Rewrite(path, target_name, how if name else "value", str(sent)))
        return sent

    def _string(
        self,
        value: str,
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
    ) -> str:
        m = _NUMERIC.match(value)
        if m is not None:
            unit_text = m.group("unit") or ""
            candidates = [name] if name is not None else []
            unit = None
            if unit_text:
                unit = next(
                    (
                        _UNITS[_norm_unit(unit_text)]
                        for n in candidates or self.profile.names
                        if _UNITS.get(_norm_unit(unit_text))
                        in QUANTITIES[self.profile.spec(n).quantity].factors
                    ),
                    None,
                )
            if not unit_text or unit is not None:
                written = m.group("num")
                decimals = _written_decimals(written)
                if name is not None and unit is None:
                    unit = self._unit_hint(name, *hints)
                target = self._target(float(written), decimals, name, unit, path, source)
                if target is not None:
                    target_name, target_unit = target
                    noisy = self._noisy_in(target_name, target_unit, source)
                    if noisy is not None:
                        text = f"{noisy:.{decimals}f}"
                        sent = value[: m.start("num")] + text + value[m.end("num") :]
                        how = "field" if name is not None else "value"
                        log.append(Rewrite(path, target_name, how, text))
                        return sent
                return value
        return self._text(value, path, source, log)

    def _text(self, value: str, path: str, source: NoiseSource, log: list[Rewrite]) -> str:
        roots = {k: v for k, v in source.truth.items() if k in self.profile.roots}
        mentions = find_mentions(value, self.profile, roots)
        if not mentions:
            return value
        usable = []
        for mention in mentions:
            deps = self.profile.root_dependencies(mention.name)
            if deps <= set(roots):
                usable.append(mention)
        new, replacements = replace_mentions(value, usable, self.profile, source.noisy)
        log.extend(Rewrite(path, r.name, "text", r.replacement) for r in replacements)
        return new

    # -- deciding and answering -----------------------------------------------------------------
    def _target(
        self,
        written: float,
        decimals: int,
        name: str | None,
        unit: str | None,
        path: str,
        source: NoiseSource,
    ) -> tuple[str, str] | None:
        """Which value (and unit) a number stands for, or None to leave it."""
        if name is not None:
            spec = self.profile.spec(name)
            unit = unit or spec.unit
            if not self._has_truth(name, source):
                return None  # the person declared no value: there is nothing to protect
            if isinstance(spec, DerivedSpec):
                return name, unit
            in_profile_unit = convert(written, spec.quantity, unit, spec.unit)
            lo, hi = spec.grid.lo, spec.grid.hi
            if lo <= in_profile_unit <= hi or self._equals(name, written, decimals, unit, source):
                return name, unit
            if not self.strict:
                return None
        if not self.strict:
            return None
        # Without a field naming it, a number counts as a value only when written about as
        # finely as the value is declared: a bare "2" is a count, not a creatinine of 1.8,
        # and a "1" not a FIB-4 (a derived value needs decimals when it has any).
        matches = [
            n
            for n in self.profile.names
            if n in source.truth
            and decimals >= self._min_decimals(n)
            and self._equals(n, written, decimals, self.profile.spec(n).unit, source)
        ]
        if len(matches) > 1:
            # The nearest declared value when one is nearer than the others ("81.3" is the
            # weight 81.3 rather than a diastolic pressure 81); a tie is refused.
            gaps = {n: abs(source.truth[n] - written) for n in matches}
            nearest = min(gaps.values())
            matches = [n for n in matches if gaps[n] <= nearest + 1e-9]
        if len(matches) == 1:
            return matches[0], self.profile.spec(matches[0]).unit
        if len(matches) > 1:
            raise ArgumentRefused(
                f"the argument at {path} equals the person's declared values of "
                f"{' and '.join(matches)}; it is not forwarded (name the field after the value "
                "it holds, so Veil can replace it by its noisy value)"
            )
        return None

    def _min_decimals(self, name: str) -> int:
        needed = decimals_of(precision_of(self.profile, name))
        return needed - 1 if name in self.profile.roots else min(1, needed)

    def _has_truth(self, name: str, source: NoiseSource) -> bool:
        return self.profile.root_dependencies(name) <= {
            k for k in source.truth if k in self.profile.roots
        }

    def _equals(
        self, name: str, written: float, decimals: int, unit: str, source: NoiseSource
    ) -> bool:
        """Whether ``written`` (in ``unit``) is the true value at its written precision."""
        spec = self.profile.spec(name)
        truth = source.truth.get(name)
        if truth is None or unit not in QUANTITIES[spec.quantity].factors:
            return False
        value = convert(truth, spec.quantity, spec.unit, unit)
        tol = 0.5 * 10.0**-decimals
        if isinstance(spec, DerivedSpec):
            tol += 0.005 * abs(written)
        else:
            tol += 0.5 * abs(convert(spec.grid.step, spec.quantity, spec.unit, unit))
        return abs(value - written) < tol - 1e-9

    def _noisy_in(self, name: str, unit: str, source: NoiseSource) -> float | None:
        spec = self.profile.spec(name)
        noisy = source.noisy(name)
        if not math.isfinite(noisy):
            return None
        return convert(noisy, spec.quantity, spec.unit, unit)
