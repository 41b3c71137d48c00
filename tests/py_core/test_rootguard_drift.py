"""Numbers that drift: a value in a recognised context that is not the stored one.

"weight 83.4 kg, I'm 53" with 82.4 and 52 stored used to go out as typed.  Now each
such number is a new disclosure of its root: drawn once with the root's mechanism,
cached under the written value, recorded in the ledger, and offered for storing
(:func:`api.drifts`, :func:`api.add_values`).  Numbers outside any recognised context
(dates, phone numbers, ranges, other units) stay untouched.  Also here: the ε figures
shown both ways (point 5) and adding a value later (point 7).
"""

from __future__ import annotations

import copy
import json
import math
import random
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from py_core.errors import InsufficientBudgetError, SetupRequiredError, StateError
from py_core.rootguard import api
from py_core.rootguard.cache import RootCache
from py_core.rootguard.profile import load_profile
from tests.py_core.rootguard_data import TRUE

PROFILE = api.DEFAULT_PROFILE
STORED = {"weight_kg": 82.4, "age": 52, "height_cm": 171.0}
DRIFT_PROMPT = "weight 83.4 kg, I'm 53"


def _json(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


def _state(true_values: dict[str, float] | None = None) -> dict[str, Any]:
    return _json(api.init_state(PROFILE, STORED if true_values is None else true_values))


# ---------------------------------------------------------------- the drift case


def test_drifted_numbers_are_never_sent_raw() -> None:
    """The issue's prompt: both numbers are replaced, each drawn once and recorded."""
    state = _state()
    out = api.protect_text(DRIFT_PROMPT, PROFILE, STORED, state)
    assert [r["name"] for r in out["replacements"]] == ["weight_kg", "age"]
    assert all(r["drift"] for r in out["replacements"])
    weight, age = (r["replacement"] for r in out["replacements"])
    assert out["text"] == f"weight {weight} kg, I'm {age}"
    # The replacement is the drifted draw, not the stored value's draw.
    entries = api.ledger(out["state"])
    assert [e["event"] for e in entries] == ["init", "drift", "drift"]
    assert [list(e["epsilon"]) for e in entries[1:]] == [["weight_kg"], ["age"]]
    eps = RootCache.empty(load_profile(copy.deepcopy(PROFILE))).allocation
    spent = sum(eps[n] for n in STORED) + eps["weight_kg"] + eps["age"]
    assert entries[-1]["total_spent"] == pytest.approx(spent)
    drifts = out["state"]["drifts"]
    assert set(drifts) == {"weight_kg", "age"}
    assert list(drifts["weight_kg"]) == ["834"]  # cached under the written value's grid index
    assert list(drifts["age"]) == ["53"]
    assert f"{drifts['weight_kg']['834']['value']:.1f}" == weight
    assert f"{drifts['age']['53']['value']:.0f}" == age
    assert [(d["name"], d["value"], d["drawn"]) for d in out["drifts"]] == [
        ("weight_kg", 83.4, True),
        ("age", 53, True),
    ]


def test_a_repeated_drift_reuses_its_draw() -> None:
    """Writing 83.4 kg again (any format of the same grid value) draws nothing."""
    first = api.protect_text(DRIFT_PROMPT, PROFILE, STORED, _state())
    again = api.protect_text(DRIFT_PROMPT, PROFILE, STORED, _json(first["state"]))
    assert again["text"] == first["text"]
    assert api.ledger(again["state"]) == api.ledger(first["state"])
    assert [d["drawn"] for d in again["drifts"]] == [False, False]
    pounds = api.protect_text("I weigh 183.9 lb", PROFILE, STORED, _json(first["state"]))
    assert len(api.ledger(pounds["state"])) == len(api.ledger(first["state"]))  # 83.4 kg again
    noisy = first["state"]["drifts"]["weight_kg"]["834"]["value"]
    assert pounds["replacements"][0]["replacement"] == f"{noisy / 0.45359237:.1f}"
    # The stored value still answers with the first draw.
    stored = api.protect_text("weight 82.4 kg", PROFILE, STORED, _json(first["state"]))
    assert stored["replacements"][0]["drift"] is False
    assert (
        stored["text"] == f"weight {api.noisy_values(PROFILE, first['state'])['weight_kg']:.1f} kg"
    )


class _Recorded(random.SystemRandom):
    """A SystemRandom whose randrange replays a seeded stream (tests only)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._stream = random.Random(seed)

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        return self._stream.randrange(start, stop, step)


def test_a_drift_is_drawn_with_the_roots_mechanism() -> None:
    """The drifted draw is exactly the root's mechanism applied to the written value."""
    prof = load_profile(copy.deepcopy(PROFILE))
    cache = RootCache.empty(prof)
    for seed in range(20):
        expected = cache.mechanism("weight_kg").release_index(83.4, random.Random(seed))
        out = api.protect_text("weight 83.4 kg", PROFILE, STORED, _state(), rng=_Recorded(seed))
        assert out["state"]["drifts"]["weight_kg"]["834"]["index"] == expected


def test_a_number_on_the_stored_values_grid_point_takes_its_draw() -> None:
    """82.36 is not 82.44 at the written precision, but both snap to 82.4: the stored draw
    (drawn now if it was not yet), not a drift."""
    truth = {"weight_kg": 82.44}
    state = _state({"age": 52})  # weight not drawn yet
    out = api.protect_text("weight 82.36 kg", PROFILE, truth, state)
    assert "drifts" not in out["state"] and out["drifts"] == []
    assert out["replacements"][0]["drift"] is False
    assert [e["event"] for e in api.ledger(out["state"])] == ["init", "draw"]
    noisy = api.noisy_values(PROFILE, out["state"])["weight_kg"]
    assert out["text"] == f"weight {noisy:.2f} kg"


def test_derived_drift_is_answered_from_the_noisy_roots() -> None:
    """A BMI that is not the stored one: f(noisy roots), the drifted weight where it drifted."""
    state = _state()
    noisy = api.noisy_values(PROFILE, state)
    out = api.protect_text("my BMI is 31", PROFILE, STORED, state)
    assert out["replacements"][0]["replacement"] == f"{noisy['bmi']:.0f}"
    assert len(api.ledger(out["state"])) == 1  # nothing drawn: post-processing
    both = api.protect_text("weight 83.4 kg and my BMI is 31", PROFILE, STORED, state)
    weight = both["state"]["drifts"]["weight_kg"]["834"]["value"]
    bmi = weight / (noisy["height_cm"] / 100) ** 2
    assert both["replacements"][1]["replacement"] == f"{bmi:.0f}"


def test_derived_drift_without_its_roots_is_refused() -> None:
    """Nothing can stand in for a BMI whose roots have no value: the send is refused."""
    state = _state({"age": 52})
    with pytest.raises(SetupRequiredError, match="height_cm, weight_kg"):
        api.protect_text("my BMI is 31", PROFILE, {"age": 52}, state)


def test_a_root_without_a_stored_value_is_drawn_for_what_was_written() -> None:
    """Height never declared: "height 172 cm" is still a disclosure of it, drawn once."""
    stored = {"weight_kg": 82.4}
    out = api.protect_text("height 172 cm", PROFILE, stored, _state(stored))
    assert out["replacements"][0]["drift"] is True
    assert list(out["state"]["drifts"]["height_cm"]) == ["1720"]
    assert "height_cm" not in out["state"]["roots"]


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("BP 130/85", "sbp"),  # blood pressure
        ("I'm 5'9\" tall", "height_cm"),  # feet and inches
        ("53M with chest pain", "age"),  # age-sex shorthand
        ("AST/ALT 41/36", "ast"),  # a labelled pair
        ("aged 53", "age"),
        ("glucose 6.1 mmol/L", "glucose"),  # another unit of the quantity
        ("1.72 m tall", "height_cm"),
        ("Alanine Aminotransferase (ALT) was 29 U/L", "alt"),  # an alias in parentheses
        ("back to 90 kg after the holidays", "weight_kg"),  # a body measure's unit alone is enough
    ],
)
def test_every_recognised_form_drifts(text: str, name: str) -> None:
    """Each form find_mentions recognises also catches a value that is not the stored one."""
    stored = {**STORED, "sbp": 128, "dbp": 82, "ast": 40, "alt": 35, "glucose": 97}
    out = api.protect_text(text, PROFILE, stored, _state(stored))
    assert out["replacements"], text
    assert out["replacements"][0]["name"] == name
    assert all(r["drift"] for r in out["replacements"])


