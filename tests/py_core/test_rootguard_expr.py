"""The safe formula evaluator and the built-in clinical formulas."""

from __future__ import annotations

import math

import pytest

from py_core.errors import ExpressionError, InvalidParameterError
from py_core.rootguard.expr import parse_expression
from py_core.rootguard.formulas import FORMULAS, RiskClasses, get_formula


@pytest.mark.parametrize(
    ("source", "values", "expected"),
    [
        ("weight_kg / (height_cm / 100) ** 2", {"weight_kg": 81, "height_cm": 180}, 25.0),
        ("-x + +y", {"x": 2, "y": 5}, 3.0),
        ("sqrt(x) + log(exp(y)) + abs(-z)", {"x": 16, "y": 2, "z": 3}, 9.0),
        ("min(x, y, 3) * max(x, 1)", {"x": 2, "y": 7}, 4.0),
        ("0.9938 ** age", {"age": 50}, 0.9938**50),
        ("x ** -1.2", {"x": 2.0}, 2.0**-1.2),
    ],
)
def test_accepts_whitelisted_formulas(
    source: str, values: dict[str, float], expected: float
) -> None:
    """Numbers, names, + - * / **, unary signs and the six functions evaluate correctly."""
    expr = parse_expression(source)
    assert expr.evaluate(values) == pytest.approx(expected, rel=1e-12)
    assert expr.names == frozenset(values)


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("x.__class__", "attribute access"),
        ("().__class__.__bases__[0]", "subscripts"),
        ("__import__('os').system('ls')", "not allowed"),
        ("open('f')", "function 'open' is not allowed"),
        ("math.sqrt(x)", "attribute access"),
        ("x[0]", "subscripts"),
        ("lambda: 1", "Lambda"),
        ("[x for x in y]", "ListComp"),
        ("'abc'", "not a number"),
        ("True + x", "not a number"),
        ("x if y else z", "IfExp"),
        ("x < y", "Compare"),
        ("x // y", "FloorDiv"),
        ("x % y", "Mod"),
        ("~x", "Invert"),
        ("2 ** 1000", "exponent 1000 is too large"),
        ("x ** -100", "exponent -100 is too large"),
        ("9 ** 9 ** 9", "power of a power"),
        ("sqrt(x, y)", "sqrt() takes 1"),
        ("max(x)", "max() takes at least 2"),
        ("sqrt(x=1)", "keyword arguments"),
        ("min(*x)", "starred"),
        ("sqrt", "function name 'sqrt' used as a value"),
        ("x = 1", "not valid syntax"),
        ("", "must not be empty"),
        ("1j * x", "not a number"),
    ],
)
def test_rejects_unsafe_formulas(source: str, fragment: str) -> None:
    """Attribute access, calls outside the whitelist, huge exponents and the rest are refused."""
    with pytest.raises(ExpressionError) as info:
        parse_expression(source)
    assert fragment in str(info.value)


def test_rejects_oversized_formulas() -> None:
    """Source length, node count and nesting depth are bounded."""
    with pytest.raises(ExpressionError, match="characters long"):
        parse_expression("x + " * 300 + "x")
    with pytest.raises(ExpressionError, match="nodes"):
        parse_expression(" + ".join(["x"] * 120))
    with pytest.raises(ExpressionError, match="nested deeper"):
        parse_expression("(" * 40 + "x" + ")" * 40 + " + " + "-" * 40 + "x")


def test_rejects_non_string() -> None:
    """A formula must be a string."""
    with pytest.raises(ExpressionError, match="must be a string"):
        parse_expression(42)


