"""A prompt typed on each kind of chat editor leaves perturbed, never as typed."""

from __future__ import annotations

import pytest

from e2e.harness import (
    SITE_ID,
    Browser,
    editor_text,
    history,
    page_sends,
    type_prompt,
    wait_for_records,
    wait_notice,
    wait_receipts,
)
from py_core.sanitize import DEFAULT_HEADER

# A hung browser call fails its test instead of stalling the run.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

PROMPT = (
    "Patient Maria Keller was admitted on Tuesday with chest pain.\n"
    "Please summarise her discharge letter for the family doctor."
)
HOSTS = [
    "chatgpt.com",  # ProseMirror
    "gemini.google.com",  # Quill
    "www.perplexity.ai",  # Lexical
    "chat.deepseek.com",  # textarea in a form
    "copilot.microsoft.com",  # plain contenteditable
]


def squash(text: str) -> str:
    """Whitespace runs as one space (rich editors may merge blank lines)."""
    return " ".join(text.split())


def assert_perturbed_shape(sent: str, original: str) -> None:
    """``sent`` is the header plus a k-RR perturbation of ``original``."""
    assert squash(sent).startswith(squash(DEFAULT_HEADER)), sent[:120]
    body = squash(sent)[len(squash(DEFAULT_HEADER)) :].strip()
    want = squash(original)
    assert len(body) == len(want), (body, want)
    for got, typed in zip(body, want, strict=True):
        assert (got == " ") == (typed == " "), "word boundaries must be kept"
        assert 33 <= ord(got) <= 126 or got == " ", f"{got!r} is outside the k-RR alphabet"
    changed = sum(a != b for a, b in zip(body, want, strict=True))
    assert changed > 0, "the body arrived unperturbed"


@pytest.mark.parametrize("host", HOSTS)
def test_enter_sends_a_perturbed_prompt(browser: Browser, host: str) -> None:
    """Enter on each editor sends header + perturbed text; the original never arrives."""
    page = browser.open_site(host)
    type_prompt(page, host, PROMPT)
    page.keyboard.press("Enter")
    records = wait_for_records(page, browser.recorder)
    assert len(records) == 1
    assert_perturbed_shape(records[0].text, PROMPT)
    assert squash(PROMPT) not in squash(records[0].text)
    kind, _ = wait_notice(page, {"protected"})
    assert kind == "protected"
    entries = wait_receipts(browser, SITE_ID[host])
    assert [h["status"] for h in entries] == ["protected"]
    receipt = entries[0]["receipt"]
    assert 0 < receipt["epsilon_total_composed"] <= receipt["epsilon_total_basic"]
    assert squash(entries[0]["original"]) == squash(PROMPT)
    assert squash(entries[0]["sent"]) == squash(records[0].text)


@pytest.mark.parametrize("host", ["chatgpt.com", "gemini.google.com", "copilot.microsoft.com"])
def test_click_on_send_button_is_protected(browser: Browser, host: str) -> None:
    """A click on the site's send button is intercepted like Enter."""
    page = browser.open_site(host)
    type_prompt(page, host, PROMPT)
    selector = {
        "chatgpt.com": "[data-testid=send-button]",
        "gemini.google.com": "button.send-button",
        "copilot.microsoft.com": "button[aria-label='Submit message']",
    }[host]
    page.click(selector)
    records = wait_for_records(page, browser.recorder)
    assert records[0].via == "click"
    assert_perturbed_shape(records[0].text, PROMPT)


def test_form_submit_by_site_script_is_protected(browser: Browser) -> None:
    """A form the site submits from its own script (requestSubmit) is intercepted too."""
    host = "chat.deepseek.com"
    page = browser.open_site(host)
    type_prompt(page, host, PROMPT)
    page.evaluate("() => document.querySelector('#chat-form').requestSubmit()")
    records = wait_for_records(page, browser.recorder)
    assert records[0].via == "form"
    assert_perturbed_shape(records[0].text, PROMPT)


def test_shift_enter_does_not_send(browser: Browser) -> None:
    """Shift+Enter is a line break, not a send: nothing is intercepted or recorded."""
    host = "chatgpt.com"
    page = browser.open_site(host)
    type_prompt(page, host, "first line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.insert_text("second line")
    # Had Veil taken Shift+Enter for a send it would have stopped the key (no line
    # break) or, letting it through, the page would have counted a send.
    assert editor_text(page) == "first line\nsecond line"
    assert page_sends(page) == 0
    # Then a real send: the first and only one recorded, with both lines in it.
    page.keyboard.press("Enter")
    records = wait_for_records(page, browser.recorder)
    assert len(records) == 1 and page_sends(page) == 1
    assert [h["original"] for h in history(browser, "chatgpt")] == ["first line\nsecond line"]
