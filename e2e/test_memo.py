"""Sanitize once, for words: repeating a prompt sends the same draw, across sites and restarts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Playwright

from e2e.harness import (
    EDITOR_SELECTOR,
    FIXTURE_FOR_HOST,
    SITE_URL,
    Browser,
    send_prompt,
    wait_for_records,
)
from e2e.recorder import Recorder
from e2e.test_preview import popup_for_draft
from py_core import krr, memo
from py_core.language import HEADERS

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

PROMPT = "Invoice 4471-A for Mrs. Lovelace from Dr. Okafor is overdue"


def units(text: str) -> set[str]:
    """The memo's units of ``text`` (py_core.memo.UNIT inside krr.WORD): "Dr." is "Dr" and "."."""
    return {u.group() for w in krr.WORD.finditer(text) for u in memo.UNIT.finditer(w.group())}


UNITS = units(PROMPT)


def body(sent: str) -> str:
    squashed = " ".join(sent.split())
    head = " ".join(HEADERS["en"].split())
    assert squashed.startswith(head), sent[:120]
    return squashed[len(head) :].strip()


def send(browser: Browser, host: str, text: str = PROMPT) -> str:
    return body(send_prompt(browser, host, text))


def shown_preview(popup: Page, timeout: float = 30.0) -> str:
    """The popup's preview text once the core has answered."""
    deadline = time.time() + timeout
    shown = ""
    while time.time() < deadline:
        shown = popup.inner_text("#preview")
        if shown and not shown.startswith("("):
            return shown
        popup.wait_for_timeout(50)
    raise TimeoutError(f"the popup's preview never arrived: {shown!r}")


def memo_words(browser: Browser) -> dict[str, Any]:
    return {k[len("memo:") :]: v for k, v in browser.storage().items() if k.startswith("memo:")}


def test_one_draw_per_word_across_sends_sites_worker_stops_and_restarts(
    playwright: Playwright, built: Path, recorder: Recorder, tmp_path: Path
) -> None:
    """Nine sends, two sites, a worker stop and a browser restart: one perturbed form."""
    browser = Browser(playwright, built, tmp_path / "profile", recorder)
    try:
        browser.wait_core()
        first = send(browser, "chatgpt.com")
        assert first != PROMPT and len(first) == len(PROMPT)
        for _ in range(3):
            assert send(browser, "chatgpt.com") == first
        browser.stop_service_worker()
        assert send(browser, "chatgpt.com") == first
        assert send(browser, "gemini.google.com") == first
        # A new prompt reusing two of the words: those two arrive as before.
        mixed = send(browser, "chatgpt.com", "Lovelace paid 4471-A")
        words = dict(zip(PROMPT.split(), first.split(), strict=True))
        assert mixed.split()[0] == words["Lovelace"] and mixed.split()[2] == words["4471-A"]
        stored = memo_words(browser)
        assert set(stored) == UNITS | {"paid"}
        assert sorted(stored["Lovelace"][0]["sites"]) == ["chatgpt", "gemini"]
        ledger = browser.storage()["memoLedger"]
        assert ledger["total"]["words"] == len(UNITS) + 1
        assert ledger["sites"]["gemini"]["words"] == len(UNITS)
    finally:
        browser.close()
    browser = Browser(playwright, built, tmp_path / "profile", recorder)
    try:
        assert browser.wait_core(timeout=120)["state"] == "ready"
        assert send(browser, "chatgpt.com") == first
    finally:
        browser.close()


def test_the_preview_shows_the_draw_that_is_sent(browser: Browser) -> None:
    """The popup's preview of the draft is exactly what the send carries."""
    popup = popup_for_draft(browser, PROMPT)
    shown_body = body(shown_preview(popup))
    assert shown_body != PROMPT
    # Reopening the popup (previewing again) cannot re-roll the draw.
    popup.reload()
    popup.wait_for_selector("body[data-ready=true]")
    assert body(shown_preview(popup)) == shown_body
    page = next(p for p in browser.pages() if p.url.startswith(SITE_URL["chatgpt.com"]))
    browser.recorder.clear()
    page.bring_to_front()
    page.click(EDITOR_SELECTOR[FIXTURE_FOR_HOST["chatgpt.com"]])
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    sent = body(wait_for_records(page, browser.recorder)[0].text)
    assert sent == shown_body
    # The words the preview marked: each agrees with its draw (intact -> restored).
    marks = popup.eval_on_selector_all(
        "#forecast .word", "els => els.map(e => [e.textContent, e.dataset.kind])"
    )
    for (typed, kind), got in zip(marks, sent.split(), strict=True):
        if typed == got:
            assert kind == "restored", (typed, kind)


def test_the_options_page_shows_the_memo_and_a_logged_reset_redraws(browser: Browser) -> None:
    first = send(browser, "chatgpt.com")
    popup = browser.popup("chatgpt.com")
    words = str(len(UNITS))
    popup.wait_for_selector(f"#lifetime[data-words='{words}']", timeout=30000)
    assert "same draw" in popup.inner_text("#lifetime")
    popup.close()
    options = browser.options()
    options.wait_for_selector("#memo-summary[data-state=ready]", timeout=30000)
    assert options.get_attribute("#memo-summary", "data-words") == str(len(UNITS))
    rows = options.inner_text("#memo-ledger")
    assert "all sites" in rows and "chatgpt" in rows
    options.on("dialog", lambda d: d.accept("testing the reset"))
    options.click("#memo-reset")
    options.wait_for_selector("#memo-summary[data-words='0']", timeout=30000)
    assert "testing the reset" in options.inner_text("#memo-events")
    options.close()
    assert memo_words(browser) == {}
    again = send(browser, "chatgpt.com")
    assert again != first  # every word drawn afresh (all 10 equal by chance: ~1e-12)
    assert all(c in krr.ALPHABET or c == " " for c in again)
    # The ledger counted both releases: it is never reset.
    assert browser.storage()["memoLedger"]["total"]["words"] == 2 * len(UNITS)
