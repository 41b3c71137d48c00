"""The extension's JSON bridge to py_core, run in CPython (the same file Pyodide runs)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "extension" / "python"))

import veil_bridge

from py_core import krr
from py_core.rootguard import api
from py_core.sanitize import DEFAULT_HEADER

TRUE = {"age": 52, "weight_kg": 81, "height_cm": 175}
TEXT = "I am 52 years old and weigh 81 kg; my height is 175 cm."


def call(op: str, **args: Any) -> dict[str, Any]:
    reply = json.loads(veil_bridge.handle(json.dumps({"op": op, "args": args})))
    assert set(reply) in ({"ok", "result"}, {"ok", "error"})
    return dict(reply)


def rootguard_args() -> dict[str, Any]:
    profile = copy.deepcopy(api.DEFAULT_PROFILE)
    state = api.init_state(profile, TRUE)
    return {"profile": profile, "trueValues": TRUE, "state": state}


def test_text_mode_returns_header_and_perturbed_text() -> None:
    """Text mode: default header + a same-length perturbation, with the implemented ε."""
    reply = call("sanitize", text="hello private world", epsilon=5, mode="text", header=None)
    assert reply["ok"]
    result = reply["result"]
    assert result["text"] == DEFAULT_HEADER + result["perturbed"]
    assert len(result["perturbed"]) == len("hello private world")
    assert result["receipt"]["epsilon_per_char"] == krr.implemented_epsilon(5)
    assert "words" not in result["receipt"]  # the send path omits the per-word list
    assert result["receipt"]["epsilon_total_composed"] is None  # finished after the send


def test_composed_epsilon_after_the_send_equals_the_full_receipt() -> None:
    """The bound computed after the send is the one sanitize_prompt computes inline."""
    from py_core.sanitize import sanitize_prompt

    text = "a private note about Maria Keller " * 20
    full = sanitize_prompt(text, 4.0, header=None).receipt
    sent = call("sanitize", text=text, epsilon=4.0, mode="text", header="")["result"]["receipt"]
    finished = call(
        "composed_epsilon",
        n=sent["chars_perturbed"],
        epsilon=sent["epsilon_per_char"],
        delta=sent["delta"],
    )["result"]
    assert finished["epsilon_total_composed"] == full.epsilon_total_composed
    assert finished["epsilon_total_composed"] <= sent["epsilon_total_basic"]


@pytest.mark.parametrize(("header", "prefix"), [("", ""), ("Fix typos:\n", "Fix typos:\n")])
def test_header_choice_is_respected(header: str, prefix: str) -> None:
    """An empty header sends none; a custom header is sent as given."""
    result = call("sanitize", text="abc def", epsilon=3, mode="text", header=header)["result"]
    assert result["text"] == prefix + result["perturbed"]


def test_preview_includes_word_survival() -> None:
    """The preview carries per-word survival probabilities p^L."""
    result = call("preview", text="abc defghi", epsilon=4, mode="text", header="")["result"]
    p = krr.implementation(4).keep_probability
    words = result["receipt"]["words"]
    assert [w["length"] for w in words] == [3, 6]
    assert words[1]["survival_probability"] == pytest.approx(p**6)


def test_preview_forecasts_each_original_word() -> None:
    """The preview labels each typed word from py_core.preview (rare hidden, common restored)."""
    from py_core.preview import LIKELY_HIDDEN, LIKELY_RESTORED, preview

    text = "Dear Dr. Xylofant, the results of the test are fine."
    result = call("preview", text=text, epsilon=6, mode="text", header=None)["result"]
    words = result["words"]
    expected = preview(text, 6)
    assert [(w["start"], w["end"]) for w in words] == [(w.start, w.end) for w in expected]
    assert [text[w["start"] : w["end"]] for w in words] == text.split()
    for got, want in zip(words, expected, strict=True):
        assert got["forecast_probability"] == pytest.approx(want.probability)
        assert got["survival_probability"] == pytest.approx(want.survival_probability)
        assert got["rootguard"] is False
        assert got["sent"] == result["perturbed"][got["start"] : got["end"]]
        # The label shown agrees with the draw: an intact word is sure to be restored.
        if got["intact"]:
            assert (got["label"], got["probability"]) == (LIKELY_RESTORED, 1.0)
        else:
            assert got["label"] == want.label
            assert got["probability"] == pytest.approx(want.probability)
    by_text = {w["text"]: w for w in words}
    assert by_text["Xylofant,"]["label"] == LIKELY_HIDDEN or by_text["Xylofant,"]["intact"]
    assert by_text["the"]["label"] == LIKELY_RESTORED
    # Positions refer to the text as typed, not to the header-prefixed text sent.
    assert result["text"].startswith(DEFAULT_HEADER)


def test_preview_forecast_follows_epsilon() -> None:
    """A lower ε hides more: the forecast probability of every word does not rise."""
    text = "the quarterly report for Xylofant industries"
    low = call("preview", text=text, epsilon=2, mode="text", header="")["result"]["words"]
    high = call("preview", text=text, epsilon=8, mode="text", header="")["result"]["words"]
    pairs = list(zip(low, high, strict=True))
    assert all(a["forecast_probability"] <= b["forecast_probability"] for a, b in pairs)
    assert any(
        (a["forecast_probability"] >= 0.5) != (b["forecast_probability"] >= 0.5) for a, b in pairs
    )


def test_send_path_carries_no_forecast() -> None:
    """Op sanitize (the send) does not compute the per-word forecast."""
    result = call("sanitize", text="hello Xylofant", epsilon=6, mode="text")["result"]
    assert "words" not in result


def test_preview_flags_words_rootguard_replaces() -> None:
    """In both mode, typed words holding a declared value are flagged rootguard."""
    rg = rootguard_args()
    result = call("preview", text=TEXT, epsilon=6, mode="both", rootguard=rg, header="")["result"]
    flagged = {w["text"] for w in result["words"] if w["rootguard"]}
    assert flagged == {"52", "81", "175"}
    numbers = call("preview", text=TEXT, epsilon=6, mode="numbers", rootguard=rg)["result"]
    assert numbers["words"] is None  # no k-RR in numbers mode: words go as typed


def test_numbers_mode_uses_the_cached_values_and_draws_nothing() -> None:
    """Numbers mode returns RootGuard's replacement text and the same state."""
    rg = rootguard_args()
    expected = api.protect_text(TEXT, rg["profile"], TRUE, rg["state"])
    result = call("sanitize", text=TEXT, epsilon=5, mode="numbers", rootguard=rg)["result"]
    assert result["text"] == expected["text"]
    assert result["receipt"] is None
    assert result["rootguardState"] == rg["state"]
    assert {r["name"] for r in result["replacements"]} == set(TRUE)


