"""The bridge with per-script k-RR: alphabets, header language, per-slot composed ε."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "extension" / "python"))

import veil_bridge

from py_core import alphabets, krr
from py_core.accounting import KRREvent, KrrPldAccountant
from py_core.language import HEADERS


def call(op: str, **args: Any) -> dict[str, Any]:
    reply = json.loads(veil_bridge.handle(json.dumps({"op": op, "args": args})))
    assert reply["ok"], reply
    return dict(reply["result"])


def test_korean_prompt_stays_hangul_with_a_korean_header() -> None:
    """Default settings: Hangul syllables go out as Hangul syllables, header in Korean."""
    text = "환자 김민준 씨는 서울에 삽니다"
    out = call("sanitize", text=text, epsilon=3, mode="text", header=None)
    assert out["text"].startswith(HEADERS["ko"])
    sent = out["perturbed"]
    assert len(sent) == len(text) and sent != text
    for original, char in zip(text, sent, strict=True):
        assert alphabets.script_of(char) == alphabets.script_of(original)
    receipt = out["receipt"]
    # The default is "fold" (accents into ASCII): Hangul is perturbed as in "scripts".
    assert receipt["alphabets"] == "fold" and receipt["header_language"] == "ko"
    assert {s["script"] for s in receipt["scripts"]} == {"hangul"}


def test_french_prompt_by_default_goes_without_its_accents() -> None:
    """Default settings: accented letters leave as ASCII letters (fold), one slot each."""
    text = "Hélène a été reçue à l'hôpital"
    out = call("sanitize", text=text, epsilon=6, mode="text", header="")
    assert out["text"] == out["perturbed"] and len(out["perturbed"]) == len(text)
    assert all(c == " " or c in krr.ALPHABET for c in out["perturbed"]), out["perturbed"]
    receipt = out["receipt"]
    assert receipt["alphabets"] == "fold" and receipt["latin_marks"] is False
    assert receipt["accents_folded"] == 7
    assert receipt["epsilon_per_char"] == krr.implementation(6.0).epsilon
    scripts = call("sanitize", text=text, epsilon=6, mode="text", header="", alphabets="scripts")
    assert scripts["receipt"]["latin_marks"] is True


def test_ascii_option_and_a_fixed_header_language() -> None:
    """alphabets=ascii: everything into ASCII; headerLanguage fixes the header."""
    out = call(
        "sanitize",
        text="안녕하세요 café",
        epsilon=5,
        mode="text",
        header=None,
        alphabets="ascii",
        headerLanguage="de",
    )
    assert out["text"].startswith(HEADERS["de"])
    assert set(out["perturbed"]) - {" "} <= set(krr.ALPHABET)
    assert out["receipt"]["unsupported_chars"] == 6


def test_composed_epsilon_per_slot_alphabet() -> None:
    """composed_epsilon with the receipt's slots composes one event per alphabet."""
    out = call("sanitize", text="한국어 Ёж", epsilon=4, mode="text", header="", compose=False)
    slots = out["receipt"]["slots"]
    got = call("composed_epsilon", slots=slots, delta=1e-6)["epsilon_total_composed"]
    accountant = KrrPldAccountant()
    for s in slots:
        accountant.compose(KRREvent(s["epsilon"], s["used"], s["k"]))
    assert got == pytest.approx(accountant.get_epsilon(1e-6))
    assert got <= sum(s["epsilon"] * s["used"] for s in slots) + 1e-9


def test_explain_states_each_script() -> None:
    """explain: per script, its slots, ε per character and keep probability."""
    e = call("explain", epsilon=5)
    impls = alphabets.slot_implementations(5.0)
    assert e["scripts"]["hangul"]["slots"] == list(alphabets.SCRIPT_SLOTS["hangul"])
    hangul = impls["hangul-initial"].keep_probability * impls["hangul-vowel"].keep_probability
    hangul *= impls["hangul-final"].keep_probability
    assert e["scripts"]["hangul"]["keepProbability"] == pytest.approx(hangul)
    assert e["koreanNameIntact3"] == pytest.approx(hangul**3)