def test_the_lifetime_cap_refuses_a_drift_and_changes_nothing() -> None:
    """A drift spends ε; over the cap it is refused (the send is blocked, never raw)."""
    capped = copy.deepcopy(PROFILE)
    capped["max_total_epsilon"] = capped["budget"]
    truth = {**TRUE, "weight_kg": 82.4}
    state = _json(api.init_state(capped, truth))  # every root drawn: the cap is reached
    with pytest.raises(InsufficientBudgetError):
        api.protect_text("weight 83.4 kg", capped, truth, state)


# ---------------------------------------------------------------- untouched cases


@pytest.mark.parametrize(
    "text",
    [
        "seen on 05/12/2024 and 2024-05-12",  # dates
        "on May 12, 2024 at 10:52",  # a date in words, a time
        "call (555) 128-4081 or 555-128-8200",  # phone numbers
        "+1 555 083 0053",
        "weight range 70-85 kg",  # ranges
        "somewhere between 53 and 60 years",
        "from 80 to 85 kg",
        "I have 2 kids and 53 cards",  # numbers in unrelated contexts
        "chapter 83, page 53",
        "I'm 30 minutes late",  # a duration after an age phrase
        "drove 83 km and took 500 mg",  # a number next to an unrelated unit
        "HbA1c 5.6%",
        "the B52 and COVID-19",
        "MRN 5281040",
        "I lost 5 kg",  # outside the weight's public domain: not a weight
        "the map 2 shows it",  # outside MAP's range: not a pressure
        "a 52m sprint",
        # Lab units are shared with analytes the profile does not declare, and "in" is
        # mostly a preposition: seen in evals.krr's clinical notes and e-mails.
        "Urea was 3.8 mmol/L",
        "Alkaline Phosphatase was 62 U/L",
        "Thyroid Stimulating Hormone (TSH) was 2.45 mIU/L",
        "Total Bilirubin was 21 µmol/L",
        "I will be staying at Postfach 71 in Albligen",
    ],
)
def test_other_numbers_are_untouched(text: str) -> None:
    """No replacement and no draw: the text and the state come back unchanged."""
    state = _state()
    out = api.protect_text(text, PROFILE, STORED, state)
    assert out["text"] == text
    assert out["replacements"] == [] and out["drifts"] == []
    assert out["state"] == state