def test_both_mode_leaves_noisy_values_untouched() -> None:
    """Both: RootGuard's replacements pass k-RR unchanged, everything else is perturbed."""
    rg = rootguard_args()
    result = call("sanitize", text=TEXT, epsilon=0.5, mode="both", rootguard=rg, header="")[
        "result"
    ]
    for r in result["replacements"]:
        assert result["perturbed"][r["start"] : r["end"]] == r["replacement"]
    assert result["receipt"]["chars_protected"] == sum(
        len(r["replacement"]) for r in result["replacements"]
    )


@pytest.mark.parametrize("mode", ["numbers", "both"])
def test_numbers_mode_without_set_up_is_refused(mode: str) -> None:
    """Without a RootGuard state the bridge refuses (the extension then blocks the send)."""
    reply = call("sanitize", text=TEXT, epsilon=5, mode=mode, rootguard=None)
    assert not reply["ok"]
    assert reply["error"]["code"] == "setup_required"
    assert "options page" in reply["error"]["message"]


def test_explain_matches_krr() -> None:
    """What the popup shows comes from the implemented mechanism."""
    result = call("explain", epsilon=5)["result"]
    impl = krr.implementation(5)
    assert result["keepProbability"] == impl.keep_probability
    assert result["changedShare"] == pytest.approx(1 - impl.keep_probability)
    assert result["nameIntact6"] == pytest.approx(impl.keep_probability**6)
    assert result["epsilonPerChar"] == impl.epsilon


