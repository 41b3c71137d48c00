"""protect: modes, header, ε limits, RootGuard's state, the receipt JSON and the spans."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from py_core import krr, protect
from py_core.accounting import krr_composed_epsilon
from py_core.errors import (
    InsecureRandomnessError,
    InvalidParameterError,
    SetupRequiredError,
    StateError,
)
from py_core.preview import preview
from py_core.protect import (
    EPSILON,
    MODE_NAMES,
    Protection,
    RootGuardSetup,
    SiteSettings,
    header_text,
    receipt_json,
    typed_spans,
)
from py_core.rootguard import api
from py_core.sanitize import DEFAULT_HEADER, Receipt, sanitize_prompt

TRUE: dict[str, float] = {"age": 52, "weight_kg": 81, "height_cm": 175}
TEXT = "I am 52 years old and weigh 81 kg; my height is 175 cm."


def setup(true_values: dict[str, float] = TRUE) -> RootGuardSetup:
    profile = copy.deepcopy(api.DEFAULT_PROFILE)
    return RootGuardSetup(profile, api.init_state(profile, true_values), dict(TRUE))


def run(mode: str, text: str = TEXT, **kwargs: Any) -> Protection:
    rg = setup() if mode != "text" else None
    settings = SiteSettings(mode=mode, epsilon=kwargs.pop("epsilon", 5.0), header="", rootguard=rg)
    return protect.protect(text, settings, **kwargs)


def test_site_settings_file_defines_modes_limits_and_header() -> None:
    """The shipped file: three modes, ε limits inside what k-RR implements, the header's two values."""
    assert MODE_NAMES == ("text", "numbers", "both") and protect.DEFAULT_MODE == "text"
    assert [(m.krr, m.rootguard) for m in protect.MODES.values()] == [
        (True, False),
        (False, True),
        (True, True),
    ]
    assert (EPSILON.min, EPSILON.max, EPSILON.step, EPSILON.default) == (0.5, 11.0, 0.1, 5.0)
    assert EPSILON.max <= krr.MAX_IMPLEMENTED_EPSILON
    assert EPSILON.contains(EPSILON.default) and not EPSILON.contains(0.4)
    assert (protect.HEADER_DEFAULT, protect.HEADER_NONE) == (None, "")


