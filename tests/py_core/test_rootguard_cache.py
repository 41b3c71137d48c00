"""The noisy-root cache: drawn once, answered forever, saved and restored exactly."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from py_core.errors import InsufficientBudgetError, InvalidParameterError, StateError
from py_core.rootguard.api import DEFAULT_PROFILE
from py_core.rootguard.cache import RootCache, canonical_json
from py_core.rootguard.profile import load_profile
from tests.py_core.rootguard_data import TRUE

PROFILE = load_profile(copy.deepcopy(DEFAULT_PROFILE))
NAMES = list(PROFILE.names)


def _js_round_trip(state: dict[str, Any]) -> dict[str, Any]:
    """What JSON.stringify/JSON.parse in the extension does to a state: 13.0 becomes 13."""
    return json.loads(canonical_json(state))


def _fresh(seed: int = 1) -> RootCache:
    cache = RootCache.empty(PROFILE)
    cache.draw(TRUE, random.Random(seed), event="init")
    return cache


def test_init_draws_each_root_once_and_records_it() -> None:
    """Initialisation draws every root with a true value, one ledger entry spending B."""
    cache = _fresh()
    assert set(cache.roots) == set(PROFILE.roots)
    assert len(cache.ledger) == 1
    assert cache.ledger[0]["event"] == "init"
    assert cache.total_spent == pytest.approx(PROFILE.budget)


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("value"), st.sampled_from(NAMES)),
            st.tuples(st.just("save"), st.just("")),
            st.tuples(st.just("js"), st.just("")),
            st.tuples(st.just("draw"), st.just("")),
        ),
        max_size=25,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_sequence_of_requests_and_restores_gives_the_same_values(
    ops: list[tuple[str, str]], seed: int
) -> None:
    """Requests, serializations, JS round trips and redundant draws never change an answer."""
    cache = _fresh(seed)
    reference = cache.values()
    ledger_length = len(cache.ledger)
    rng = random.Random(seed + 1)
    for op, name in ops:
        if op == "value":
            assert cache.value(name) == reference[name]
        elif op == "save":
            cache = RootCache.from_dict(PROFILE, cache.to_dict())
        elif op == "js":
            cache = RootCache.from_dict(PROFILE, _js_round_trip(cache.to_dict()))
        else:
            assert cache.draw(TRUE, rng) is None  # everything is cached: nothing drawn
    assert cache.values() == reference
    assert len(cache.ledger) == ledger_length


def test_state_restores_exactly() -> None:
    """to_dict(from_dict(s)) == s, also after a JavaScript round trip."""
    state = _fresh().to_dict()
    assert RootCache.from_dict(PROFILE, state).to_dict() == state
    assert RootCache.from_dict(PROFILE, _js_round_trip(state)).to_dict() == state
    assert json.loads(json.dumps(state)) == state


def test_derived_values_are_functions_of_noisy_roots() -> None:
    """A derived value is f(noisy roots), never separately noised."""
    cache = _fresh()
    roots = cache.root_values()
    assert cache.value("bmi") == roots["weight_kg"] / (roots["height_cm"] / 100) ** 2
    assert cache.value("map") == (roots["sbp"] + 2 * roots["dbp"]) / 3


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (
            lambda s: s["roots"]["age"].__setitem__("index", s["roots"]["age"]["index"] + 1),
            "checksum",
        ),
        (lambda s: s.__setitem__("checksum", "sha256:00"), "checksum"),
        (lambda s: s["ledger"].clear(), "checksum"),
        (lambda s: s.__setitem__("format", "other"), "not a RootGuard state"),
        (lambda s: s.__setitem__("version", 2), "version"),
    ],
)
def test_corrupted_state_is_refused(mutate: Any, fragment: str) -> None:
    """Any change outside Veil is detected and refused with a clear message."""
    state = _fresh().to_dict()
    mutate(state)
    with pytest.raises(StateError, match=fragment):
        RootCache.from_dict(PROFILE, state)


def _resign(state: dict[str, Any]) -> dict[str, Any]:
    from py_core.rootguard.cache import _checksum

    body = {k: v for k, v in state.items() if k != "checksum"}
    return {**body, "checksum": _checksum(body)}


def test_mismatched_profile_is_refused_and_not_redrawn() -> None:
    """A state drawn for other parameters names each mismatching root; tolerated only on reset."""
    state = _fresh().to_dict()
    changed = copy.deepcopy(DEFAULT_PROFILE)
    changed["values"]["weight_kg"]["domain"] = [40, 200]
    changed["budget"] = 28.0
    profile = load_profile(changed)
    with pytest.raises(StateError) as info:
        RootCache.from_dict(profile, state)
    message = str(info.value)
    assert "'weight_kg' was drawn with" in message
    assert "domain [30, 250]" in message
    assert "reset 'weight_kg' explicitly" in message
    assert "nothing was re-drawn" in message
    cache = RootCache.from_dict(profile, state, tolerate_mismatch=list(profile.roots))
    # Only the mismatching root is dropped; the others were drawn at ε = 1 <= 2 now allowed.
    assert set(cache.roots) == set(profile.roots) - {"weight_kg"}


def test_draw_at_larger_epsilon_than_now_allowed_is_refused() -> None:
    """Lowering the budget makes cached draws less private than wanted: refused until reset."""
    state = _fresh().to_dict()
    stricter = copy.deepcopy(DEFAULT_PROFILE)
    stricter["budget"] = 7.0
    with pytest.raises(StateError, match="more than the profile now allows"):
        RootCache.from_dict(load_profile(stricter), state)


def test_tampered_but_resigned_state_is_checked_semantically() -> None:
    """Even with a valid checksum, off-grid indices and broken ledgers are refused."""
    state = _fresh().to_dict()
    state["roots"]["age"]["index"] = 10_000
    state["ledger"][0]["spent"] = 1.0
    with pytest.raises(StateError) as info:
        RootCache.from_dict(PROFILE, _resign(state))
    assert "outside the domain's grid" in str(info.value)
    assert "'spent' does not match" in str(info.value)


def test_reset_redraws_spends_and_is_recorded() -> None:
    """An explicit reset draws again, spends ε again and appends a ledger entry."""
    cache = _fresh()
    before = dict(cache.roots)
    entry = cache.reset(TRUE, random.Random(99), names=["weight_kg", "age"])
    assert entry is not None and entry["event"] == "reset"
    assert set(entry["epsilon"]) == {"weight_kg", "age"}
    assert cache.total_spent == pytest.approx(PROFILE.budget + 2.0)
    assert cache.roots["height_cm"] == before["height_cm"]
    with pytest.raises(InvalidParameterError, match="derived"):
        cache.reset(TRUE, random.Random(1), names=["bmi"])
    with pytest.raises(InvalidParameterError, match="no true value"):
        cache.reset({}, random.Random(1), names=["age"])


def test_lifetime_cap_refuses_and_changes_nothing() -> None:
    """Past max_total_epsilon a draw raises InsufficientBudgetError and leaves the cache intact."""
    capped = copy.deepcopy(DEFAULT_PROFILE)
    capped["max_total_epsilon"] = 15.0
    profile = load_profile(capped)
    cache = RootCache.empty(profile)
    cache.draw(TRUE, random.Random(1))
    state = cache.to_dict()
    with pytest.raises(InsufficientBudgetError) as info:
        cache.reset(TRUE, random.Random(2), names=["age", "alt"])
    assert info.value.remaining == pytest.approx(1.0)
    assert info.value.requested == pytest.approx(2.0)
    assert cache.to_dict() == state


def test_missing_roots_are_drawn_later_only_once() -> None:
    """A root without a true value is skipped, drawn when its value arrives, never twice."""
    cache = RootCache.empty(PROFILE)
    partial = {k: v for k, v in TRUE.items() if k != "ast"}
    cache.draw(partial, random.Random(1), event="init")
    assert "ast" not in cache.roots
    with pytest.raises(InvalidParameterError, match="not been sanitized"):
        cache.value("fib4")
    entry = cache.draw(TRUE, random.Random(2))
    assert entry is not None and list(entry["epsilon"]) == ["ast"]
    assert cache.draw(TRUE, random.Random(3)) is None
    assert len(cache.ledger) == 2


def test_bad_true_value_draws_nothing() -> None:
    """A non-numeric true value is refused before anything is drawn."""
    cache = RootCache.empty(PROFILE)
    with pytest.raises(InvalidParameterError, match="finite number"):
        cache.draw({**TRUE, "age": "52"}, random.Random(1))  # type: ignore[dict-item]
    assert cache.roots == {} and cache.ledger == []
