"""How numbers and units are written: locale formats, scientific notation, more units.

RootGuard's finder (:mod:`py_core.rootguard.text`) reads the ``81.3`` of a prompt.
What leaves a machine is often written otherwise -- a decimal comma (``93,7``),
thousands separators (``263,000``, ``263.000``, ``263 000``, ``263'000``),
scientific notation (``9.37e1``), a list without spaces (``47,38,117``) -- and in
units no profile declares (``93700 g``, ``564 months``, ``263,000/uL``).
:func:`number_runs` finds every run of digits and separators in a text and every
way of *reading* it; :class:`Written` writes another value the same way.  Nothing
here knows the person's values: deciding which reading is a value is the caller's.

A run of digits joined by ``.``, ``,``, ``'`` or a space before three digits has
one or more readings, all of which a caller must check (a service may read it
either way):

* each single number it can be: ``263,000`` is 263000 (thousands) and 263.000
  (decimal comma); ``93,7`` is 93.7; ``1.234`` is 1.234 and 1234;
* the list it is when split at its commas, apostrophes and spaces: ``47,38`` is
  also 47 and 38, and ``47,38,117`` (no single reading) only that.

Units beyond :data:`py_core.rootguard.units.QUANTITIES` (:data:`EXTRA_UNITS`) are
exact or conventional conversions of the same quantities (grams, ounces, months,
cells per microlitre, g/L); :func:`factor` answers both tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from py_core.rootguard.units import QUANTITIES

__all__ = [
    "EXTRA_UNITS",
    "Written",
    "convert_any",
    "extra_unit_at",
    "factor",
    "number_runs",
    "parse_single",
    "unit_spans",
]

#: More units of the quantities of units.py: unit -> units per canonical unit.
EXTRA_UNITS: dict[str, dict[str, float]] = {
    "mass": {"g": 1000.0, "mg": 1_000_000.0, "oz": 1000.0 / 28.349523125, "st": 1.0 / 6.35029318},
    "age": {"months": 12.0, "weeks": 365.25 / 7.0, "days": 365.25},
    "length": {"dm": 0.1},
    "platelets": {"/uL": 1000.0, "G/L": 1.0},
    "glucose": {"g/L": 0.01},
    "triglycerides": {"g/L": 0.01},
    "cholesterol": {"g/L": 0.01},
    "creatinine": {"mg/L": 10.0},
    "pressure": {"kPa": 0.13332236842},
    "enzyme": {"ukat/L": 1.0 / 60.0},
}

# Written unit words of EXTRA_UNITS (longest first; lower case matched case-insensitively).
_EXTRA_WORDS: tuple[tuple[str, str], ...] = (
    (
        r"(?:cells?\s*)?(?:/|per\s+)\s*(?:[u\u00b5\u03bc]l|mm3|mm\^3|mm\u00b3|microlit(?:er|re)s?)",
        "/uL",
    ),
    (r"g\s*/\s*l|grams?\s+per\s+lit(?:er|re)", "g/L"),
    (r"mg\s*/\s*l(?!\w)", "mg/L"),
    (r"[u\u00b5\u03bc]kat\s*/\s*l", "ukat/L"),
    (r"kpa", "kPa"),
    (r"grams?|gr?(?![a-z/])", "g"),
    (r"milligrams?|mg(?![a-z/])", "mg"),
    (r"ounces?|oz", "oz"),
    (r"stones?", "st"),
    (r"months?|mos?(?![a-z])", "months"),
    (r"weeks?|wks?", "weeks"),
    (r"days?", "days"),
    (r"decimet(?:er|re)s?|dm", "dm"),
)
_EXTRA_RE = re.compile(
    r"\s?(?:"
    + "|".join(f"(?P<x{i}>{pattern})" for i, (pattern, _) in enumerate(_EXTRA_WORDS))
    + r")(?![a-z0-9])",
    re.IGNORECASE,
)
# G/L is case-sensitive (g/L is grams per litre).
_GIGA_RE = re.compile(r"\s?G\s*/\s*L(?![a-zA-Z0-9])")


def factor(quantity: str, unit: str) -> float | None:
    """Units of ``unit`` per canonical unit of ``quantity`` (units.py or EXTRA_UNITS)."""
    q = QUANTITIES.get(quantity)
    if q is None:
        return None
    found = q.factors.get(unit)
    if found is None:
        found = EXTRA_UNITS.get(quantity, {}).get(unit)
    return found


def convert_any(value: float, quantity: str, from_unit: str, to_unit: str) -> float | None:
    """``value`` in ``from_unit`` in ``to_unit`` (either table); None if one is not a unit."""
    a, b = factor(quantity, from_unit), factor(quantity, to_unit)
    if a is None or b is None:
        return None
    if from_unit == to_unit:
        return value
    return value / a * b


def extra_unit_at(text: str, pos: int) -> tuple[str, int] | None:
    """A unit of :data:`EXTRA_UNITS` written right after ``pos``, and where it ends."""
    m = _GIGA_RE.match(text, pos)
    if m:
        return "G/L", m.end()
    m = _EXTRA_RE.match(text, pos)
    if not m:
        return None
    for i, (_, unit) in enumerate(_EXTRA_WORDS):
        if m.group(f"x{i}") is not None:
            return unit, m.end()
    return None  # pragma: no cover


@dataclass(frozen=True, slots=True)
class Written:
    """One number as written in a text: where, its value, and how it was written."""

    start: int
    end: int
    value: float
    decimals: int  # the precision as written: digits after the mark, less the exponent
    mark: str = "."  # the decimal mark
    group: str = ""  # the thousands separator, if any
    exponent: str = ""  # scientific notation: the exponent as written ("e1", "E+01")
    mantissa_decimals: int = 0

    @property
    def text_decimals(self) -> int:
        return max(self.decimals, 0)

    def write(self, value: float) -> str:
        """``value`` written the same way (mark, grouping, exponent, decimals)."""
        if self.exponent:
            power = int(re.sub(r"[^\d+-]", "", self.exponent) or 0)
            mantissa = f"{value / 10.0**power:.{self.mantissa_decimals}f}"
            return mantissa.replace(".", self.mark) + self.exponent
        text = f"{value:.{self.text_decimals}f}"
        whole, _, frac = text.partition(".")
        if self.group:
            sign = "-" if whole.startswith("-") else ""
            digits = whole.lstrip("-")
            parts: list[str] = []
            while len(digits) > 3:
                parts.insert(0, digits[-3:])
                digits = digits[:-3]
            whole = sign + self.group.join([digits, *parts])
        return whole + (self.mark + frac if frac else "")


_SPACES = " \u00a0\u202f\u2009"
_RUN = re.compile(
    # Not inside a word or a number -- but right after a percent-encoded character
    # ("weight%3D93.7"), and never the hex digits of one ("%20").
    r"(?:(?<![\w.])|(?<=%[0-9A-Fa-f]{2}))(?<!\d,)(?<!%)(?<!%[0-9A-Fa-f])"
    r"\d+(?:(?:[.,'\u2019]|[ \u00a0\u202f\u2009](?=\d{3}(?![\d.,]\d)))\d+)*"
    r"(?:[eE][-+]?[0-9]{1,2}(?![\w]))?"
)
_STYLES: tuple[tuple[str, str], ...] = (
    ("", "."),
    (",", "."),
    ("", ","),
    (".", ","),
    ("'", "."),
    ("'", ","),
    ("\u2019", "."),
    (" ", "."),
    (" ", ","),
)
_EXPONENT = re.compile(r"[eE][-+]?[0-9]{1,2}$")
_PLAIN = re.compile(r"(\d+)(?:\.(\d+))?")


def _style_pattern(group: str, mark: str) -> re.Pattern[str]:
    g = f"[{re.escape(_SPACES)}]" if group == " " else re.escape(group)
    whole = rf"\d{{1,3}}(?:{g}\d{{3}})+" if group else r"\d+"
    return re.compile(rf"({whole})(?:{re.escape(mark)}(\d+))?")


_STYLE_PATTERNS = {(group, mark): _style_pattern(group, mark) for group, mark in _STYLES}


def _single(body: str, start: int, group: str, mark: str, exponent: str) -> Written | None:
    """``body`` read as one number with thousands separator ``group`` and decimal ``mark``."""
    m = _STYLE_PATTERNS[(group, mark)].fullmatch(body)
    if m is None:
        return None
    whole = re.sub(r"\D", "", m.group(1))
    frac = m.group(2) or ""
    value = float(f"{whole}.{frac}" if frac else whole)
    used_group = next((c for c in body if c in _SPACES), " ") if group == " " else group
    end = start + len(body) + len(exponent)
    if exponent:
        power = int(exponent[1:])
        scaled = float(f"{whole}.{frac or '0'}e{power}")
        return Written(start, end, scaled, len(frac) - power, mark, "", exponent, len(frac))
    return Written(start, end, value, len(frac), mark, used_group if group else "")


def _pieces(body: str, start: int) -> list[Written]:
    """``body`` split at its commas, apostrophes and spaces (and at extra dots): a list."""
    out = []
    for m in re.finditer(r"[^,'\u2019 \u00a0\u202f\u2009]+", body):
        piece = m.group(0)
        if piece.count(".") > 1:
            for d in re.finditer(r"\d+", piece):
                a = start + m.start() + d.start()
                out.append(Written(a, a + len(d.group(0)), float(d.group(0)), 0))
            continue
        a = start + m.start()
        whole, _, frac = piece.partition(".")
        if not whole or (not frac and "." in piece):
            continue
        out.append(Written(a, a + len(piece), float(piece), len(frac)))
    return out


def readings(body: str, start: int = 0) -> list[list[Written]]:
    """Every reading of one run (see the module docstring), the single numbers first."""
    plain = _PLAIN.fullmatch(body)
    if plain is not None and len(plain.group(2) or "") != 3:  # "93.7", "47": one reading
        return [[Written(start, start + len(body), float(body), len(plain.group(2) or ""))]]
    m = _EXPONENT.search(body)
    exponent = m.group(0) if m and re.search(r"\d[eE]", body) else ""
    digits = body[: len(body) - len(exponent)] if exponent else body
    out: list[list[Written]] = []
    seen: set[tuple[float, int]] = set()
    for group, mark in _STYLES:
        one = _single(digits, start, group, mark, exponent)
        if one is not None and (one.value, one.decimals) not in seen:
            seen.add((one.value, one.decimals))
            out.append([one])
    if re.search(r"[,'\u2019 \u00a0\u202f\u2009]", digits) or digits.count(".") > 1:
        pieces = _pieces(digits, start)
        if pieces and [(p.start, p.end) for p in pieces] != [
            (r[0].start, r[0].end - len(exponent)) for r in out if len(r) == 1
        ]:
            out.append(pieces)
    return out


def number_runs(text: str) -> list[tuple[int, int, list[list[Written]]]]:
    """Every run of a number in ``text``: ``(start, end, readings)``."""
    out = []
    for m in _RUN.finditer(text):
        body = m.group(0)
        # A trailing separator is punctuation ("93.7, 181.3"), not part of the number.
        out.append((m.start(), m.end(), readings(body, m.start())))
    return out


def parse_single(text: str) -> tuple[list[Written], str] | None:
    """``text`` that is one number (any reading) and an optional unit: the single readings
    and the unit text; None when ``text`` is not that ("93,7 kg" -> [93.7], "kg")."""
    m = re.match(r"\s*", text)
    lead = m.end() if m else 0
    run = _RUN.match(text, lead)
    if run is None:
        return None
    singles = [r[0] for r in readings(run.group(0), run.start()) if len(r) == 1]
    if not singles:
        return None
    rest = text[run.end() :]
    unit = rest.strip()
    if unit and (unit[0].isdigit() or (re.search(r"\d", unit) and not _unitlike(unit))):
        return None
    return singles, unit


def _unitlike(text: str) -> bool:
    """A unit text that holds digits (``10^9/L``, ``x10^3/uL``, ``mL/min/1.73m2``, ``mm3``)."""
    return bool(
        re.fullmatch(
            r"(?:[x\u00d7*]\s*)?10\s*(?:\^|\*\*)?\s*\d\s*/\s*\S+|\S*/\s*mm\^?3|ml/min/1\.73\s*m\^?2"
            r"|/?\s*mm3",
            text.strip(),
            re.IGNORECASE,
        )
    )


# Units that hold digits: their numbers are not values ("x10^9/L", "10³/µL", "mL/min/1.73m2").
_UNIT_WITH_DIGITS = re.compile(
    r"(?:[x\u00d7*]\s*)?10\s*(?:\^|\*\*)\s*[-+]?\d{1,2}(?:\s*/\s*[a-z\u00b5\u03bc]+)?"
    r"|(?:[x\u00d7*]\s*)?10[\u00b2\u00b3\u2074-\u2079\u00b9\u2070]+"
    r"|/\s*1\.73\s*m(?:2|\u00b2|\^2)?"
    r"|\bmm\^?3\b|\bm\^?2\b",
    re.IGNORECASE,
)


def unit_spans(text: str) -> list[tuple[int, int]]:
    """Spans of ``text`` that are units written with digits (``x10^9/L``, ``10^3/uL``,
    ``/1.73m2``): a caller reading numbers skips them."""
    return [m.span() for m in _UNIT_WITH_DIGITS.finditer(text)]
