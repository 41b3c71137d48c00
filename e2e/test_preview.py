"""The popup marks the person's own words "likely hidden" / "likely restored"."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, Playwright

from e2e.harness import SITE_URL, Browser, set_range, type_prompt, wait_saved
from e2e.recorder import Recorder
from py_core.preview import LIKELY_HIDDEN, LIKELY_RESTORED, preview

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

HOST = "chatgpt.com"
DRAFT = "Please tell the clinic that Mr. Xylofant will miss the appointment on Friday."
EPSILON = 6.0


def popup_for_draft(browser: Browser, draft: str) -> Page:
    """Type ``draft`` into the site's editor and open the popup on that tab."""
    site = browser.open_site(HOST)
    type_prompt(site, HOST, draft)
    tab = browser.evaluate(
        "async () => (await chrome.tabs.query({url: 'https://chatgpt.com/*'}))[0].id"
    )
    popup = browser.ctx.new_page()
    popup.goto(browser.url(f"popup.html?url={quote(SITE_URL[HOST], safe='')}&tab={tab}"))
    popup.wait_for_selector("body[data-ready=true]", timeout=30000)
    return popup


def forecast_at(popup: Page, text: str, epsilon: float, timeout: float = 30.0) -> list[dict]:
    """The popup's marked words once they are the forecast for ``text`` at ``epsilon``.

    The core in Pyodide must give the same probabilities as py_core in CPython,
    except that a word the draw shown left intact is sure to be restored (p = 1).
    """
    forecast = [round(w.probability, 3) for w in preview(text, epsilon)]
    deadline = time.time() + timeout
    words: list[dict] = []
    while time.time() < deadline:
        words = popup.eval_on_selector_all(
            "#forecast .word",
            "els => els.map(e => ({text: e.textContent, kind: e.dataset.kind, p: Number(e.dataset.p),"
            " intact: e.dataset.intact === 'true', title: e.title}))",
        )
        expected = [1.0 if w["intact"] else p for w, p in zip(words, forecast, strict=False)]
        if len(words) == len(forecast) and [w["p"] for w in words] == expected:
            return words
        popup.wait_for_timeout(50)
    raise TimeoutError(f"the popup's forecast never matched py_core's: {words} vs {expected}")


def check_draft_forecast(popup: Page) -> list[dict]:
    before = popup.evaluate("() => document.body.dataset.saved || null")
    set_range(popup, "#epsilon", EPSILON)
    wait_saved(popup, before)
    words = forecast_at(popup, DRAFT, EPSILON)
    assert [w["text"] for w in words] == DRAFT.split()  # the original words, in order
    by_text = {w["text"]: w for w in words}
    # The label agrees with the draw shown: a word the draw left intact (p^8 ≈ 18% for
    # Xylofant at ε = 6) is sent readable, so it is not "hidden".
    if by_text["Xylofant"]["intact"]:
        assert by_text["Xylofant"]["kind"] == "restored", by_text["Xylofant"]
        assert "unchanged" in by_text["Xylofant"]["title"]
    else:
        assert by_text["Xylofant"]["kind"] == "hidden", by_text["Xylofant"]
        assert LIKELY_HIDDEN in by_text["Xylofant"]["title"]
    assert by_text["the"]["kind"] == "restored", by_text["the"]
    assert LIKELY_RESTORED in by_text["the"]["title"] or by_text["the"]["intact"]
    # The text box shows the draft as typed, the legend and the caveat are visible,
    # and the perturbed text is shown beside it.
    box = popup.inner_text("#forecast")
    assert "Your draft" in box and DRAFT in box
    assert popup.is_visible("#forecast-legend") and popup.is_visible("#forecast-caveat")
    assert "p" in popup.inner_text("#forecast-caveat")
    sent = popup.inner_text("#preview")
    assert sent and DRAFT not in sent
    return words


def test_popup_marks_rare_words_hidden_and_common_words_restored(browser: Browser) -> None:
    """At ε = 6 a made-up surname is likely hidden, "the" likely restored, as py_core says."""
    popup = popup_for_draft(browser, DRAFT)
    high = check_draft_forecast(popup)
    # A lower ε hides more: the forecast follows the slider.
    before = popup.evaluate("() => document.body.dataset.saved || null")
    set_range(popup, "#epsilon", 2.0)
    wait_saved(popup, before)
    low = forecast_at(popup, DRAFT, 2.0)
    hidden = [sum(w["kind"] == "hidden" for w in ws) for ws in (low, high)]
    assert hidden[0] > hidden[1], hidden


def test_forecast_after_a_snapshot_restore(
    playwright: Playwright, built: Path, recorder: Recorder, tmp_path: Path
) -> None:
    """After a restart the core comes from its memory snapshot and still forecasts."""
    browser = Browser(playwright, built, tmp_path / "profile", recorder)
    try:
        browser.wait_core(timeout=120)
        deadline = time.time() + 60
        while not str(browser.core_status().get("snapshot", "")).startswith("stored"):
            assert time.time() < deadline, browser.core_status()
            time.sleep(0.1)
    finally:
        browser.close()
    browser = Browser(playwright, built, tmp_path / "profile", recorder)
    try:
        status = browser.wait_core(timeout=120)
        assert status["state"] == "ready" and status["fromSnapshot"], status
        check_draft_forecast(popup_for_draft(browser, DRAFT))
    finally:
        browser.close()
