"""Fail closed, and lose nothing when Chrome stops the service worker."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Playwright

from e2e.harness import (
    Browser,
    editor_text,
    history,
    page_sends,
    set_range,
    type_prompt,
    wait_for_records,
    wait_history,
    wait_receipts,
    wait_saved,
)
from e2e.recorder import Recorder
from e2e.test_rootguard import set_up_rootguard

# A hung browser call fails its test instead of stalling the run.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

PROMPT = "My account number is 4412 9981 and my PIN is 3321, please help."


def test_stopping_the_service_worker_loses_nothing(browser: Browser) -> None:
    """After CDP stops the worker mid-session, settings, history and cached values persist."""
    set_up_rootguard(browser)
    popup = browser.popup("chatgpt.com")
    before = popup.evaluate("() => document.body.dataset.saved || null")
    set_range(popup, "#epsilon", 3.0)
    wait_saved(popup, before)
    popup.close()
    page = browser.open_site("chatgpt.com")
    type_prompt(page, "chatgpt.com", PROMPT)
    page.keyboard.press("Enter")
    wait_for_records(page, browser.recorder, 1)
    stored = browser.storage()
    history_before = wait_receipts(browser, "chatgpt")

    browser.stop_service_worker()

    type_prompt(page, "chatgpt.com", PROMPT)
    page.keyboard.press("Enter")
    records = wait_for_records(page, browser.recorder, 2)
    assert PROMPT not in records[1].text
    after = browser.storage()
    assert after["settings"] == stored["settings"]
    assert after["rootguard"] == stored["rootguard"]
    entries = wait_receipts(browser, "chatgpt")
    assert entries[0] == history_before[0]
    assert [h["status"] for h in entries] == ["protected", "protected"]
    assert entries[1]["epsilon"] == 3.0


@pytest.fixture
def broken_browser(
    playwright: Playwright, built: Path, recorder: Recorder, tmp_path: Path
) -> Iterator[Browser]:
    """A copy of the built extension whose Python bundle is corrupted."""
    copy = tmp_path / "extension"
    shutil.copytree(built, copy)
    (copy / "python" / "veil_core.zip").write_bytes(b"this is not a zip archive")
    recorder.clear()
    browser = Browser(playwright, copy, tmp_path / "profile", recorder)
    yield browser
    browser.close()


def test_a_broken_core_blocks_the_send(broken_browser: Browser) -> None:
    """If the core cannot start, the send is blocked, the text stays, history keeps it."""
    browser = broken_browser
    status = browser.wait_core()
    assert status["state"] == "error"
    page = browser.open_site("chatgpt.com")
    type_prompt(page, "chatgpt.com", PROMPT)
    page.keyboard.press("Enter")
    page.wait_for_selector("veil-notice[data-kind=blocked]", state="attached", timeout=20000)
    # The decision is made and stored: the page's own counter says nothing went out.
    wait_history(browser, "chatgpt", ["blocked"])
    assert page_sends(page) == 0
    assert browser.recorder.records() == []
    assert editor_text(page) == PROMPT
    entries = history(browser, "chatgpt")
    assert [(h["status"], h["original"]) for h in entries] == [("blocked", PROMPT)]


def test_send_unprotected_is_honoured_when_chosen(broken_browser: Browser) -> None:
    """With "send unprotected" chosen for the site, a broken core lets the original through."""
    browser = broken_browser
    browser.wait_core()
    popup = browser.popup("chatgpt.com")
    before = popup.evaluate("() => document.body.dataset.saved || null")
    popup.check("#fail-open")
    wait_saved(popup, before)
    popup.close()
    page = browser.open_site("chatgpt.com")
    type_prompt(page, "chatgpt.com", PROMPT)
    page.keyboard.press("Enter")
    records = wait_for_records(page, browser.recorder)
    assert records[0].text == PROMPT
    page.wait_for_selector("veil-notice[data-kind=unprotected]", state="attached")
    assert history(browser, "chatgpt")[-1]["status"] == "unprotected"