@pytest.mark.parametrize(
    ("setting", "sent"),
    [(None, DEFAULT_HEADER), ("", None), ("Fix typos:\n", "Fix typos:\n")],
)
def test_header_setting_meanings(setting: str | None, sent: str | None) -> None:
    """None: the default header; "": no header; other text: sent as given."""
    assert header_text(setting) == sent
    result = protect.protect("abc def", SiteSettings(epsilon=3, header=setting))
    assert result.text == (sent or "") + result.perturbed
    assert result.receipt is not None and result.receipt.header_included is bool(sent)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mode": "emoji"}, "'emoji'"),
        ({"mode": None}, "None"),
        ({"mode": ["text"]}, "['text']"),
        ({"epsilon": -1}, "-1"),
        ({"epsilon": math.nan}, "nan"),
        ({"epsilon": "3"}, "'3'"),
        ({"epsilon": True}, "True"),
        ({"header": 3}, "3"),
        ({"rootguard": {"profile": {}}}, "dict"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(kwargs: dict[str, Any], needle: str) -> None:
    """SiteSettings refuses a bad mode, ε, header or RootGuard setup; the message names it."""
    with pytest.raises(InvalidParameterError) as info:
        SiteSettings(**kwargs)
    assert needle in str(info.value)


def test_settings_defaults_and_epsilon_as_float() -> None:
    """Defaults come from the settings file; an int ε is kept as a float."""
    settings = SiteSettings()
    assert (settings.mode, settings.epsilon, settings.header) == ("text", EPSILON.default, None)
    assert type(SiteSettings(epsilon=3).epsilon) is float
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.mode = "both"  # type: ignore[misc]


@pytest.mark.parametrize("name", ["profile", "state", "true_values"])
def test_rootguard_setup_wants_objects(name: str) -> None:
    """Each part of the RootGuard setup must be a mapping."""
    parts: dict[str, Any] = {"profile": {"a": 1}, "state": {}, "true_values": {}}
    parts[name] = [1]
    with pytest.raises(InvalidParameterError, match=name):
        RootGuardSetup(**parts)


def test_text_mode_is_sanitize_prompt() -> None:
    """Text mode sends exactly what sanitize_prompt sends for the same draws."""
    settings = SiteSettings(epsilon=2.5, header=None)
    got = protect.protect(TEXT, settings, rng=random.Random(3), secure=False)
    # The site's default alphabet is "fold" (accents into ASCII: docs/accents/report.md).
    assert settings.alphabets == "fold"
    want = sanitize_prompt(
        TEXT, 2.5, rng=random.Random(3), secure=False, header_language="en", alphabets_mode="fold"
    )
    assert (got.text, got.perturbed, got.receipt) == (want.text, want.perturbed, want.receipt)
    assert (got.replacements, got.spans, got.state, got.words) == ((), (), None, None)


def test_text_mode_refuses_a_seeded_rng_by_default() -> None:
    """Real prompts are protected with a CSPRNG."""
    with pytest.raises(InsecureRandomnessError):
        protect.protect("abc", SiteSettings(), rng=random.Random(1))


def test_numbers_mode_uses_the_cached_values_without_k_rr() -> None:
    """Numbers: RootGuard's text, no header, no receipt, the state unchanged (nothing drawn)."""
    rg = setup()
    result = protect.protect(TEXT, SiteSettings(mode="numbers", header=None, rootguard=rg))
    expected = api.protect_text(TEXT, rg.profile, TRUE, rg.state)
    assert result.text == result.perturbed == expected["text"]
    assert result.receipt is None and result.words is None
    assert result.state == rg.state
    assert {r["name"] for r in result.replacements} == set(TRUE)


def test_both_mode_leaves_noisy_values_untouched() -> None:
    """Both: the replaced values pass k-RR unchanged and count as protected characters."""
    result = run("both", epsilon=0.5)
    assert result.receipt is not None
    for r in result.replacements:
        assert result.perturbed[r["start"] : r["end"]] == r["replacement"]
    protected = sum(len(r["replacement"]) for r in result.replacements)
    assert result.receipt.chars_protected == protected
    assert len(result.perturbed) == len(TEXT) - sum(
        len(r["original"]) - len(r["replacement"]) for r in result.replacements
    )


@pytest.mark.parametrize("mode", ["numbers", "both"])
def test_modes_with_rootguard_need_it_set_up(mode: str) -> None:
    """Without a RootGuard setup, numbers and both refuse; nothing is sent."""
    with pytest.raises(SetupRequiredError, match=f"{mode} mode"):
        protect.protect(TEXT, SiteSettings(mode=mode))


def test_a_value_mentioned_first_is_drawn_once_and_kept_in_the_new_state() -> None:
    """A root with a true value but no cached value is drawn on first mention, then reused."""
    rg = setup({"age": 52})  # weight and height not drawn yet
    first = protect.protect(TEXT, SiteSettings(mode="numbers", rootguard=rg))
    assert first.state is not None and first.state != rg.state
    assert len(api.ledger(first.state)) == len(api.ledger(rg.state)) + 1
    again = protect.protect(
        TEXT, SiteSettings(mode="numbers", rootguard=dataclasses.replace(rg, state=first.state))
    )
    assert again.text == first.text and again.state == first.state


def test_spans_point_at_the_values_as_typed() -> None:
    """Each span of the result reads back, in the typed text, as a replaced original value."""
    for mode in ("numbers", "both"):
        result = run(mode)
        assert [TEXT[s:e] for s, e in result.spans] == [r["original"] for r in result.replacements]


def test_typed_spans_shift_by_length_changes_and_skip_mismatches() -> None:
    """Replacements of other lengths shift later spans; a span that does not read back is dropped."""
    text = "a 52 b 175 c 81"
    replacements = [
        {"original": "175", "replacement": "9", "start": 9, "end": 10},
        {"original": "52", "replacement": "1234", "start": 2, "end": 6},
        {"original": "81", "replacement": "80", "start": 13, "end": 15},
    ]
    assert typed_spans(text, replacements) == ((2, 4), (7, 10), (13, 15))
    wrong = [{"original": "99", "replacement": "1", "start": 2, "end": 3}]
    assert typed_spans(text, wrong) == ()


def test_compose_gives_the_tight_bound_or_skips_it() -> None:
    """compose=True (the default) fills the composed bound; the send path skips it."""
    full = protect.protect("a private note " * 10, SiteSettings(epsilon=4))
    fast = protect.protect("a private note " * 10, SiteSettings(epsilon=4), compose=False)
    assert full.receipt is not None and fast.receipt is not None
    assert full.receipt.epsilon_total_composed == krr_composed_epsilon(
        full.receipt.chars_perturbed, full.receipt.epsilon_per_char, full.receipt.delta
    )
    assert fast.receipt.epsilon_total_composed is None
    assert fast.receipt.epsilon_total_basic == full.receipt.epsilon_total_basic


def test_forecast_is_the_preview_of_the_typed_words_with_rootguard_flags() -> None:
    """forecast=True: py_core.preview per typed word; words holding a value flagged rootguard."""
    result = run("both", forecast=True, epsilon=6)
    assert result.words is not None
    assert [w.preview for w in result.words] == preview(TEXT, 6)
    flagged = {w.preview.text for w in result.words if w.rootguard}
    assert flagged == {"52", "81", "175"}
    item = result.words[0].to_dict()
    assert item["rootguard"] is False and item["text"] == "I"
    assert run("numbers", forecast=True).words is None  # no k-RR: words go as typed
    assert run("text").words is None  # not asked


def test_receipt_json_carries_every_receipt_field() -> None:
    """The hand-written receipt conversion keeps up with py_core's Receipt."""
    names = {f.name for f in dataclasses.fields(Receipt)} - {"words"}
    assert names == set(protect.RECEIPT_FIELDS)
    receipt = sanitize_prompt("abc defghi", 4, header=None).receipt
    short = receipt_json(receipt)
    assert "words" not in short and short["word_count"] == 2
    listed = {"scripts", "slots"}  # tuples of named tuples -> lists of objects
    assert {k: short[k] for k in names - listed} == {k: getattr(receipt, k) for k in names - listed}
    for name in listed:
        assert short[name] == [
            {f: list(v) if isinstance(v, tuple) else v for f, v in item._asdict().items()}
            for item in getattr(receipt, name)
        ]
    long = receipt_json(receipt, words=True)
    assert long["words"] == [w._asdict() for w in receipt.words]
    json.dumps(long)


def _write_settings(tmp_path: Path, change: Any) -> Path:
    data = json.loads(protect.SITE_SETTINGS_PATH.read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "site_settings.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda d: d.update(version=2), "version 1"),
        (lambda d: d.update(default_mode="emoji"), "'emoji'"),
        (lambda d: d["epsilon"].update(max=12), "12"),
        (lambda d: d["epsilon"].update(default=0.1), "0.1"),
        (lambda d: d["epsilon"].update(step=0), "step"),
        (lambda d: d["epsilon"].pop("min"), "min"),
        (lambda d: d["modes"]["text"].update(krr=False), "neither"),
        (lambda d: d["modes"]["text"].update(krr="yes"), "'yes'"),
        (lambda d: d["header"].update(none=None), "both None"),
        (lambda d: d["header"].update(default=0), "0"),
    ],
)
def test_a_malformed_settings_file_is_refused(tmp_path: Path, change: Any, needle: str) -> None:
    """The loader refuses a settings file that py_core could not honour, naming the problem."""
    with pytest.raises(StateError) as info:
        protect._load(_write_settings(tmp_path, change))
    assert needle in str(info.value)


def test_the_shipped_settings_file_loads_unchanged(tmp_path: Path) -> None:
    """The loader accepts a copy of the shipped file (the cases above are not vacuous)."""
    modes, default_mode, epsilon, *_ = protect._load(_write_settings(tmp_path, lambda d: None))
    assert tuple(modes) == MODE_NAMES and default_mode == "text" and epsilon == EPSILON
