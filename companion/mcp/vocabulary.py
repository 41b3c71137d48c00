"""The words of a tool's arguments: unit words, field-name filler, label/value/unit keys."""

from __future__ import annotations

import re

# Unit words (lower case, spaces removed, µ/μ -> u, ² -> 2) -> the units of units.py.
UNITS = {
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
    # The units of py_core.rootguard.written.EXTRA_UNITS.
    **dict.fromkeys(("g", "gr", "gram", "grams", "gramm"), "g"),
    **dict.fromkeys(("mg", "milligram", "milligrams"), "mg"),
    **dict.fromkeys(("oz", "ounce", "ounces"), "oz"),
    **dict.fromkeys(("st", "stone", "stones"), "st"),
    **dict.fromkeys(("months", "month", "mo", "mos", "mths", "mth"), "months"),
    **dict.fromkeys(("weeks", "week", "wk", "wks"), "weeks"),
    **dict.fromkeys(("days", "day"), "days"),
    **dict.fromkeys(("dm", "decimeter", "decimeters", "decimetre", "decimetres"), "dm"),
    **dict.fromkeys(("/ul", "perul", "ul", "/mm3", "mm3", "cells/ul", "/microliter"), "/uL"),
    "g/l": "g/L",
    "mg/l": "mg/L",
    "kpa": "kPa",
    **dict.fromkeys(("ukat/l", "ukatl"), "ukat/L"),
}
# Words that say nothing about which value a field holds.
FILLER = frozenset(
    {"patient", "patients", "my", "the", "a", "current", "latest", "last", "measured", "value"}
    | {"val", "reported", "self", "user", "person", "persons", "of", "in", "at", "baseline"}
    | {"recent", "today", "s"}
)
LABEL_KEYS = frozenset(
    {"name", "type", "key", "metric", "label", "code", "parameter", "test", "measure", "kind"}
    | {"field", "observation", "analyte", "variable", "item"}
)
VALUE_KEYS = frozenset(
    {"value", "amount", "result", "reading", "quantity", "val", "number", "measurement"}
)
UNIT_KEYS = frozenset(("unit", "units", "uom", "unit_of_measure"))
CAMEL = re.compile(r"([a-z0-9])([A-Z])")
SPLIT = re.compile(r"[^a-z0-9]+")


def norm_unit(text: str) -> str:
    return (
        text.lower().replace(" ", "").replace("µ", "u").replace("μ", "u").replace("²", "2")
    ).strip(".")


def key_words(text: str) -> list[str]:
    return [w for w in SPLIT.split(CAMEL.sub(r"\1 \2", text).lower()) if w]