@pytest.mark.parametrize(
    ("op", "args", "code"),
    [
        ("nope", {}, "unknown_op"),
        ("sanitize", {"text": 3, "epsilon": 1}, "invalid_request"),
        ("sanitize", {"text": "a", "epsilon": 1, "mode": "emoji"}, "invalid_request"),
        ("sanitize", {"text": "a", "epsilon": 1, "mode": ["text"]}, "invalid_request"),
        ("sanitize", {"text": "a", "epsilon": -1}, "invalid_request"),
        ("sanitize", {"text": "a", "epsilon": "3"}, "invalid_request"),
        ("sanitize", {"text": "a", "epsilon": 1, "header": 3}, "invalid_request"),
        ("explain", {"epsilon": "x"}, "invalid_request"),
        ("composed_epsilon", {"n": -1, "epsilon": 1}, "invalid_request"),
        ("rootguard_init", {"profile": {"values": {}}, "trueValues": {}}, "invalid_profile"),
    ],
)
def test_errors_come_back_in_the_envelope(op: str, args: dict[str, Any], code: str) -> None:
    """Bad requests answer {ok: false, error: {code, message}}; handle() never raises."""
    reply = call(op, **args)
    assert reply == {"ok": False, "error": {"code": code, "message": reply["error"]["message"]}}
    assert reply["error"]["message"]


def test_malformed_json_is_an_error_not_an_exception() -> None:
    """Even a broken request string gets an answer."""
    reply = json.loads(veil_bridge.handle("{not json"))
    assert reply["ok"] is False and reply["error"]["code"] == "internal_error"


def test_rootguard_init_view_and_reset() -> None:
    """init draws once; view shows the same values; reset re-draws and adds a ledger entry."""
    profile = copy.deepcopy(api.DEFAULT_PROFILE)
    init = call("rootguard_init", profile=profile, trueValues=TRUE)["result"]
    view = call("rootguard_view", profile=profile, state=init["state"])["result"]
    assert view["noisy"] == init["noisy"]
    assert len(view["ledger"]) == 1
    reset = call("rootguard_reset", profile=profile, trueValues=TRUE, state=init["state"])
    assert len(reset["result"]["ledger"]) == 2


def test_rootguard_import_check_says_new_same_or_conflict_and_refuses_a_broken_record() -> None:
    """The options page's import: py_core's comparison; a corrupted or foreign file is refused."""
    here = rootguard_args()
    exported = {"format": "veil.rootguard.record", "version": 1, **here, "events": []}
    new = call("rootguard_import_check", record=exported, here=None)["result"]
    assert new["relation"] == "new" and new["record"]["state"] == here["state"]
    assert new["noisy"] == api.noisy_values(here["profile"], here["state"])
    same = call("rootguard_import_check", record={"rootguard": exported}, here=here)["result"]
    assert same["relation"] == "same" and same["reasons"] == []
    redrawn = dict(exported, state=api.init_state(here["profile"], TRUE))
    conflict = call("rootguard_import_check", record=redrawn, here=here)["result"]
    assert conflict["relation"] == "conflict"
    assert any("drawn differently" in r for r in conflict["reasons"])
    assert not any(str(TRUE["weight_kg"]) in r for r in conflict["reasons"])  # names, not values
    other_truth = dict(exported, trueValues={**TRUE, "age": 53})
    assert "true values differ" in " ".join(
        call("rootguard_import_check", record=other_truth, here=here)["result"]["reasons"]
    )
    tampered = copy.deepcopy(exported)
    root = next(iter(tampered["state"]["roots"]))
    tampered["state"]["roots"][root]["index"] += 1
    broken = call("rootguard_import_check", record=tampered, here=None)
    assert not broken["ok"] and broken["error"]["code"] == "state_conflict"
    foreign = call("rootguard_import_check", record={**exported, "format": "x"}, here=None)
    assert not foreign["ok"] and "expected 'veil.rootguard.record'" in foreign["error"]["message"]
    partial = call("rootguard_import_check", record={"profile": here["profile"]}, here=None)
    assert not partial["ok"] and "lacks trueValues, state" in partial["error"]["message"]
