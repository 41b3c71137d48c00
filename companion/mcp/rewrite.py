"""Rewriting a tool call's arguments so that only noisy values leave.

:meth:`Rewriter.rewrite` walks the JSON arguments beside the tool's input schema
and replaces the person's values by what a :class:`~companion.mcp.guard.NoiseSource`
answers (RootGuard: the one cached draw; a derived value: ``f(noisy roots)``):

1. **Fields.**  A field whose name, or failing that whose schema description,
   names a profile value (an alias: ``weight``, ``body_weight_lb``,
   ``systolicBP``, "Patient's weight in kilograms"), and the value of a
   name/value pair (``{"name": "ALT", "value": 35, "unit": "U/L"}``).  A number,
   or a string that is one number with an optional unit (``"81.3"``,
   ``"178 lb"``, ``"93,7 kg"``, ``"9.37e1"``, ``"263,000/uL"``), is replaced by
   the noisy value in the unit it was written in (from the string, a sibling
   ``unit`` field, the field's name -- ``weight_g``, ``age_months`` -- or
   description; else the profile's unit), written the same way (decimals, decimal
   comma, thousands separator, exponent); the true value in a unit the field does
   not say (``{"platelets": 263000}``) in that unit.  A root's field whose number
   lies outside the root's public domain and is not the true value (the ``height``
   of a font) is left alone.  Object keys are rewritten like strings.
2. **Structures inside a string.**  JSON (parsed, walked like arguments, written
   back), a table (CSV, semicolon or tab separated, a Markdown table: each cell
   as a field named by its column), SQL ``INSERT ... (columns) VALUES (...)``
   (each literal as a field named by its column) and ``key=value`` anywhere
   (``w=93.7;h=181.3``, ``?weight=93.7``, ``SET weight_kg = 93.7``, YAML).
3. **Free text.**  RootGuard's finder (:func:`py_core.rootguard.text.find_mentions`)
   first; then every number written in any format
   (:func:`py_core.rootguard.written.number_runs`), with its context: an alias of
   a value before it or glued to it ("ALT38"; also across a range or list: "weight 92-93.7 kg",
   "between 93.7 and 95 kg"), a unit after it or after its range or list, the
   field it is in.  In context, a number that equals the person's true value of
   that value is replaced.
4. **Declared values anywhere** (``strict``, the default).  Any other number --
   a JSON number, a numeric string, any reading of a number in a text -- that
   equals one of the person's true values at its written precision (in the
   value's unit, in the unit written after it or in an unnamed field's key
   (``mass_g``), or -- a bare number -- in another unit of its quantity when written
   to within 5% of the value there: ``1.81`` m) is replaced as if its
   field had named that value; one that equals several is refused
   (:class:`ArgumentRefused`), not guessed, and so are object keys that would
   become the same key.

Every replacement is returned as a :class:`Rewrite`: where, which value, how it
was found and what was sent -- never what was there.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from typing import Any

from companion.mcp.edits import Rewrite, Spans, apply_edits, shift_spans
from companion.mcp.guard import NoiseSource, decimals_of, precision_of
from companion.mcp.structures import StructureRewrites
from companion.mcp.vocabulary import (
    CAMEL,
    FILLER,
    LABEL_KEYS,
    UNIT_KEYS,
    UNITS,
    VALUE_KEYS,
    key_words,
    norm_unit,
)
from py_core.errors import InvalidParameterError
from py_core.rootguard.profile import DerivedSpec, Profile
from py_core.rootguard.text import (
    alias_hits,
    dates_and_times,
    find_mentions,
    names_before,
    replace_mentions,
    unit_after,
)
from py_core.rootguard.units import QUANTITIES
from py_core.rootguard.written import (
    EXTRA_UNITS,
    Written,
    convert_any,
    factor,
    number_runs,
    parse_single,
    readings,
    unit_spans,
)

__all__ = ["ArgumentRefused", "Rewrite", "Rewriter"]


class ArgumentRefused(InvalidParameterError):
    """A tool call that cannot be sanitized without guessing; it is not forwarded."""


def _written_decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def _number_decimals(value: float) -> int:
    text = repr(float(value))
    if "e" in text or "E" in text:
        return 6
    return _written_decimals(text)


# A key written before a number: "weight_kg=93.7", "?weight=93.7&", "SET weight_kg = 93.7",
# '"weight": 93.7', "weight_kg: 93.7" (a ":" only after a key that looks like code).
_KEY_BEFORE = re.compile(
    r"""(?:^|[^\w.\-]|%[0-9A-Fa-f]{2})(?P<q>["']?)(?P<key>[A-Za-z_][\w.\-]{0,60})(?P=q)\s*"""
    r"""(?P<sep>==?|:=|=>|->|:|%3[Dd])\s*["']?$"""
)
_GLUED = re.compile(r"(?<![A-Za-z])(?P<word>[A-Za-z]{2,30})(?P<num>\d+(?:[.,]\d+)?)(?!\d)")
_MAX_DEPTH = 8


class Rewriter(StructureRewrites):
    """Rewrites tool-call arguments for one profile (see the module docstring)."""

    def __init__(self, profile: Profile, *, strict: bool = True) -> None:
        self.profile = profile
        self.strict = strict
        self._phrases: dict[tuple[str, ...], str] = {}
        for name in profile.names:
            spec = profile.spec(name)
            for alias in (name, *spec.aliases):
                key = tuple(key_words(alias))
                if key and key not in self._phrases:
                    self._phrases[key] = name
        self._longest = max((len(k) for k in self._phrases), default=1)
        self._field_cache: dict[tuple[str, str], str | None] = {}
        # A root's grid step in every unit of its quantity; the decimals a bare number needs.
        self._steps: dict[str, list[tuple[str, float]]] = {
            name: [
                (u, abs(convert_any(spec.grid.step, spec.quantity, spec.unit, u) or 0.0))
                for u in QUANTITIES[spec.quantity].factors
            ]
            for name, spec in profile.roots.items()
        }
        self._needed = {
            name: decimals_of(precision_of(profile, name)) - 1
            if name in profile.roots
            else min(1, decimals_of(precision_of(profile, name)))
            for name in profile.names
        }

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
        words = [w for w in key_words(key) if w not in FILLER and norm_unit(w) not in UNITS]
        found = self._phrases.get(tuple(words)) if words else None
        if found is None and words:
            found = self._phrase_in(words)
        if found is None and description:
            found = self._phrase_in(key_words(description))
        self._field_cache[(key, description)] = found
        return found

    def _quantity(self, name: str) -> str:
        return self.profile.spec(name).quantity

    def _unit_word(self, name: str, text: str) -> str | None:
        """The unit of ``name``'s quantity that ``text`` is, if it is one."""
        quantity = self._quantity(name)
        if quantity == "platelets" and re.fullmatch(r"\s*G\s*/\s*L\s*", text):
            return "G/L"
        unit = UNITS.get(norm_unit(text))
        if unit is not None and factor(quantity, unit) is not None:
            return unit
        return None

    def _unit_hint(self, name: str, *texts: str) -> str | None:
        """A unit of ``name``'s quantity written in ``texts`` (a key, a description, a unit)."""
        for text in texts:
            if not text:
                continue
            whole = self._unit_word(name, text)
            if whole is not None:
                return whole
            tokens = re.split(r"[\s_,;()\[\]]+", CAMEL.sub(r"\1 \2", text))
            for token in tokens:
                unit = self._unit_word(name, token) if token else None
                if unit is not None:
                    return unit
            words = key_words(text)
            for a, b in itertools.pairwise(words):
                unit = self._unit_word(name, f"{a}/{b}")
                if unit is not None:
                    return unit
        return None

    def _any_unit(self, *texts: str) -> str | None:
        """A unit of any value's quantity written in ``texts`` (an unnamed field's key)."""
        if not any(texts):
            return None
        for n in self.profile.names:
            unit = self._unit_hint(n, *texts)
            if unit is not None and unit != self.profile.spec(n).unit:
                return unit
        return None

    def _unit_of_text(self, unit_text: str, name: str | None) -> str | None:
        """The unit ``unit_text`` writes, of ``name``'s quantity (or of any value's)."""
        for n in [name] if name is not None else self.profile.names:
            unit = self._unit_word(n, unit_text)
            if unit is not None:
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
        out = self._walk(dict(arguments), schema or {}, "$", None, (), source, log, 0)
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
        depth: int,
    ) -> Any:
        if isinstance(value, Mapping):
            return self._walk_object(value, schema, path, name, hints, source, log, depth)
        if isinstance(value, list):
            raw = schema.get("items")
            items: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            return [
                self._walk(v, items, f"{path}[{i}]", name, hints, source, log, depth)
                for i, v in enumerate(value)
            ]
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            return self._number(value, path, name, hints, source, log, "field")
        if isinstance(value, str):
            return self._string(value, path, name, hints, source, log, depth)
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
        depth: int,
    ) -> dict[str, Any]:
        raw = schema.get("properties")
        props: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        pair = None
        label = ""
        unit_text = ""
        for key, v in value.items():
            if key.lower() in LABEL_KEYS and isinstance(v, str) and pair is None:
                pair, label = self.field_value(v), v
            if key.lower() in UNIT_KEYS and isinstance(v, str):
                unit_text = v
        out: dict[str, Any] = {}
        for index, (key, v) in enumerate(value.items()):
            found = props.get(key)
            sub: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            description = sub.get("description") or sub.get("title") or ""
            new_key = key
            if re.search(r"\d", key):  # a key can be a value: {"93.7": "2026-11-03"}
                new_key = self._string(
                    key, f"{path}.<key {index}>", name, hints, source, log, depth
                )
            sub_path = (
                f"{path}.{new_key}"
                if re.fullmatch(r"[A-Za-z_]\w*", new_key)
                else f"{path}[{new_key!r}]"
            )
            if key.lower() in UNIT_KEYS or (key.lower() in LABEL_KEYS and isinstance(v, str)):
                # A label or unit field is text about the value, not the value.
                new = self._walk(v, sub, sub_path, None, (), source, log, depth)
            elif pair is not None and key.lower() in VALUE_KEYS:
                new = self._walk(
                    v, sub, sub_path, pair, (unit_text, label, str(description)), source, log,
                    depth,
                )  # fmt: skip
            else:
                field = self.field_value(key, str(description))
                if field is not None:
                    new = self._walk(
                        v, sub, sub_path, field, (key, str(description), unit_text), source, log,
                        depth,
                    )  # fmt: skip
                elif name is None:  # a unit in the key still says how to read it ("mass_g")
                    new = self._walk(v, sub, sub_path, None, (key,), source, log, depth)
                else:
                    new = self._walk(v, sub, sub_path, name, hints, source, log, depth)
            if new_key in out:
                raise ArgumentRefused(
                    f"two keys of the object at {path} would be the same key once the person's "
                    "values are replaced; it is not forwarded (do not write values as keys)"
                )
            out[new_key] = new
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
        unit = self._unit_hint(name, *hints) if name is not None else self._any_unit(*hints)
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
        depth: int,
    ) -> str:
        parsed = parse_single(value)
        if parsed is not None:
            singles, unit_text = parsed
            unit = self._unit_of_text(unit_text, name) if unit_text else None
            if not unit_text or unit is not None:
                out = self._one_number(value, singles, unit, path, name, hints, source, log)
                if out is not None:
                    return out
        if depth < _MAX_DEPTH:
            for structured in (self._json, self._sql, self._table):
                out = structured(value, path, name, hints, source, log, depth + 1)
                if out is not None:
                    return out
        return self._text(value, path, name, hints, source, log, [])

    def _one_number(
        self,
        value: str,
        singles: list[Written],
        unit: str | None,
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
    ) -> str | None:
        """A string that is one number (in any of its readings) and an optional unit; None
        when it is no value as a field (then it is read as text: "93.7 kg" has a unit)."""
        if unit is None:
            unit = self._unit_hint(name, *hints) if name is not None else self._any_unit(*hints)
        for written in singles:
            target = self._target(written.value, written.decimals, name, unit, path, source)
            if target is None:
                continue
            noisy = self._noisy_in(*target, source)
            if noisy is None:
                return value
            text = written.write(noisy)
            log.append(Rewrite(path, target[0], "field" if name is not None else "value", text))
            return value[: written.start] + text + value[written.end :]
        return None

    # -- free text --------------------------------------------------------------------------------
    def _text(
        self,
        value: str,
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
        done: list[tuple[int, int]],
    ) -> str:
        roots = {k: v for k, v in source.truth.items() if k in self.profile.roots}
        mentions = find_mentions(value, self.profile, roots)
        handled = Spans(done)
        usable = [
            m
            for m in mentions
            if self.profile.root_dependencies(m.name) <= set(roots)
            and not handled.overlaps(m.start, m.end)
        ]
        new, replacements = replace_mentions(value, usable, self.profile, source.noisy)
        log.extend(Rewrite(path, r.name, "text", r.replacement) for r in replacements)
        if replacements:
            edits = [
                (m.start, m.end, r.replacement) for m, r in zip(usable, replacements, strict=True)
            ]
            done = shift_spans(done, edits)
        done = done + [(r.start, r.end) for r in replacements]
        return self._scan(new, done, path, name, hints, source, log)

    def _scan(
        self,
        text: str,
        done: list[tuple[int, int]],
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
    ) -> str:
        """Every number of ``text`` not yet handled, in every reading, in its context."""
        runs: list[tuple[int, int, list[list[Written]], frozenset[str]]] = [
            (start, end, readings, frozenset()) for start, end, readings in number_runs(text)
        ]
        # A number glued to an alias is in its context ("age47", "weight93.7kg", "ALT38").
        for m in _GLUED.finditer(text):
            glued = self._phrases.get(tuple(key_words(m.group("word"))))
            if glued is not None:
                start = m.start("num")
                body = m.group("num")
                runs.append((start, m.end(), readings(body, start), frozenset({glued})))
        if not runs:
            return text
        runs.sort(key=lambda r: r[0])
        skip = Spans(done + dates_and_times(text) + unit_spans(text))
        hits = alias_hits(text, self.profile)
        edits: list[tuple[int, int, str]] = []
        for start, end, run_readings, glued_to in runs:
            if skip.overlaps(start, end):
                continue
            own = unit_after(text, end, through_lists=False)
            if own is not None:
                skip.add(end, own[1])  # the digits of "x10^3/uL" after it are its unit
            after = own or unit_after(text, end)
            unit = after[0] if after else None
            key_match = _KEY_BEFORE.search(text, max(0, start - 64), start)
            key = None
            if key_match is not None and (
                key_match.group("sep") != ":"
                or key_match.group("q")
                or "_" in key_match.group("key")
                or CAMEL.search(key_match.group("key"))
            ):
                key = key_match.group("key")
            near = names_before(text, start, hits) | glued_to
            for reading in run_readings:
                found = []
                for written in reading:
                    target = self._in_context(written, unit, key, near, name, hints, path, source)
                    if target is not None:
                        found.append((written, target))
                if not found:
                    continue
                for written, (target_name, target_unit) in found:
                    noisy = self._noisy_in(target_name, target_unit, source)
                    if noisy is None:
                        continue
                    sent = written.write(noisy)
                    edits.append((written.start, written.end, sent))
                    log.append(Rewrite(path, target_name, "text", sent))
                break
        return apply_edits(text, edits)

    def _in_context(
        self,
        written: Written,
        unit: str | None,
        key: str | None,
        near: set[str],
        name: str | None,
        hints: tuple[str, ...],
        path: str,
        source: NoiseSource,
    ) -> tuple[str, str] | None:
        """Which value (and unit) a number in a text stands for, or None to leave it."""
        value, decimals = written.value, written.decimals
        if key is not None:
            named = self.field_value(key)
            if named is not None:  # "weight_kg=93.7": a field, written inside a string
                named_unit = unit if unit and factor(self._quantity(named), unit) else None
                named_unit = named_unit or self._unit_hint(named, key)
                return self._target(value, decimals, named, named_unit, path, source)
        candidates = set(near) | ({name} if name is not None else set())
        if unit is not None:
            by_unit = {n for n in self.profile.names if factor(self._quantity(n), unit)}
            candidates = (candidates & by_unit) or by_unit
        matches = []
        for n in self.profile.names:
            if n not in candidates or not self._has_truth(n, source) or n not in source.truth:
                continue
            spec = self.profile.spec(n)
            u = unit if unit is not None and factor(spec.quantity, unit) else spec.unit
            if self._equals(n, value, decimals, u, source):
                matches.append((n, u))
        if len(matches) == 1 or (matches and len({m[0] for m in matches}) == 1):
            return matches[0]
        if matches:
            return self._declared(
                value, decimals, unit, path, source, among={m[0] for m in matches}
            )
        if not self.strict:
            return None
        return self._declared(value, decimals, unit, path, source)

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
            if unit is None or factor(spec.quantity, unit) is None:
                unit = spec.unit
            if not self._has_truth(name, source):
                return None  # the person declared no value: there is nothing to protect
            if isinstance(spec, DerivedSpec):
                return name, unit
            in_profile_unit = convert_any(written, spec.quantity, unit, spec.unit)
            lo, hi = spec.grid.lo, spec.grid.hi
            if (in_profile_unit is not None and lo <= in_profile_unit <= hi) or self._equals(
                name, written, decimals, unit, source
            ):
                return name, unit
            # The true value in another unit the field does not say ({"platelets": 263000}
            # per uL, {"age": 564} months): replaced in that unit.
            for other in (*QUANTITIES[spec.quantity].factors, *EXTRA_UNITS.get(spec.quantity, {})):
                if other != unit and self._equals(name, written, decimals, other, source):
                    return name, other
        if not self.strict:
            return None
        return self._declared(written, decimals, unit, path, source)

    def _declared(
        self,
        written: float,
        decimals: int,
        unit: str | None,
        path: str,
        source: NoiseSource,
        among: set[str] | None = None,
    ) -> tuple[str, str] | None:
        """The declared value ``written`` equals, wherever it stands; refused when several do.

        Without a field naming it, a number counts as a value only when written about as
        finely as the value is declared: a bare "2" is a count, not a creatinine of 1.8,
        and a "1" not a FIB-4 (a derived value needs decimals when it has any).  It is
        compared in the value's unit and in the unit written after it (of the value's
        quantity); a bare number also in the other units of the quantity, when written to
        within 5% of the value there ("1.81" metres, "207" pounds; not "2" metres)."""
        matches: list[tuple[float, str, str]] = []
        for n in self.profile.names:
            if n not in source.truth or (among is not None and n not in among):
                continue
            spec = self.profile.spec(n)
            units = []
            if decimals >= self._min_decimals(n):
                units.append(spec.unit)
            if unit is not None and unit != spec.unit and factor(spec.quantity, unit):
                units.append(unit)
            if unit is None:  # a bare number: also the value in another unit of its quantity
                for u, step_u in self._steps.get(n, ()):
                    in_u = abs(convert_any(source.truth[n], spec.quantity, spec.unit, u) or 0.0)
                    if u not in units and 0.5 * 10.0**-decimals <= max(step_u, 0.05 * in_u):
                        units.append(u)
            for u in units:
                if self._equals(n, written, decimals, u, source):
                    truth_u = convert_any(source.truth[n], spec.quantity, spec.unit, u)
                    gap = abs((truth_u if truth_u is not None else math.inf) - written)
                    matches.append((gap, n, u))
                    break
        if not matches:
            return None
        # The nearest declared value when one is nearer than the others ("81.3" is the weight
        # 81.3 rather than a diastolic pressure 81); a tie is refused.
        nearest = min(m[0] for m in matches)
        kept = [m for m in matches if m[0] <= nearest + 1e-9]
        if len(kept) > 1:
            raise ArgumentRefused(
                f"the argument at {path} equals the person's declared values of "
                f"{' and '.join(m[1] for m in kept)}; it is not forwarded (name the field after "
                "the value it holds, so Veil can replace it by its noisy value)"
            )
        return kept[0][1], kept[0][2]

    def _min_decimals(self, name: str) -> int:
        return self._needed[name]

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
        if truth is None:
            return False
        value = convert_any(truth, spec.quantity, spec.unit, unit)
        if value is None:
            return False
        tol = 0.5 * 10.0**-decimals
        if isinstance(spec, DerivedSpec):
            tol += 0.005 * abs(written)
        else:
            tol += 0.5 * abs(convert_any(spec.grid.step, spec.quantity, spec.unit, unit) or 0.0)
        return abs(value - written) < tol - 1e-9

    def _noisy_in(self, name: str, unit: str, source: NoiseSource) -> float | None:
        spec = self.profile.spec(name)
        noisy = source.noisy(name)
        if not math.isfinite(noisy):
            return None
        return convert_any(noisy, spec.quantity, spec.unit, unit)
