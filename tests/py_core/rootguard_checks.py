"""RootGuard checks that need nothing but the standard library.

Run under pytest in CPython (tests/py_core/test_rootguard_checks.py) and inside
Pyodide under Node (tests/pyodide/run_checks.mjs collects every
``tests/py_core/*_checks.py``), so the facade the extension calls is tested on
the interpreter it really runs on.
"""

from __future__ import annotations

import copy
import json
import math
import random

from py_core.errors import InsecureRandomnessError, StateError
from py_core.rootguard import api
from py_core.rootguard.expr import parse_expression
from py_core.rootguard.mechanism import DiscreteLaplaceMechanism, Grid

TRUE = {
    "age": 52,
    "height_cm": 180.3,
    "weight_kg": 81.0,
    "sbp": 128,
    "dbp": 82,
    "ast": 40,
    "alt": 35,
    "platelets": 230,
}


def check_default_profile_valid() -> None:
    assert api.validate_profile(api.DEFAULT_PROFILE) == []


def check_unsafe_formula_refused() -> None:
    for source in ("x.__class__", "__import__('os')", "2 ** 1000", "x[0]"):
        try:
            parse_expression(source)
        except ValueError:
            continue
        raise AssertionError(f"accepted {source!r}")


def check_facade_round_trip() -> None:
    state = json.loads(json.dumps(api.init_state(api.DEFAULT_PROFILE, TRUE)))
    text = "I'm 52, weigh 178.6 lb, 5'11\", BP 128/82, AST 40 U/L. Call 555-128-8200."
    out = api.protect_text(text, api.DEFAULT_PROFILE, TRUE, state)
    again = api.protect_text(text, api.DEFAULT_PROFILE, TRUE, json.loads(json.dumps(out["state"])))
    assert out["text"] == again["text"]
    names = [r["name"] for r in out["replacements"]]
    assert names == ["age", "weight_kg", "height_cm", "sbp", "dbp", "ast"], names
    for (start, end), rep in zip(out["spans"], out["replacements"], strict=True):
        assert out["text"][start:end] == rep["replacement"]
    assert out["text"].endswith("Call 555-128-8200.")
    assert len(api.ledger(again["state"])) == 1


def check_seeded_rng_refused() -> None:
    try:
        api.init_state(api.DEFAULT_PROFILE, TRUE, rng=random.Random(1))
    except InsecureRandomnessError:
        return
    raise AssertionError("a seeded RNG was accepted for real data")


def check_corrupted_state_refused() -> None:
    state = api.init_state(api.DEFAULT_PROFILE, TRUE)
    bad = copy.deepcopy(state)
    bad["roots"]["age"]["index"] += 1
    try:
        api.noisy_values(api.DEFAULT_PROFILE, bad)
    except StateError:
        return
    raise AssertionError("a corrupted state was accepted")


def check_mechanism_epsilon_tight() -> None:
    mech = DiscreteLaplaceMechanism(Grid(0, 2, 0.5), 0.7, 2.0)
    worst = max(
        abs(mech.log_probability(o, a) - mech.log_probability(o, b))
        for a in range(5)
        for b in range(5)
        for o in range(5)
    )
    assert 0.7 * (1 - 1e-9) < worst <= 0.7 * (1 + 1e-9), worst


def check_release_frequencies() -> None:
    rng = random.Random(12)
    mech = DiscreteLaplaceMechanism(Grid(0, 6, 1), 1.0, 3.0)
    n = 20_000
    counts = [0] * 7
    for _ in range(n):
        counts[mech.release_index(3, rng)] += 1
    for out in range(7):
        p = math.exp(mech.log_probability(out, 3))
        assert abs(counts[out] / n - p) < 4 * math.sqrt(p * (1 - p) / n), out
