"""Numbers mode: the person's values are replaced by RootGuard's cached noisy values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Playwright

from e2e.harness import (
    Browser,
    history,
    page_sends,
    type_prompt,
    wait_for_records,
    wait_history,
    wait_saved,
)
from e2e.recorder import Recorder
from py_core.rootguard import api

# A hung browser call fails its test instead of stalling the run.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

TRUE_VALUES = {"age": 52, "weight_kg": 81, "height_cm": 175}
PROMPT = "I am 52 years old, I weigh 81 kg and my height is 175 cm. Is my weight healthy?"


def set_up_rootguard(browser: Browser) -> None:
    """Fill the true values in the options page and save (the one and only draw)."""
    options = browser.options()
    for name, value in TRUE_VALUES.items():
        options.fill(f"input[data-true={name}]", str(value))
    options.click("#rg-save")
    options.wait_for_selector("td[data-noisy=age]:not(:empty)", timeout=20000)
    options.close()


def set_mode(browser: Browser, host: str, mode: str) -> None:
    popup = browser.popup(host)
    before = popup.evaluate("() => document.body.dataset.saved || null")
    popup.check(f"input[name=mode][value={mode}]")
    wait_saved(popup, before)
    popup.close()


def send(browser: Browser, host: str) -> str:
    browser.recorder.clear()
    page = browser.open_site(host)
    type_prompt(page, host, PROMPT)
    page.keyboard.press("Enter")
    text = wait_for_records(page, browser.recorder)[0].text
    page.close()
    return text


def expected_text(browser: Browser) -> str:
    """PROMPT with each value replaced by the noisy value cached in chrome.storage."""
    stored = browser.storage()["rootguard"]
    result = api.protect_text(PROMPT, stored["profile"], stored["trueValues"], stored["state"])
    assert result["state"] == stored["state"], "nothing may be drawn after set-up"
    return str(result["text"])


def test_numbers_mode_is_identical_across_sites_and_restarts(
    playwright: Playwright, built: Path, recorder: Recorder, tmp_path: Path
) -> None:
    """Two sites and a browser restart all get the same cached noisy values."""
    browser = Browser(playwright, built, tmp_path / "profile", recorder)
    try:
        browser.wait_core()
        set_up_rootguard(browser)
        state_before = browser.storage()["rootguard"]["state"]
        for host in ("chatgpt.com", "gemini.google.com"):
            set_mode(browser, host, "numbers")
        first = send(browser, "chatgpt.com")
        second = send(browser, "gemini.google.com")
        assert first == second == expected_text(browser)
        names = {r["name"] for r in history(browser, "chatgpt")[-1]["replacements"]}
        assert names == set(TRUE_VALUES)
    finally:
        browser.close()
    browser = Browser(playwright, built, tmp_path / "profile", recorder)
    try:
        status = browser.wait_core()
        assert status["state"] == "ready"
        assert send(browser, "chatgpt.com") == first
        assert browser.storage()["rootguard"]["state"] == state_before
    finally:
        browser.close()


def test_both_mode_keeps_the_noisy_values_and_perturbs_the_rest(browser: Browser) -> None:
    """In "both" mode the RootGuard values pass k-RR untouched; the words around them do not."""
    set_up_rootguard(browser)
    set_mode(browser, "chatgpt.com", "both")
    sent = send(browser, "chatgpt.com")
    entry = history(browser, "chatgpt")[-1]
    assert entry["receipt"]["chars_protected"] == sum(
        len(r["replacement"]) for r in entry["replacements"]
    )
    for r in entry["replacements"]:
        assert r["replacement"] in sent
    assert expected_text(browser) not in sent  # the words were perturbed


def test_numbers_mode_without_profile_blocks(browser: Browser) -> None:
    """Numbers mode with no RootGuard set-up fails closed with a notice that says what to do."""
    set_mode(browser, "chatgpt.com", "numbers")
    page = browser.open_site("chatgpt.com")
    type_prompt(page, "chatgpt.com", PROMPT)
    page.keyboard.press("Enter")
    page.wait_for_selector("veil-notice[data-kind=blocked]", state="attached")
    # The decision is made and stored: the page's own counter says nothing went out.
    wait_history(browser, "chatgpt", ["blocked"])
    assert page_sends(page) == 0
    assert browser.recorder.records() == []
    text = page.evaluate("() => document.querySelector('veil-notice').shadowRoot.textContent")
    assert "options page" in text


def test_reset_asks_first_and_records_a_ledger_entry(browser: Browser) -> None:
    """Reset shows a warning; declining keeps the values, accepting re-draws and logs it."""
    set_up_rootguard(browser)
    before = browser.storage()["rootguard"]
    options = browser.options()
    messages: list[str] = []

    def decline(dialog: Any) -> None:
        messages.append(dialog.message)
        dialog.dismiss()

    options.once("dialog", decline)
    options.click("#rg-reset")
    # The page marks a declined reset where it returns without asking the worker.
    options.wait_for_selector("body[data-reset-declined='1']")
    assert "spends privacy budget a second time" in messages[0]
    assert browser.storage()["rootguard"] == before

    options.once("dialog", lambda dialog: dialog.accept())
    options.click("#rg-reset")
    options.wait_for_selector("#rg-ledger tbody tr:nth-child(2)", timeout=20000)
    after = browser.storage()["rootguard"]
    assert len(api.ledger(after["state"])) == len(api.ledger(before["state"])) + 1
    assert [e["event"] for e in after["events"]] == ["initialised", "reset"]
    assert after["trueValues"] == before["trueValues"]


def test_an_invalid_profile_is_refused_with_the_problem_named(browser: Browser) -> None:
    """An inverted domain typed in the profile editor is refused; nothing is drawn."""
    options = browser.options()
    options.fill("input[data-root=age][data-field=lo]", "90")
    options.fill("input[data-root=age][data-field=hi]", "20")
    options.fill("input[data-true=age]", "52")
    options.click("#rg-save")
    options.wait_for_selector("#error:not([hidden])")
    assert "age" in options.inner_text("#error")
    assert "rootguard" not in browser.storage()


def test_one_record_for_the_browser_and_the_agents(browser: Browser, tmp_path: Path) -> None:
    """Options-page export -> veil rootguard import -> export -> options-page import: one state.

    A record drawn elsewhere (the same values drawn again) is refused in both places and
    changes nothing: two independent draws of one value must never be merged.
    """
    import json
    import subprocess
    import sys

    set_up_rootguard(browser)
    before = browser.storage()["rootguard"]
    options = browser.options()
    with options.expect_download() as download:
        options.click("#rg-export")
    exported = tmp_path / "from-browser.json"
    download.value.save_as(exported)
    record = json.loads(exported.read_text())
    assert record["format"] == api.RECORD_FORMAT and record["state"] == before["state"]

    def veil(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            sys.executable,
            "-m",
            "companion",
            "rootguard",
            *args,
            "--record",
            str(tmp_path / "rg.json"),
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    assert veil("import", str(exported)).returncode == 0
    back = tmp_path / "from-companion.json"
    assert veil("export", str(back)).returncode == 0
    assert json.loads(back.read_text())["state"] == before["state"]

    options.set_input_files("#rg-import", str(back))
    options.wait_for_selector("#rg-import-status:has-text('nothing changed')", timeout=20000)
    assert browser.storage()["rootguard"]["state"] == before["state"]

    redrawn = dict(record, state=api.init_state(record["profile"], record["trueValues"]))
    other = tmp_path / "redrawn.json"
    other.write_text(json.dumps(redrawn))
    options.set_input_files("#rg-import", str(other))
    options.wait_for_selector("#rg-import-status:has-text('Not imported')", timeout=20000)
    assert "drawn differently" in options.inner_text("#rg-import-status")
    assert browser.storage()["rootguard"]["state"] == before["state"]
    refused = veil("import", str(other))
    assert refused.returncode == 2 and "drawn differently" in refused.stderr
    options.close()
