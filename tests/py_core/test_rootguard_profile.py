"""Profile validation (every problem at once), Level 1 dependencies and the Level 2 allocation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from py_core.errors import DependencyCycleError, ProfileError
from py_core.rootguard.allocation import allocate, sensitivities
from py_core.rootguard.api import DEFAULT_PROFILE
from py_core.rootguard.profile import load_profile


def _root(lo: float, hi: float, **extra: Any) -> dict[str, Any]:
    return {"quantity": "index", "unit": "", "domain": [lo, hi], "precision": 0.01, **extra}


def test_default_profile_is_valid() -> None:
    """The default profile loads: 14 roots, 8 derived values."""
    profile = load_profile(copy.deepcopy(DEFAULT_PROFILE))
    assert len(profile.roots) == 14
    assert set(profile.derived) == {"bmi", "fib4", "homa_ir", "egfr", "apri", "tyg", "map", "whtr"}


def test_validation_reports_every_problem_at_once() -> None:
    """Unknown names, inverted/empty domains, unsafe formulas and bad units all come together."""
    bad = {
        "budget": -1,
        "target": "nowhere",
        "values": {
            "a": _root(5, 1),
            "b": _root(2, 2),
            "c": {"expression": "a.__class__"},
            "d": {"expression": "a + zzz"},
            "e": {"quantity": "mass", "unit": "furlong", "domain": [0, 1], "precision": 0.1},
            "f": {"formula": "no_such_formula"},
            "g": {"expression": "open('x')"},
        },
    }
    with pytest.raises(ProfileError) as info:
        load_profile(bad)
    text = "\n".join(info.value.problems)
    for fragment in (
        "budget must be",
        "value 'a': domain [5, 1] is empty or inverted",
        "value 'b': domain [2, 2] is empty or inverted",
        "value 'c'",
        "attribute access",
        "'zzz']",
        "unit 'furlong' is not a unit of 'mass'",
        "unknown formula 'no_such_formula'",
        "function 'open' is not allowed",
        "target 'nowhere'",
    ):
        assert fragment in text, fragment
    assert len(info.value.problems) >= 9


def test_cycle_is_reported_with_its_path() -> None:
    """A dependency cycle raises DependencyCycleError naming the cycle."""
    profile = {
        "budget": 1,
        "values": {
            "x": _root(0, 1),
            "p": {"expression": "q + x"},
            "q": {"expression": "r * 2"},
            "r": {"expression": "p - 1"},
        },
    }
    with pytest.raises(DependencyCycleError) as info:
        load_profile(profile)
    assert info.value.cycle == ["p", "q", "r", "p"]
    assert "p -> q -> r -> p" in str(info.value)


def test_level1_declared_root_that_is_a_formula_is_recomputed() -> None:
    """A 'root' declared with a domain and a formula is derived, not noised."""
    profile = load_profile(
        {
            "budget": 2,
            "values": {
                "w": _root(30, 200),
                "h": _root(100, 220),
                "bmi": {"expression": "w / (h / 100) ** 2", "domain": [10, 80]},
            },
        }
    )
    assert set(profile.roots) == {"w", "h"}
    assert profile.derived["bmi"].declared_as_root
    assert profile.root_dependencies("bmi") == {"w", "h"}
    assert allocate(profile) == {"w": 1.0, "h": 1.0}


def test_formula_failing_at_reference_is_refused() -> None:
    """A formula that cannot be evaluated at the reference point is a profile error."""
    with pytest.raises(ProfileError, match="log of a non-positive"):
        load_profile({"budget": 1, "values": {"x": _root(-1, 1), "y": {"expression": "log(x)"}}})


def test_allocation_matches_hand_computation() -> None:
    """ε_i ∝ (|h_i| D_i)^½ on the target's roots; other roots keep the equal share."""
    profile = load_profile(
        {
            "budget": 3,
            "target": "g",
            "values": {
                "x": _root(0, 10, privacy_unit=1, reference=5),
                "y": _root(0, 10, privacy_unit=1, reference=5),
                "z": _root(0, 10, privacy_unit=1, reference=5),
                "g": {"expression": "x + 4 * y"},
            },
        }
    )
    # h = (1, 4), D = (1, 1): weights 1 and 2 share 2 of the 3 units of budget.
    eps = allocate(profile)
    assert eps["x"] == pytest.approx(2 / 3, rel=1e-6)
    assert eps["y"] == pytest.approx(4 / 3, rel=1e-6)
    assert eps["z"] == pytest.approx(1.0)
    assert sum(eps.values()) == pytest.approx(3.0)
    assert allocate(profile, budget=6, equal_split=True) == {"x": 2.0, "y": 2.0, "z": 2.0}


def test_allocation_for_bmi_by_hand() -> None:
    """BMI at 70 kg / 170 cm: h_w = 1/1.7², h_h = 2·70/1.7³/100, D = 10 both."""
    profile = load_profile(
        {
            "budget": 2,
            "target": "bmi",
            "values": {
                "weight_kg": {**_root(30, 250), "privacy_unit": 10, "reference": 70},
                "height_cm": {**_root(120, 220), "privacy_unit": 10, "reference": 170},
                "bmi": {"formula": "bmi"},
            },
        }
    )
    h = sensitivities(profile, "bmi")
    assert h["weight_kg"] == pytest.approx(1 / 1.7**2, rel=1e-6)
    assert h["height_cm"] == pytest.approx(2 * 70 / 1.7**3 / 100, rel=1e-6)
    ww, wh = (10 * h["weight_kg"]) ** 0.5, (10 * h["height_cm"]) ** 0.5
    eps = allocate(profile)
    assert eps["weight_kg"] == pytest.approx(2 * ww / (ww + wh), rel=1e-6)
    assert eps["height_cm"] == pytest.approx(2 * wh / (ww + wh), rel=1e-6)
    # The exponent is a parameter: exponent 1 weights by |h|·D itself.
    eps1 = allocate(profile, exponent=1.0)
    assert eps1["weight_kg"] / eps1["height_cm"] == pytest.approx(ww**2 / wh**2, rel=1e-6)


def test_allocation_floor_for_zero_sensitivity() -> None:
    """A root with zero sensitivity at the reference point still gets a small positive ε."""
    profile = load_profile(
        {
            "budget": 2,
            "target": "g",
            "values": {
                "x": _root(-1, 1, reference=0),
                "y": _root(0, 1, reference=0.5),
                "g": {"expression": "x * x + y"},
            },
        }
    )
    eps = allocate(profile)
    assert 0 < eps["x"] < 0.01 * eps["y"]
    assert sum(eps.values()) == pytest.approx(2.0)
