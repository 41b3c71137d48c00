"""Checks of py_core.protect that need nothing but the standard library.

Run under pytest in CPython (tests/py_core/test_protect_checks.py) and inside
Pyodide (tests/pyodide/run_checks.mjs), where the extension calls protect():
the settings file must load there from the unpacked core, and each mode must
protect as it does in CPython.
"""

from __future__ import annotations

import copy

from py_core import krr, protect
from py_core.errors import SetupRequiredError
from py_core.rootguard import api
from py_core.sanitize import DEFAULT_HEADER

TRUE = {"age": 52, "weight_kg": 81}
TEXT = "I am 52 years old and weigh 81 kg."


def _setup() -> protect.RootGuardSetup:
    profile = copy.deepcopy(api.DEFAULT_PROFILE)
    return protect.RootGuardSetup(profile, api.init_state(profile, TRUE), TRUE)


def check_settings_file_loads() -> None:
    assert protect.MODE_NAMES == ("text", "numbers", "both")
    assert 0 < protect.EPSILON.min <= protect.EPSILON.default <= protect.EPSILON.max
    assert protect.EPSILON.max <= krr.MAX_IMPLEMENTED_EPSILON
    assert protect.header_text(None) == DEFAULT_HEADER and protect.header_text("") is None


def check_text_mode() -> None:
    result = protect.protect("hello world", protect.SiteSettings(epsilon=3), compose=False)
    assert result.text == DEFAULT_HEADER + result.perturbed
    assert len(result.perturbed) == len("hello world") and result.perturbed[5] == " "
    assert result.receipt is not None and result.receipt.epsilon_total_composed is None


def check_numbers_and_both_modes() -> None:
    rg = _setup()
    numbers = protect.protect(TEXT, protect.SiteSettings(mode="numbers", rootguard=rg))
    assert numbers.receipt is None and numbers.state == rg.state
    assert [TEXT[s:e] for s, e in numbers.spans] == ["52", "81"]
    both = protect.protect(TEXT, protect.SiteSettings(mode="both", header="", rootguard=rg))
    for r in both.replacements:
        assert both.perturbed[r["start"] : r["end"]] == r["replacement"]
    try:
        protect.protect(TEXT, protect.SiteSettings(mode="both"))
    except SetupRequiredError:
        pass
    else:
        raise AssertionError("both mode without RootGuard was not refused")


def check_the_word_memo_sends_a_repeated_word_as_its_first_draw() -> None:
    from py_core import memo

    settings = protect.SiteSettings(epsilon=3, header="")
    first = memo.WordMemo()
    sent = protect.protect("Ada Lovelace", settings, memo=first).perturbed
    store: dict = {}
    for release in first.added:
        store.setdefault(release["word"], []).append(release["variant"])
    again = protect.protect("Lovelace Ada", settings, memo=memo.WordMemo(store)).perturbed
    assert again.split(" ") == sent.split(" ")[::-1]
    figures = memo.ledger_summary(memo.ledger_add(None, first.added))
    assert figures["words"] == 2 and 0 < figures["epsilon_composed"] <= figures["epsilon_basic"]