# ---------------------------------------------------------------- the state


def test_drifts_survive_json_and_corruption_is_refused() -> None:
    """The drifted draws are in the checksummed state; a changed one is refused."""
    out = api.protect_text(DRIFT_PROMPT, PROFILE, STORED, _state())
    state = _json(out["state"])
    assert api.noisy_values(PROFILE, state) == api.noisy_values(PROFILE, out["state"])
    tampered = copy.deepcopy(state)
    tampered["drifts"]["weight_kg"]["834"]["index"] += 1
    with pytest.raises(StateError, match="checksum"):
        api.protect_text(DRIFT_PROMPT, PROFILE, STORED, tampered)


def test_a_state_without_drifts_keeps_its_checksum() -> None:
    """Older states (no "drifts" key) are read and written back byte for byte."""
    state = _state()
    assert "drifts" not in state
    out = api.protect_text("weight 82.4 kg", PROFILE, STORED, state)
    assert out["state"] == state


def test_reset_starts_the_root_over_with_its_drifts() -> None:
    """A reset of weight drops weight's drifted draws (and keeps age's)."""
    out = api.protect_text(DRIFT_PROMPT, PROFILE, STORED, _state())
    reset = api.reset_state(PROFILE, STORED, out["state"], names=["weight_kg"])
    assert set(reset["drifts"]) == {"age"}


