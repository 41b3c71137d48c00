"""Notices that are right (issue 27, point 3).

The page's notice for a protected send gives the total ε of the prompt, and it
says "sent as before" only for words already sent to that site: not for draws
that were only shown in the popup's preview, and not for words another site got.
"""

from __future__ import annotations

import re

import pytest

from e2e.harness import (
    EDITOR_SELECTOR,
    FIXTURE_FOR_HOST,
    SITE_URL,
    Browser,
    history,
    type_prompt,
    wait_for_records,
    wait_notice,
    wait_receipts,
)
from e2e.test_memo import PROMPT, UNITS, shown_preview
from e2e.test_preview import popup_for_draft

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

TOTAL = re.compile(r"total ε (\d+\.\d) \(basic composition")
BEFORE = re.compile(r"(\d+) words? sent as before to this site")


def send_and_read_notice(browser: Browser, host: str, page=None) -> str:
    """Send PROMPT from ``host`` (typing it, unless ``page`` already holds it): the notice's text."""
    browser.recorder.clear()
    if page is None:
        page = browser.open_site(host)
        type_prompt(page, host, PROMPT)
    else:
        page.bring_to_front()
        page.click(EDITOR_SELECTOR[FIXTURE_FOR_HOST[host]])
        page.keyboard.press("End")
    page.keyboard.press("Enter")
    wait_for_records(page, browser.recorder)
    _, text = wait_notice(page, {"protected"})
    return text


def last_receipt(browser: Browser, site_id: str) -> dict:
    wait_receipts(browser, site_id)
    return history(browser, site_id)[-1]["receipt"]


def test_the_notice_gives_the_total_epsilon_and_sent_as_before_only_for_this_site(
    browser: Browser,
) -> None:
    # Previewed in the popup first: the draws exist, but nothing was sent yet.
    popup = popup_for_draft(browser, PROMPT)
    shown_preview(popup)
    page = next(p for p in browser.pages() if p.url.startswith(SITE_URL["chatgpt.com"]))
    first = send_and_read_notice(browser, "chatgpt.com", page)
    receipt = last_receipt(browser, "chatgpt")
    assert receipt["words_reused"] > 0, "the send reused the preview's draws"
    assert TOTAL.search(first), first
    assert TOTAL.search(first).group(1) == f"{receipt['epsilon_total_basic']:.1f}"
    assert "sent as before" not in first, first

    # The same prompt to the same site: every word was sent there before.
    again = send_and_read_notice(browser, "chatgpt.com")
    match = BEFORE.search(again)
    assert match, again
    assert int(match.group(1)) == len(UNITS)
    assert (
        TOTAL.search(again).group(1)
        == f"{last_receipt(browser, 'chatgpt')['epsilon_total_basic']:.1f}"
    )

    # Another site: the same draws go out, but none was sent to this site before.
    elsewhere = send_and_read_notice(browser, "gemini.google.com")
    assert "sent as before" not in elsewhere, elsewhere
    assert TOTAL.search(elsewhere), elsewhere
