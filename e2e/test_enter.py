"""Every composer's Enter works the first time (issue 27, point 2).

Veil holds Enter back while it protects the prompt, then replays the key the
way a browser delivers it -- keydown, keypress, beforeinput, keyup -- and
decides from what the editor did: the text left (a send), the editor made a new
line (Enter is not a send here), or nobody took the key. The pages
(``e2e/fixtures/src/redesign/``) send on keypress (as @chatscope's
MessageInput does), on a keydown they do not cancel, by their form's implicit
submission, from beforeinput, and one makes Enter a new line itself; and
the real MessageInput of @chatscope/chat-ui-kit-react, bundled from npm.
"""

from __future__ import annotations

import pytest

from e2e.harness import SITE_ID, Browser, history, notice, wait_history, wait_notice
from e2e.test_failclosed import (
    fixture_text,
    grant_clipboard,  # noqa: F401 (a fixture)
    paste_draft,
    sends,
    sent_prompt,
    type_draft,
    wait_until,
)
from e2e.test_protect import assert_perturbed_shape, squash

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

PROMPT = "Patient Maria Keller was admitted on Tuesday with chest pain, please summarise it."
# page -> the built-in host it is served under (no selector of its adapter matches the page)
COMPOSERS = {
    "keypress": "claude.ai",  # React onKeyPress (keydown passes), fetch JSON
    "keydown-late": "claude.ai",  # keydown not cancelled, XHR, the box cleared 60 ms later
    "form-submit": "claude.ai",  # <input> in a <form>: implicit submission, form-encoded
    "beforeinput": "gemini.google.com",  # contenteditable, sends on beforeinput insertParagraph
    # The real component from npm: @chatscope/chat-ui-kit-react's MessageInput (keypress).
    "chatscope": "claude.ai",
}


@pytest.mark.parametrize("name", list(COMPOSERS))
def test_the_first_enter_sends_the_protected_prompt(browser: Browser, name: str) -> None:
    host = COMPOSERS[name]
    page = browser.open_redesign(host, name)
    type_draft(page, PROMPT)
    page.keyboard.press("Enter")
    wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
    page.wait_for_timeout(800)  # a second send (or a refused one) would be here by now
    arrivals = sends(browser.recorder)
    assert len(arrivals) == 1, arrivals
    assert_perturbed_shape(sent_prompt(arrivals[0]), PROMPT)
    assert squash(PROMPT) not in squash(arrivals[0].text())
    assert page.evaluate("() => window.__attempts") == 1
    kind, text = notice(page)
    assert kind == "protected" and "new line" not in text, (kind, text)
    assert fixture_text(page).strip() == "", "the site took the text out of its box"
    wait_history(browser, SITE_ID[host], ["protected"])
    assert [e["status"] for e in history(browser, SITE_ID[host])] == ["protected"]


def test_an_editor_that_makes_enter_a_new_line_keeps_the_text(browser: Browser) -> None:
    """The page cancels Enter and inserts the line break itself: not a send, the text is as typed."""
    page = browser.open_redesign("claude.ai", "enter-newline")
    type_draft(page, "Dear Dr. Keller, about the results")
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    _, text = wait_notice(page, {"protected"})
    assert "Enter makes a new line on this page" in text, text
    assert fixture_text(page) == "Dear Dr. Keller, about the results\n"
    assert sends(browser.recorder) == []
    # From now on a plain Enter is the page's own line break; Ctrl+Enter sends, protected.
    page.keyboard.insert_text("of Tuesday")
    page.keyboard.press("Enter")
    page.wait_for_function("() => window.__fixture.text().endsWith('Tuesday\\n')")
    assert sends(browser.recorder) == []
    page.keyboard.insert_text("kind regards")
    page.keyboard.press("Control+Enter")
    wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
    want = "Dear Dr. Keller, about the results\nof Tuesday\nkind regards"
    assert_perturbed_shape(sent_prompt(sends(browser.recorder)[0]), want)
    assert page.evaluate("() => window.__attempts") == 1


def test_an_enter_that_made_a_new_line_is_not_counted_as_sent(browser: Browser) -> None:
    """The withdrawn send: history says 'withdrawn', its words are not 'sent as before' later."""
    page = browser.open_redesign("claude.ai", "enter-newline")
    type_draft(page, "Dear Dr. Keller, about the results")
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    _, text = wait_notice(page, {"protected"})
    assert "Enter makes a new line on this page" in text, text
    wait_history(browser, "claude", ["withdrawn"])
    entry = history(browser, "claude")[0]
    assert entry["notice"].startswith("Not sent: Enter made a new line"), entry["notice"]
    assert "memoSentHere" not in entry
    stored = browser.storage()
    for word in ("Keller", "results"):
        variants = stored[f"memo:{word}"]
        assert [v["sites"] for v in variants] == [[]], (word, variants)
    assert word in stored["memoUnsent"]
    assert sends(browser.recorder) == []
    # The real send (Ctrl+Enter): the same draws go out, none of them counted as sent before.
    page.keyboard.insert_text("kind regards")
    page.keyboard.press("Control+Enter")
    wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
    _, text = wait_notice(page, {"protected"})
    assert "Veil protected this prompt" in text and "sent as before" not in text, text
    wait_history(browser, "claude", ["withdrawn", "protected"])
    assert browser.storage()["memo:Keller"][0]["sites"] == ["claude"]


@pytest.mark.usefixtures("grant_clipboard")
@pytest.mark.parametrize("how", ["type", "paste"])
def test_chatscope_send_button_sends_the_protected_prompt(browser: Browser, how: str) -> None:
    """The real @chatscope MessageInput's own send button, after typing or a real paste."""
    page = browser.open_redesign("claude.ai", "chatscope")
    if how == "paste":
        paste_draft(page, PROMPT)
    else:
        type_draft(page, PROMPT)
    page.click("button.cs-button--send")
    wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
    page.wait_for_timeout(800)
    arrivals = sends(browser.recorder)
    assert len(arrivals) == 1, arrivals
    assert_perturbed_shape(sent_prompt(arrivals[0]), PROMPT)
    assert page.evaluate("() => window.__attempts") == 1