def test_compare_records_sees_a_missing_drift() -> None:
    """An import that lacks a drifted draw made here is a conflict (never merged)."""
    here_state = _state()
    drifted = api.protect_text(DRIFT_PROMPT, PROFILE, STORED, here_state)["state"]
    here = {"profile": PROFILE, "trueValues": STORED, "state": drifted}
    older = {"profile": PROFILE, "trueValues": STORED, "state": here_state}
    relation, reasons = api.compare_records(here, older)
    assert relation == "conflict"
    assert any("other written values" in r for r in reasons)
    assert api.compare_records(older, here)[0] == "extends"


# ---------------------------------------------------------------- storing a value later


def test_add_a_value_later_draws_only_it() -> None:
    """Adding height later: weight's draw unchanged, height drawn once, recorded as "add"."""
    truth = {"weight_kg": 82.4}
    state = _state(truth)
    out = api.add_values(PROFILE, truth, state, {"height_cm": 171.0})
    assert out["state"]["roots"]["weight_kg"] == state["roots"]["weight_kg"]
    assert set(out["state"]["roots"]) == {"weight_kg", "height_cm"}
    assert [e["event"] for e in api.ledger(out["state"])] == ["init", "add"]
    assert list(api.ledger(out["state"])[1]["epsilon"]) == ["height_cm"]
    assert out["added"] == ["height_cm"] and out["adopted"] == []
    assert list(out["trueValues"]) == ["height_cm", "weight_kg"]  # the profile's order
    same = api.add_values(PROFILE, out["trueValues"], out["state"], {"height_cm": 171.0})
    assert same["state"] == out["state"] and same["added"] == []


def test_storing_a_drifted_value_takes_its_draw() -> None:
    """ "Update my stored weight?" to 83.4: the draw already sent becomes the stored one.

    No new draw; the old draw stays cached under 82.4, so writing 82.4 still sends it."""
    out = api.protect_text(DRIFT_PROMPT, PROFILE, STORED, _state())
    before = out["state"]
    offered = api.drifts(PROFILE, STORED, before)
    assert [(d["name"], d["value"], d["stored"]) for d in offered] == [
        ("age", 53, 52),
        ("weight_kg", 83.4, 82.4),
    ]
    updated = api.add_values(PROFILE, STORED, before, {"weight_kg": 83.4})
    assert updated["updated"] == ["weight_kg"] and updated["adopted"] == ["weight_kg"]
    assert api.ledger(updated["state"]) == api.ledger(before)  # nothing spent
    assert (
        updated["state"]["roots"]["weight_kg"]["index"]
        == before["drifts"]["weight_kg"]["834"]["index"]
    )
    old_index = before["roots"]["weight_kg"]["index"]
    assert updated["state"]["drifts"]["weight_kg"]["824"]["index"] == old_index
    truth = updated["trueValues"]
    assert truth["weight_kg"] == 83.4
    again = api.protect_text("weight 83.4 kg; weight 82.4 kg", PROFILE, truth, updated["state"])
    assert [r["drift"] for r in again["replacements"]] == [False, True]
    assert len(api.ledger(again["state"])) == len(api.ledger(before))


def test_add_refuses_a_derived_value_and_a_value_outside_the_domain() -> None:
    """Errors name the value and say what to do."""
    state = _state()
    with pytest.raises(Exception, match="computed from other values"):
        api.add_values(PROFILE, STORED, state, {"bmi": 27})
    with pytest.raises(Exception, match="outside its public domain"):
        api.add_values(PROFILE, STORED, state, {"waist_cm": 500})


# ---------------------------------------------------------------- ε both ways


