"""Built-in clinical formulas, each with its inputs, unit and risk classes.

Formulas are data: an expression over the standard value names used by
:data:`py_core.rootguard.api.DEFAULT_PROFILE` (``age``, ``height_cm``,
``weight_kg``, ``waist_cm``, ``sbp``, ``dbp``, ``glucose`` in mg/dL, ``insulin``
in µU/mL, ``ast``, ``alt``, ``platelets`` in 10^9/L, ``creatinine`` in mg/dL,
``triglycerides`` and ``hdl`` in mg/dL) and the public constant ``female``
(1 or 0).  A profile uses one with ``{"formula": "fib4"}``.

Risk classes are ``thresholds`` (ascending) and ``labels`` (one more than the
thresholds): a value ``v`` is in class ``i`` where ``i`` is the number of
thresholds ``<= v``.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from py_core.errors import InvalidParameterError
from py_core.rootguard.expr import Expression, parse_expression

__all__ = ["FORMULAS", "Formula", "RiskClasses", "get_formula"]


@dataclass(frozen=True, slots=True)
class RiskClasses:
    """Clinical classes of a value: ``labels[i]`` for ``thresholds[i-1] <= v < thresholds[i]``."""

    thresholds: tuple[float, ...]
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.labels) != len(self.thresholds) + 1:
            raise InvalidParameterError(
                f"risk classes need one more label than thresholds; got {len(self.labels)} "
                f"labels for {len(self.thresholds)} thresholds"
            )
        if any(b <= a for a, b in zip(self.thresholds, self.thresholds[1:], strict=False)):
            raise InvalidParameterError(
                f"risk class thresholds must increase strictly; got {list(self.thresholds)}"
            )

    def index(self, value: float) -> int:
        """The class index of ``value``."""
        return bisect_right(self.thresholds, value)

    def label(self, value: float) -> str:
        """The class label of ``value``."""
        return self.labels[self.index(value)]

    def to_dict(self) -> dict[str, list[float] | list[str]]:
        return {"thresholds": list(self.thresholds), "labels": list(self.labels)}

    @classmethod
    def from_dict(cls, data: object) -> RiskClasses:
        if not isinstance(data, dict) or set(data) != {"thresholds", "labels"}:
            raise InvalidParameterError(
                f"risk_classes must be {{'thresholds': [...], 'labels': [...]}}; got {data!r}"
            )
        thresholds, labels = data["thresholds"], data["labels"]
        if not isinstance(thresholds, list) or not all(
            isinstance(t, int | float) and not isinstance(t, bool) for t in thresholds
        ):
            raise InvalidParameterError(
                f"risk class thresholds must be numbers; got {thresholds!r}"
            )
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise InvalidParameterError(f"risk class labels must be strings; got {labels!r}")
        return cls(tuple(float(t) for t in thresholds), tuple(labels))


@dataclass(frozen=True, slots=True)
class Formula:
    """A named clinical formula."""

    name: str
    title: str
    expression: str
    quantity: str
    unit: str
    precision: float
    risk_classes: RiskClasses
    aliases: tuple[str, ...]
    reference: str

    @property
    def parsed(self) -> Expression:
        return parse_expression(self.expression)


# CKD-EPI 2021 (race-free), Inker et al., NEJM 2021:
# 142 * min(Scr/k, 1)^a * max(Scr/k, 1)^-1.200 * 0.9938^age * 1.012 [female],
# k = 0.7 (F) / 0.9 (M), a = -0.241 (F) / -0.302 (M); written with the 0/1 constant.
_EGFR = (
    "142 * min(creatinine / (0.7 * female + 0.9 * (1 - female)), 1)"
    " ** (-0.241 * female - 0.302 * (1 - female))"
    " * max(creatinine / (0.7 * female + 0.9 * (1 - female)), 1) ** (-1.2)"
    " * 0.9938 ** age * 1.012 ** female"
)

FORMULAS: dict[str, Formula] = {
    f.name: f
    for f in (
        Formula(
            "bmi",
            "Body-mass index",
            "weight_kg / (height_cm / 100) ** 2",
            "bmi",
            "kg/m2",
            0.1,
            RiskClasses((18.5, 25.0, 30.0), ("underweight", "normal", "overweight", "obese")),
            ("bmi", "body mass index", "body-mass index"),
            "WHO adult BMI classes",
        ),
        Formula(
            "fib4",
            "FIB-4 index (liver fibrosis)",
            "age * ast / (platelets * sqrt(alt))",
            "index",
            "",
            0.01,
            RiskClasses((1.3, 2.67), ("low", "indeterminate", "high")),
            ("fib-4", "fib4", "fib 4"),
            "Sterling et al. 2006; cut-offs 1.3 / 2.67 (Shah et al. 2009)",
        ),
        Formula(
            "homa_ir",
            "HOMA-IR (insulin resistance)",
            "glucose * insulin / 405",
            "index",
            "",
            0.01,
            RiskClasses((1.9, 2.9), ("normal", "early insulin resistance", "insulin resistance")),
            ("homa-ir", "homa ir", "homa"),
            "Matthews et al. 1985 (glucose in mg/dL); cut-offs 1.9 / 2.9 as commonly used",
        ),
        Formula(
            "egfr",
            "eGFR, CKD-EPI 2021 race-free",
            _EGFR,
            "gfr",
            "mL/min/1.73m2",
            1.0,
            RiskClasses((15.0, 30.0, 45.0, 60.0, 90.0), ("G5", "G4", "G3b", "G3a", "G2", "G1")),
            ("egfr", "gfr", "e-gfr"),
            "Inker et al. 2021; KDIGO G1-G5 categories",
        ),
        Formula(
            "apri",
            "APRI (AST to platelet ratio index)",
            "(ast / 40) / platelets * 100",
            "index",
            "",
            0.01,
            RiskClasses((0.5, 1.5), ("low", "indeterminate", "high")),
            ("apri",),
            "Wai et al. 2003; AST upper limit of normal 40 U/L; cut-offs 0.5 / 1.5",
        ),
        Formula(
            "tyg",
            "Triglyceride-glucose (TyG) index",
            "log(triglycerides * glucose / 2)",
            "index",
            "",
            0.01,
            RiskClasses((8.5, 8.8), ("low", "borderline", "insulin resistance")),
            ("tyg", "tyg index", "triglyceride-glucose index"),
            "Simental-Mendia et al. 2008 (mg/dL); cut-off 8.8 varies by population",
        ),
        Formula(
            "map",
            "Mean arterial pressure",
            "(sbp + 2 * dbp) / 3",
            "pressure",
            "mmHg",
            1.0,
            RiskClasses((70.0, 100.0), ("low", "normal", "high")),
            ("map", "mean arterial pressure"),
            "MAP = DBP + (SBP - DBP)/3",
        ),
        Formula(
            "whtr",
            "Waist-to-height ratio",
            "waist_cm / height_cm",
            "index",
            "",
            0.01,
            RiskClasses((0.4, 0.5, 0.6), ("low", "healthy", "increased risk", "high risk")),
            ("waist-to-height ratio", "waist to height ratio", "whtr"),
            "Ashwell et al. 2012 boundaries 0.4 / 0.5 / 0.6",
        ),
    )
}


def get_formula(name: str) -> Formula:
    """The built-in formula ``name``, or a clear error listing the known ones."""
    try:
        return FORMULAS[name]
    except KeyError:
        raise InvalidParameterError(
            f"unknown formula {name!r}; built-in formulas: {', '.join(sorted(FORMULAS))}"
        ) from None
