"""Finding the person's values in free text and replacing them by the cached noisy values."""

from __future__ import annotations

import copy
import random

import pytest

from py_core.rootguard.api import DEFAULT_PROFILE
from py_core.rootguard.cache import RootCache
from py_core.rootguard.profile import load_profile
from py_core.rootguard.text import find_mentions, replace_mentions
from py_core.rootguard.units import convert
from tests.py_core.rootguard_data import TRUE

PROFILE = load_profile(copy.deepcopy(DEFAULT_PROFILE))


def _found(text: str) -> list[tuple[str, str]]:
    return [(m.name, m.original) for m in find_mentions(text, PROFILE, TRUE)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I'm 52 and tired", [("age", "52")]),
        ("I am 52.", [("age", "52")]),
        ("age: 52", [("age", "52")]),
        ("a 52-year-old man", [("age", "52")]),
        ("52 years old", [("age", "52")]),
        ("aged 52,", [("age", "52")]),
        ("weight 81 kg", [("weight_kg", "81")]),
        ("I weigh 81kg", [("weight_kg", "81")]),
        ("178.6 lb", [("weight_kg", "178.6")]),
        ("179 lbs", [("weight_kg", "179")]),
        ("I'm 5'11\" tall", [("height_cm", "5'11\"")]),
        ("height 5 ft 11 in", [("height_cm", "5 ft 11 in")]),
        ("1.80 m", [("height_cm", "1.80")]),
        ("height: 180 cm", [("height_cm", "180")]),
        ("AST 40 U/L, ALT 35", [("ast", "40"), ("alt", "35")]),
        ("my BMI is 24.9", [("bmi", "24.9")]),
        ("glucose 5.4 mmol/L", [("glucose", "5.4")]),
        ("fasting glucose 97 mg/dL", [("glucose", "97")]),
        ("BP 128/82 mmHg", [("sbp", "128"), ("dbp", "82")]),
        ("blood pressure was 128/82", [("sbp", "128"), ("dbp", "82")]),
        ("waist 36.2 in", [("waist_cm", "36.2")]),
        ("creatinine 84 umol/L", [("creatinine", "84")]),
        ("creatinine 0.95 mg/dL", [("creatinine", "0.95")]),
        ("platelets 230 x10^9/L", [("platelets", "230")]),
        ("triglycerides 1.58 mmol/L", [("triglycerides", "1.58")]),
        ("HDL 48", [("hdl", "48")]),
        ("my FIB-4 is 1.53", [("fib4", "1.53")]),
        ("BMI 24.9 kg/m2", [("bmi", "24.9")]),
        ("I'm a 52 y/o male, 81kg", [("age", "52"), ("weight_kg", "81")]),
        ("I am 52 years old and 180cm", [("age", "52"), ("height_cm", "180")]),
        ("weight: 81 kg, goal 78 kg", [("weight_kg", "81")]),
        ("52M with chest pain", [("age", "52")]),
        ("pt is a 52 F, 81 kg", [("age", "52"), ("weight_kg", "81")]),
        ("AST/ALT 40/35", [("ast", "40"), ("alt", "35")]),
        ("AST/ALT: 40/35 U/L", [("ast", "40"), ("alt", "35")]),
        ("ALT / AST were 35/40", [("alt", "35"), ("ast", "40")]),
        ("AST/ALT 40/36", [("ast", "40")]),
    ],
)
def test_finds_declared_values_in_many_formats(text: str, expected: list[tuple[str, str]]) -> None:
    """Units, conversions, aliases and age phrases are recognised."""
    assert _found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "weight range 70-81 kg",  # a range
        "somewhere between 52 and 60 years",  # a range in words
        "call (555) 128-4081",  # a phone number
        "call 555-128-8200 or +1 555 081 0052",
        "seen on 05/12/52 and 2052-05-12",  # dates
        "on May 52nd? no: on 12 May 2052",
        "at 10:52 today",  # a time
        "MRN 5281040",  # an identifier
        "the B52 and COVID-19",  # codes glued to letters
        "weight 81.5 kg",  # not the declared value at the written precision
        "aged 53",
        "I have 2 kids and 52 cards",  # a bare number without context
        "HbA1c 5.6%",  # not in the profile
        "my FIB-4 is 1.2",  # not the person's FIB-4
        "1.2 m tall",
        "52",
        "raised $52M in funding",  # money, not an age
        "a 52m sprint",  # metres
        "a ratio of 40/35",  # a pair without labels
        "AST/ALT 41/36",  # not the person's values
        "52Mbps",
    ],
)
def test_leaves_other_numbers_alone(text: str) -> None:
    """Dates, phones, ranges, identifiers and other people's numbers are never touched."""
    assert _found(text) == []


def test_replacement_uses_cached_value_same_unit_and_precision() -> None:
    """Each value becomes the cached noisy value in the written unit with the same decimals."""
    cache = RootCache.empty(PROFILE)
    cache.draw(TRUE, random.Random(4), event="init")
    noisy = cache.values()
    text = "I'm 52, weigh 178.6 lb, 1.80 m, glucose 5.4 mmol/L; my BMI is 24.9. Call 555-128-8200."
    mentions = find_mentions(text, PROFILE, TRUE)
    new, reps = replace_mentions(text, mentions, PROFILE, cache.value)
    by_name = {r.name: r for r in reps}
    assert by_name["age"].replacement == f"{noisy['age']:.0f}"
    assert (
        by_name["weight_kg"].replacement == f"{convert(noisy['weight_kg'], 'mass', 'kg', 'lb'):.1f}"
    )
    assert by_name["height_cm"].replacement == f"{noisy['height_cm'] / 100:.2f}"
    assert by_name["glucose"].replacement == f"{noisy['glucose'] / 18.016:.1f}"
    assert by_name["bmi"].replacement == f"{noisy['bmi']:.1f}"
    for r in reps:
        assert new[r.start : r.end] == r.replacement
    assert new.endswith("Call 555-128-8200.")
    assert new.count("555-128-8200") == 1


def test_feet_inches_replacement_keeps_the_format() -> None:
    """5'11\" becomes the noisy height in feet and inches with the same symbols."""
    cache = RootCache.empty(PROFILE)
    cache.draw(TRUE, random.Random(8), event="init")
    text = "I'm 5'11\" tall"
    new, reps = replace_mentions(text, find_mentions(text, PROFILE, TRUE), PROFILE, cache.value)
    inches = round(cache.value("height_cm") / 2.54)
    assert reps[0].replacement == f"{inches // 12}'{inches % 12}\""
    assert new == f"I'm {reps[0].replacement} tall"


def test_values_without_true_value_are_not_found() -> None:
    """Only values the person declared are looked for."""
    assert find_mentions("AST 40 U/L", PROFILE, {"age": 52}) == []
