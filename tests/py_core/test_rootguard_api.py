"""The JSON facade the extension calls from Pyodide."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from py_core.errors import InsecureRandomnessError, InvalidParameterError, StateError
from py_core.rootguard import api
from tests.py_core.rootguard_data import TRUE

PROFILE = api.DEFAULT_PROFILE


def _through_json(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


def test_default_profile_validates_and_is_json() -> None:
    """DEFAULT_PROFILE is valid and survives JSON."""
    assert api.validate_profile(PROFILE) == []
    assert api.validate_profile(_through_json(PROFILE)) == []


def test_validate_profile_lists_problems() -> None:
    """validate_profile returns every problem as text, never raises for a bad profile."""
    bad = copy.deepcopy(PROFILE)
    bad["values"]["age"]["domain"] = [100, 18]
    bad["values"]["bmi"] = {"expression": "weight_kg.real"}
    problems = api.validate_profile(bad)
    assert any("'age'" in p and "inverted" in p for p in problems)
    assert any("attribute access" in p for p in problems)
    assert api.validate_profile("nope") == ["a profile must be a JSON object; got str"]


def test_facade_refuses_seeded_rng() -> None:
    """Real data: a seeded random.Random is refused everywhere; SystemRandom is accepted."""
    with pytest.raises(InsecureRandomnessError):
        api.init_state(PROFILE, TRUE, rng=random.Random(1))
    state = api.init_state(PROFILE, TRUE, rng=random.SystemRandom())
    with pytest.raises(InsecureRandomnessError):
        api.protect_text("I'm 52", PROFILE, TRUE, state, rng=random.Random(1))
    with pytest.raises(InsecureRandomnessError):
        api.reset_state(PROFILE, TRUE, state, rng=random.Random(1))


def test_init_protect_and_ledger() -> None:
    """init draws once; protect_text answers from the cache without drawing again."""
    state = _through_json(api.init_state(PROFILE, TRUE))
    assert len(api.ledger(state)) == 1
    noisy = api.noisy_values(PROFILE, state)
    text = "I'm 52, 81 kg, AST 40 U/L, BMI 24.9. Call 555-128-8200."
    first = api.protect_text(text, PROFILE, TRUE, state)
    again = api.protect_text(text, PROFILE, TRUE, _through_json(first["state"]))
    assert first["text"] == again["text"]
    assert api.ledger(again["state"]) == api.ledger(state)
    assert [r["name"] for r in first["replacements"]] == ["age", "weight_kg", "ast", "bmi"]
    assert first["replacements"][0]["replacement"] == f"{noisy['age']:.0f}"
    for (start, end), rep in zip(first["spans"], first["replacements"], strict=True):
        assert first["text"][start:end] == rep["replacement"]
        assert (start, end) == (rep["start"], rep["end"])
    assert first["text"].endswith("Call 555-128-8200.")
    assert _through_json(first) == first


def test_protect_draws_missing_root_once() -> None:
    """A root with a true value but no cached value is drawn on first use, recorded, and kept."""
    partial = {k: v for k, v in TRUE.items() if k != "ast"}
    state = api.init_state(PROFILE, partial)
    out = api.protect_text("AST 40 U/L", PROFILE, TRUE, state)
    entries = api.ledger(out["state"])
    assert len(entries) == 2 and entries[1]["event"] == "draw"
    assert list(entries[1]["epsilon"]) == ["ast"]
    out2 = api.protect_text("AST 40 U/L", PROFILE, TRUE, out["state"])
    assert out2["text"] == out["text"]
    assert len(api.ledger(out2["state"])) == 2


def test_corrupted_state_raises_and_draws_nothing() -> None:
    """A tampered state is refused by every entry point; nothing is re-drawn."""
    state = api.init_state(PROFILE, TRUE)
    bad = copy.deepcopy(state)
    bad["roots"]["age"]["index"] += 1
    for call in (
        lambda: api.protect_text("I'm 52", PROFILE, TRUE, bad),
        lambda: api.noisy_values(PROFILE, bad),
        lambda: api.ledger(bad),
        lambda: api.reset_state(PROFILE, TRUE, bad),
    ):
        with pytest.raises(StateError, match="corrupted"):
            call()


def test_mismatched_state_needs_explicit_reset() -> None:
    """After a domain change the state is refused until the root is reset (spending ε)."""
    state = api.init_state(PROFILE, TRUE)
    changed = copy.deepcopy(PROFILE)
    changed["values"]["age"]["domain"] = [18, 90]
    with pytest.raises(StateError, match="reset 'age'"):
        api.protect_text("I'm 52", changed, TRUE, state)
    new_state = api.reset_state(changed, TRUE, state, names=["age"])
    entries = api.ledger(new_state)
    assert entries[-1]["event"] == "reset" and list(entries[-1]["epsilon"]) == ["age"]
    assert entries[-1]["total_spent"] == pytest.approx(15.0)
    assert api.protect_text("I'm 52", changed, TRUE, new_state)["spans"] == [[4, 6]]


def test_reset_all_roots_by_default() -> None:
    """reset_state without names re-draws every root with a true value."""
    state = api.init_state(PROFILE, TRUE)
    new_state = api.reset_state(PROFILE, TRUE, state)
    assert api.ledger(new_state)[-1]["spent"] == pytest.approx(14.0)


def test_true_values_are_checked() -> None:
    """Unknown names, non-numbers and values outside the domain are refused with the reason."""
    with pytest.raises(InvalidParameterError) as info:
        api.init_state(PROFILE, {"age": 300, "shoe": 44, "weight_kg": "81"})  # type: ignore[dict-item]
    message = str(info.value)
    assert "outside its public domain [18, 100]" in message
    assert "'shoe' is not a value" in message
    assert "'weight_kg' must be a finite number" in message


def test_describe_reports_guarantees() -> None:
    """describe() gives ε, privacy unit, noise scale and domain ε for each root."""
    info = api.describe(PROFILE)
    weight = info["roots"]["weight_kg"]
    assert weight["epsilon"] == pytest.approx(1.0)
    assert weight["noise_scale"] == pytest.approx(10.0)
    assert weight["domain_epsilon"] == pytest.approx(22.0)
    assert info["derived"]["bmi"]["from"] == ["height_cm", "weight_kg"]
    assert _through_json(info) == info


def test_removed_root_blocks_until_reset() -> None:
    """A state with a root the profile dropped is refused; a reset drops it and records itself."""
    state = api.init_state(PROFILE, TRUE)
    smaller = copy.deepcopy(PROFILE)
    del smaller["values"]["hdl"]
    truth = {k: v for k, v in TRUE.items() if k != "hdl"}
    with pytest.raises(StateError, match="'hdl'"):
        api.noisy_values(smaller, state)
    new_state = api.reset_state(smaller, truth, state, names=["age"])
    assert "hdl" not in new_state["roots"]
    assert api.ledger(new_state)[-1]["epsilon"] == {"age": pytest.approx(14 / 13)}
