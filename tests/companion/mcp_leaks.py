"""The test oracle of the proxy's shape matrix: every way a true value can be written.

:func:`true_values_written` reads every number in a JSON value -- object keys too --
in every format a service might read it in (``93.7``, ``93,7``, ``9.37e1``,
``263,000``, ``263.000``, ``263 000``, ``263'000``, the pieces of ``47,38``) and
reports the ones that write one of the person's true values, in any unit of its
quantity (the units of ``units.py`` and grams, ounces, months, weeks, cells per
microlitre, g/L, mg/L), at the number's written precision.  It is written apart from
the proxy's own parser on purpose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from py_core.rootguard.profile import Profile
from py_core.rootguard.units import QUANTITIES

#: units per canonical unit, beyond units.py (the test's own table).
MORE_UNITS: dict[str, dict[str, float]] = {
    "mass": {"g": 1000.0, "oz": 35.27396195},
    "age": {"months": 12.0, "weeks": 52.1775},
    "platelets": {"/uL": 1000.0},
    "glucose": {"g/L": 0.01},
    "cholesterol": {"g/L": 0.01},
    "triglycerides": {"g/L": 0.01},
    "creatinine": {"mg/L": 10.0},
}

_PLAIN = re.compile(r"(?<![\d.])\d+(?:\.\d+)?(?![\d])")
_COMMA = re.compile(r"(?<![\d,.])\d+,\d+(?![\d])")
_GROUPED = re.compile(
    r"(?<![\d,.' ])\d{1,3}(?:([,.' \u00a0\u202f\u2019])\d{3})(?:\1\d{3})*(?:[.,]\d+)?"
)
_SCI = re.compile(r"(?<![\d.])\d+(?:[.,]\d+)?[eE][-+]?\d{1,3}")


def _readings(text: str) -> list[tuple[str, float, int]]:
    """(as written, value, decimals) for every reading of every number in ``text``."""
    out = []
    for m in _PLAIN.finditer(text):
        w = m.group(0)
        out.append((w, float(w), len(w.partition(".")[2])))
    for m in _COMMA.finditer(text):
        w = m.group(0)
        out.append((w, float(w.replace(",", ".")), len(w.partition(",")[2])))
    for m in _GROUPED.finditer(text):
        w = m.group(0)
        sep = m.group(1)
        body = w.replace(sep, "")
        mark = "," if sep == "." else "."
        whole, _, frac = body.partition(mark)
        out.append((w, float(f"{whole}.{frac}" if frac else whole), len(frac)))
    for m in _SCI.finditer(text):
        w = m.group(0)
        mantissa, _, exp = w.replace(",", ".").lower().partition("e")
        out.append((w, float(w.replace(",", ".")), len(mantissa.partition(".")[2]) - int(exp)))
    return out


def _keys(value: Any) -> list[str]:
    if isinstance(value, Mapping):
        return [str(k) for k in value] + [k for v in value.values() for k in _keys(v)]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def true_values_written(
    value: Any, profile: Profile, truth: Mapping[str, float], *, derived: tuple[str, ...] = ()
) -> list[str]:
    """Every number in ``value`` that writes a true value (see the module docstring)."""
    text = json.dumps(value, ensure_ascii=False) + " " + " ".join(_keys(value))
    everything = profile.evaluate_all({k: v for k, v in truth.items() if k in profile.roots})
    found = []
    for written, number, decimals in _readings(text):
        for name, true in everything.items():
            if name not in truth and name not in derived:
                continue
            spec = profile.spec(name)
            units = {**QUANTITIES[spec.quantity].factors, **MORE_UNITS.get(spec.quantity, {})}
            base = true / units[spec.unit]
            for unit, per in units.items():
                target = base * per
                tol = 0.5 * 10.0**-decimals
                if tol > 0.05 * abs(target):
                    continue  # too coarse to say anything ("2" metres)
                if name in profile.roots:
                    tol += 0.5 * profile.roots[name].grid.step / units[spec.unit] * per
                if abs(target - number) < tol - 1e-9:
                    found.append(f"{written} = {name} in {unit}")
    return found