@pytest.mark.parametrize(
    ("source", "values", "fragment"),
    [
        ("x / y", {"x": 1, "y": 0}, "division by zero"),
        ("log(x)", {"x": -1}, "log of a non-positive"),
        ("sqrt(x)", {"x": -4}, "sqrt of a negative"),
        ("exp(x)", {"x": 1000}, "overflows"),
        ("(x ** 60) ** 60", {"x": 1e10}, "overflow"),
        ("x ** 0.5", {"x": -4}, "fractional power"),
        ("x + y", {"x": 1}, "needs values"),
    ],
)
def test_evaluation_errors_are_clear(source: str, values: dict[str, float], fragment: str) -> None:
    """Domain errors and overflow become ExpressionError naming the problem."""
    with pytest.raises(ExpressionError, match=fragment):
        parse_expression(source).evaluate(values)


_POINT = {
    "weight_kg": 81.0,
    "height_cm": 180.0,
    "age": 50.0,
    "ast": 30.0,
    "alt": 25.0,
    "platelets": 250.0,
    "glucose": 100.0,
    "insulin": 10.0,
    "creatinine": 1.0,
    "triglycerides": 150.0,
    "sbp": 120.0,
    "dbp": 80.0,
    "waist_cm": 90.0,
    "female": 0.0,
}


@pytest.mark.parametrize(
    ("name", "overrides", "expected"),
    [
        ("bmi", {}, 25.0),
        ("fib4", {}, 50 * 30 / (250 * 5)),
        ("homa_ir", {}, 100 * 10 / 405),
        # CKD-EPI 2021: 142 * (1.0/0.9)^-1.2 * 0.9938^50 (male), NKF calculator: 92.
        ("egfr", {}, 142 * (1 / 0.9) ** -1.2 * 0.9938**50),
        ("egfr", {"female": 1.0, "creatinine": 0.7}, 142 * 0.9938**50 * 1.012),
        (
            "egfr",
            {"female": 1.0, "creatinine": 0.5},
            142 * (0.5 / 0.7) ** -0.241 * 0.9938**50 * 1.012,
        ),
        ("apri", {"ast": 40.0, "platelets": 200.0}, 0.5),
        ("tyg", {}, math.log(150 * 100 / 2)),
        ("map", {}, (120 + 160) / 3),
        ("whtr", {}, 0.5),
    ],
)
def test_formula_library_values(name: str, overrides: dict[str, float], expected: float) -> None:
    """Each built-in formula matches a hand computation."""
    values = {**_POINT, **overrides}
    assert get_formula(name).parsed.evaluate(values) == pytest.approx(expected, rel=1e-12)


def test_egfr_matches_published_calculator() -> None:
    """CKD-EPI 2021 for a 50-year-old man with creatinine 1.0 mg/dL rounds to 92."""
    assert round(get_formula("egfr").parsed.evaluate(_POINT)) == 92


def test_every_formula_has_risk_classes() -> None:
    """The library holds at least the eight required formulas, each with risk classes."""
    assert set(FORMULAS) >= {"bmi", "fib4", "homa_ir", "egfr", "apri", "tyg", "map", "whtr"}
    for formula in FORMULAS.values():
        assert len(formula.risk_classes.labels) == len(formula.risk_classes.thresholds) + 1
        assert formula.parsed.names <= set(_POINT)


@pytest.mark.parametrize(
    ("value", "label"),
    [
        (18.4, "underweight"),
        (18.5, "normal"),
        (24.99, "normal"),
        (25.0, "overweight"),
        (30, "obese"),
    ],
)
def test_risk_class_boundaries(value: float, label: str) -> None:
    """A value equal to a threshold belongs to the upper class."""
    assert get_formula("bmi").risk_classes.label(value) == label


def test_risk_classes_validate() -> None:
    """Risk classes need one more label than thresholds, and increasing thresholds."""
    with pytest.raises(InvalidParameterError, match="one more label"):
        RiskClasses((1.0, 2.0), ("a", "b"))
    with pytest.raises(InvalidParameterError, match="increase strictly"):
        RiskClasses((2.0, 1.0), ("a", "b", "c"))
    with pytest.raises(InvalidParameterError, match="unknown formula"):
        get_formula("nope")