def _domain_epsilon(spec: dict[str, Any], epsilon: float) -> float:
    """ε between the domain's ends, from the profile's numbers alone (grid steps / scale)."""
    lo, hi = (Fraction(repr(float(x))) for x in spec["domain"])
    step = Fraction(repr(float(spec["precision"])))
    steps = math.floor(hi / step) - math.ceil(lo / step)
    scale = Fraction(repr(float(spec["privacy_unit"]))) / step / Fraction(epsilon)
    return float(steps / scale)


def test_describe_gives_epsilon_both_ways() -> None:
    """Per root "ε e per u unit" and the domain ε; both totals over the profile."""
    described = api.describe(PROFILE)
    roots = {n: s for n, s in PROFILE["values"].items() if "domain" in s}
    equal = PROFILE["budget"] / len(roots)
    for name, spec in roots.items():
        got = described["roots"][name]
        assert got["label"] == f"ε {equal:g} per {spec['privacy_unit']:g} {spec['unit']}"
        assert got["domain_epsilon"] == pytest.approx(_domain_epsilon(spec, equal), rel=1e-12)
    assert described["roots"]["weight_kg"]["label"] == "ε 1 per 10 kg"
    assert described["total_epsilon"] == pytest.approx(PROFILE["budget"])
    total = math.fsum(_domain_epsilon(s, equal) for s in roots.values())
    assert described["total_domain_epsilon"] == pytest.approx(total, rel=1e-12)
    # The issue quoted 367.8: describe() counted creatinine's 1,480 grid steps as 1,481
    # (a float width rounded up); counted exactly the default profile sums to 367.7.
    assert round(total, 1) == 367.7
    assert "ε 14 in total" in described["total_label"]
    assert "ε 367.7 in total between the ends" in described["total_label"]


def test_spent_counts_every_draw_both_ways() -> None:
    """After init and two drifts: per privacy unit 14 + 2, over the domains + theirs."""
    out = api.protect_text(DRIFT_PROMPT, PROFILE, STORED, _json(api.init_state(PROFILE, STORED)))
    spent = api.spent(PROFILE, out["state"])
    described = api.describe(PROFILE)["roots"]
    init_names = sorted(STORED)
    assert spent["draws"] == len(init_names) + 2
    assert spent["epsilon"] == pytest.approx(len(init_names) + 2.0)
    expected = math.fsum(described[n]["domain_epsilon"] for n in [*init_names, "weight_kg", "age"])
    assert spent["domain_epsilon"] == pytest.approx(expected)


def test_replacements_carry_their_guarantee() -> None:
    """The receipt of a replaced value says its ε per privacy unit and over the domain."""
    out = api.protect_text("weight 82.4 kg, BMI 28.2", PROFILE, STORED, _state())
    weight, bmi = out["replacements"]
    assert weight["guarantees"]["weight_kg"]["label"] == "ε 1 per 10 kg"
    assert weight["guarantees"]["weight_kg"]["domain_label"] == "ε 22 between 30 and 250 kg"
    assert set(bmi["guarantees"]) == {"height_cm", "weight_kg"}


# ---------------------------------------------------------------- through the bridge

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "extension" / "python"))


def _bridge(op: str, **args: Any) -> dict[str, Any]:
    import veil_bridge

    reply = json.loads(veil_bridge.handle(json.dumps({"op": op, "args": args})))
    assert reply["ok"], reply
    return dict(reply["result"])


def test_the_bridge_sends_the_drifted_value_replaced() -> None:
    """Numbers mode through the extension's bridge: the drifted numbers are replaced."""
    rg = {"profile": PROFILE, "trueValues": STORED, "state": _state()}
    result = _bridge("sanitize", text=DRIFT_PROMPT, epsilon=5, mode="numbers", rootguard=rg)
    drifts = result["rootguardState"]["drifts"]
    weight = f"{drifts['weight_kg']['834']['value']:.1f}"
    age = f"{drifts['age']['53']['value']:.0f}"
    assert result["text"] == f"weight {weight} kg, I'm {age}"
    assert result["rootguardState"]["drifts"].keys() == {"weight_kg", "age"}
    assert [r["drift"] for r in result["replacements"]] == [True, True]
