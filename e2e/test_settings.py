"""Settings made in the popup take effect on the next send."""

from __future__ import annotations

import math
import random
import string
import time

import pytest

from e2e.harness import Browser, history, set_range, type_prompt, wait_for_records, wait_saved
from py_core import krr
from py_core.sanitize import DEFAULT_HEADER

# A hung browser call fails its test instead of stalling the run.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

HOST = "chatgpt.com"
# 300 letters in 50 distinct six-letter words: enough characters for a frequency check.
# Distinct, because the word memo sends a repeated word as one draw (its letters would
# not be independent draws).
_LETTERS = random.Random(13)
WORDS = sorted({"".join(_LETTERS.choices(string.ascii_lowercase, k=6)) for _ in range(60)})[:50]
TEXT = " ".join(WORDS)
assert len(set(WORDS)) == 50 and len(TEXT.replace(" ", "")) == 300


def body_of(sent: str) -> str:
    squashed = " ".join(sent.split())
    header = " ".join(DEFAULT_HEADER.split())
    assert squashed.startswith(header)
    return squashed[len(header) :].strip()


def send_once(browser: Browser, text: str) -> str:
    browser.recorder.clear()
    page = browser.open_site(HOST)
    type_prompt(page, HOST, text)
    page.keyboard.press("Enter")
    record = wait_for_records(page, browser.recorder)[0]
    page.close()
    return record.text


@pytest.mark.parametrize("epsilon", [1.0, 11.0])
def test_epsilon_set_in_popup_takes_effect(browser: Browser, epsilon: float) -> None:
    """The share of characters kept matches the ε chosen in the popup (within 4 SE)."""
    popup = browser.popup(HOST)
    before = popup.evaluate("() => document.body.dataset.saved || null")
    set_range(popup, "#epsilon", epsilon)
    wait_saved(popup, before)
    assert browser.storage()["settings"]["sites"]["chatgpt"]["epsilon"] == epsilon
    # The popup's explanation comes from the same core code.
    p = krr.implementation(epsilon).keep_probability
    popup.wait_for_selector(f"#explain:has-text('p = {p:.3f}')")
    sent = send_once(browser, TEXT)
    body = body_of(sent)
    letters = [(a, b) for a, b in zip(body, TEXT, strict=True) if b != " "]
    n = len(letters)
    kept = sum(a == b for a, b in letters)
    se = math.sqrt(n * p * (1 - p))
    assert abs(kept - n * p) <= 4 * se + 1, (kept, n * p, se)
    entries = history(browser, "chatgpt")
    assert entries[-1]["epsilon"] == epsilon
    assert entries[-1]["receipt"]["epsilon_per_char"] == pytest.approx(
        krr.implemented_epsilon(epsilon)
    )


def test_off_sends_the_original(browser: Browser) -> None:
    """With protection off in the popup, the prompt goes out exactly as typed."""
    popup = browser.popup(HOST)
    before = popup.evaluate("() => document.body.dataset.saved || null")
    popup.uncheck("#enabled")
    wait_saved(popup, before)
    text = "Plain text, sent as typed.\nSecond line."
    assert send_once(browser, text) == text
    assert "history:chatgpt" not in browser.storage()


def test_settings_messages_are_refused_from_web_pages(browser: Browser) -> None:
    """A content script (a web page's context) cannot change settings through the worker."""
    page = browser.open_site(HOST)
    # The page's own world has no chrome.runtime for the extension; a content
    # script does, and the worker must still refuse settings changes from it.
    # Simulate the content script's sender by asking the worker to evaluate its check.
    verdict = browser.evaluate(
        """async () => {
            const tabs = await chrome.tabs.query({url: 'https://chatgpt.com/*'});
            const [res] = await chrome.scripting.executeScript({
                target: {tabId: tabs[0].id},
                world: 'ISOLATED',
                func: () => chrome.runtime.sendMessage({type: 'set-site', target: 'background',
                    data: {siteId: 'chatgpt', patch: {enabled: false}}}),
            });
            return res.result;
        }"""
    )
    page.close()
    assert verdict["ok"] is False and verdict["error"]["code"] == "forbidden"
    assert (
        browser.storage().get("settings") is None
        or browser.storage()["settings"]["sites"]["chatgpt"]["enabled"]
    )


def badge(browser: Browser, host: str) -> str:
    return str(
        browser.evaluate(
            """async (host) => {
                const [tab] = await chrome.tabs.query({url: `https://${host}/*`});
                return chrome.action.getBadgeText({tabId: tab.id});
            }""",
            host,
        )
    )


def wait_badge(browser: Browser, host: str, text: str, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while (now := badge(browser, host)) != text:
        if time.time() > deadline:
            raise TimeoutError(f"the badge says {now!r}, not {text!r}")
        time.sleep(0.05)


def test_badge_shows_the_site_state(browser: Browser) -> None:
    """The toolbar badge says "on" on a protected site and "off" once turned off."""
    browser.open_site(HOST)
    wait_badge(browser, HOST, "on")
    popup = browser.popup(HOST)
    before = popup.evaluate("() => document.body.dataset.saved || null")
    popup.uncheck("#enabled")
    wait_saved(popup, before)
    wait_badge(browser, HOST, "off")


def test_header_choice_in_options_takes_effect(browser: Browser) -> None:
    """ "Send no header" in the options page sends the perturbed prompt alone."""
    options = browser.options()
    options.click("#header-none")
    options.wait_for_selector("#header-state:has-text('No header')")
    sent = send_once(browser, TEXT)
    assert len(sent) == len(TEXT)
    assert [i for i, c in enumerate(sent) if c == " "] == [
        i for i, c in enumerate(TEXT) if c == " "
    ]
