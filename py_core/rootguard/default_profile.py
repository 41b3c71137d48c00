"""RootGuard's default adult profile (data): the roots, their public domains, the formulas.

Loaded like any profile by :func:`py_core.rootguard.profile.load_profile`; the extension
offers it on first set-up (``api.DEFAULT_PROFILE``) and the companion's tests use it.
"""

from __future__ import annotations

from typing import Any


def _root(
    quantity: str,
    unit: str,
    domain: list[float],
    precision: float,
    privacy_unit: float,
    reference: float,
    aliases: list[str],
    title: str,
) -> dict[str, Any]:
    return {
        "title": title,
        "quantity": quantity,
        "unit": unit,
        "domain": domain,
        "precision": precision,
        "privacy_unit": privacy_unit,
        "reference": reference,
        "aliases": aliases,
    }


#: A default adult profile.  Domains are public clinical ranges; references are
#: approximate US adult means (NHANES 2017-18); each root gets ε = 1 per privacy
#: unit (the budget 14 split over 14 roots), i.e. two values one privacy unit
#: apart (10 years, 10 kg, 20 mmHg, ...) are e^1-indistinguishable.  ``female``
#: is a public 0/1 constant used by eGFR; set it for the person.
DEFAULT_PROFILE: dict[str, Any] = {
    "format": "veil.rootguard.profile",
    "version": 1,
    "budget": 14.0,
    "max_total_epsilon": None,
    "target": None,
    "constants": {"female": 0},
    "values": {
        "age": _root("age", "years", [18, 100], 1, 10, 48, ["age", "aged"], "Age"),
        "height_cm": _root(
            "length", "cm", [120, 220], 0.1, 10, 168, ["height", "tall", "stature"], "Height"
        ),
        "weight_kg": _root(
            "mass",
            "kg",
            [30, 250],
            0.1,
            10,
            82,
            ["weight", "weigh", "weighs", "weighed", "body weight"],
            "Weight",
        ),
        "waist_cm": _root(
            "length", "cm", [50, 180], 0.1, 10, 99, ["waist", "waist circumference"], "Waist"
        ),
        "sbp": _root(
            "pressure",
            "mmHg",
            [70, 250],
            1,
            20,
            124,
            ["systolic", "systolic blood pressure", "sbp"],
            "Systolic blood pressure",
        ),
        "dbp": _root(
            "pressure",
            "mmHg",
            [40, 150],
            1,
            20,
            72,
            ["diastolic", "diastolic blood pressure", "dbp"],
            "Diastolic blood pressure",
        ),
        "glucose": _root(
            "glucose",
            "mg/dL",
            [40, 400],
            1,
            20,
            104,
            ["glucose", "fasting glucose", "blood sugar", "blood glucose", "fpg", "fbg"],
            "Fasting glucose",
        ),
        "insulin": _root(
            "insulin",
            "uU/mL",
            [1, 300],
            0.1,
            5,
            11,
            ["insulin", "fasting insulin"],
            "Fasting insulin",
        ),
        "ast": _root(
            "enzyme",
            "U/L",
            [5, 1000],
            1,
            20,
            24,
            ["ast", "sgot", "aspartate aminotransferase"],
            "AST",
        ),
        "alt": _root(
            "enzyme",
            "U/L",
            [5, 1000],
            1,
            20,
            24,
            ["alt", "sgpt", "alanine aminotransferase"],
            "ALT",
        ),
        "platelets": _root(
            "platelets",
            "10^9/L",
            [10, 1000],
            1,
            50,
            245,
            ["platelets", "platelet count", "platelet", "plt"],
            "Platelets",
        ),
        "creatinine": _root(
            "creatinine",
            "mg/dL",
            [0.2, 15],
            0.01,
            0.3,
            0.9,
            ["creatinine", "serum creatinine", "scr"],
            "Creatinine",
        ),
        "triglycerides": _root(
            "triglycerides",
            "mg/dL",
            [20, 2000],
            1,
            50,
            110,
            ["triglycerides", "triglyceride", "tg", "trigs"],
            "Triglycerides",
        ),
        "hdl": _root(
            "cholesterol",
            "mg/dL",
            [10, 150],
            1,
            10,
            53,
            ["hdl", "hdl cholesterol", "hdl-c"],
            "HDL cholesterol",
        ),
        "bmi": {"formula": "bmi"},
        "fib4": {"formula": "fib4"},
        "homa_ir": {"formula": "homa_ir"},
        "egfr": {"formula": "egfr"},
        "apri": {"formula": "apri"},
        "tyg": {"formula": "tyg"},
        "map": {"formula": "map"},
        "whtr": {"formula": "whtr"},
    },
}
