"""Quantities, their units and exact conversion factors.

Every profile value declares a *quantity* (mass, length, glucose, ...) and the
unit its numbers are in.  A number found in free text may be written in another
unit of the same quantity ("178 lb" for a weight declared in kg, "5.4 mmol/L"
for a glucose declared in mg/dL); :func:`convert` maps between them.

``factor`` is how many of the unit make one canonical unit:
``value_in_unit = value_in_canonical * factor``.  Molar conversions use the
usual clinical factors (glucose 18.016 mg/dL per mmol/L; triglycerides 88.57;
cholesterol 38.67; creatinine 88.42 µmol/L per mg/dL; insulin 6.0 pmol/L per
µU/mL).
"""

from __future__ import annotations

from dataclasses import dataclass

from py_core.errors import InvalidParameterError

__all__ = ["QUANTITIES", "Quantity", "convert", "quantity_of"]


@dataclass(frozen=True, slots=True)
class Quantity:
    """A physical or clinical quantity and the units it may be written in."""

    name: str
    canonical: str
    factors: dict[str, float]  # unit -> units per canonical unit

    def __post_init__(self) -> None:
        if self.factors.get(self.canonical) != 1.0:
            raise InvalidParameterError(
                f"quantity {self.name!r}: canonical unit {self.canonical!r} must have factor 1.0"
            )


QUANTITIES: dict[str, Quantity] = {
    q.name: q
    for q in (
        Quantity("age", "years", {"years": 1.0}),
        Quantity("mass", "kg", {"kg": 1.0, "lb": 1.0 / 0.45359237}),
        Quantity(
            "length", "cm", {"cm": 1.0, "m": 0.01, "mm": 10.0, "in": 1.0 / 2.54, "ft": 1.0 / 30.48}
        ),
        Quantity("pressure", "mmHg", {"mmHg": 1.0}),
        Quantity("glucose", "mg/dL", {"mg/dL": 1.0, "mmol/L": 1.0 / 18.016}),
        Quantity("triglycerides", "mg/dL", {"mg/dL": 1.0, "mmol/L": 1.0 / 88.57}),
        Quantity("cholesterol", "mg/dL", {"mg/dL": 1.0, "mmol/L": 1.0 / 38.67}),
        Quantity("creatinine", "mg/dL", {"mg/dL": 1.0, "umol/L": 88.42}),
        Quantity("insulin", "uU/mL", {"uU/mL": 1.0, "mU/L": 1.0, "pmol/L": 6.0}),
        Quantity("enzyme", "U/L", {"U/L": 1.0, "IU/L": 1.0}),
        Quantity("platelets", "10^9/L", {"10^9/L": 1.0, "10^3/uL": 1.0}),
        Quantity("percent", "%", {"%": 1.0}),
        Quantity("bmi", "kg/m2", {"kg/m2": 1.0}),
        Quantity("gfr", "mL/min/1.73m2", {"mL/min/1.73m2": 1.0}),
        Quantity("index", "", {"": 1.0}),
    )
}


def quantity_of(name: str) -> Quantity:
    """The :class:`Quantity` called ``name``, or a clear error listing the known ones."""
    try:
        return QUANTITIES[name]
    except KeyError:
        raise InvalidParameterError(
            f"unknown quantity {name!r}; known: {', '.join(sorted(QUANTITIES))}"
        ) from None


def convert(value: float, quantity: str, from_unit: str, to_unit: str) -> float:
    """``value`` in ``from_unit`` expressed in ``to_unit`` (both units of ``quantity``)."""
    q = quantity_of(quantity)
    for unit in (from_unit, to_unit):
        if unit not in q.factors:
            raise InvalidParameterError(
                f"unit {unit!r} is not a unit of {quantity!r}; use one of {sorted(q.factors)}"
            )
    if from_unit == to_unit:
        return value
    return value / q.factors[from_unit] * q.factors[to_unit]
