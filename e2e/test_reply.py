"""The reply in the person's words, in Veil's side panel and options page only (issue 27, point 1).

The prompt is written in Veil's panel and sent protected; the chat page then
shows a reply that repeats the protected words (as a model answering about
them does). The panel reads that reply from the page and shows it with every
released draw mapped back to the person's word. The page's own script records
every event and DOM mutation (test_sidepanel's spy) and must never see one of
the original words -- not while the prompt is written, sent, or restored -- and
its DOM, Veil's notice included, holds none either.
"""

from __future__ import annotations

import time

import pytest

from e2e.harness import Browser, history, wait_for_records
from e2e.test_protect import assert_perturbed_shape, squash
from e2e.test_sidepanel import (
    EPSILON,
    PROMPT,
    SECRET_WORDS,
    open_panel,
    open_spied_site,
    set_site,
    strings_of,
    tab_id,
)
from py_core.sanitize import DEFAULT_HEADER

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

HOST = "chatgpt.com"
# The words of PROMPT whose draws the panel maps back (letters only, six or more:
# "KX-40917" is cut into units "KX", "-" and "40917", and "KX" is too short to look up).
RESTORED = ["Xylofant", "Quendabury", "admitted", "Tuesday", "invoice"]
# Every string the page could read: its DOM and the open shadow roots in it (Veil's notice).
PAGE_TEXT = """() => {
  const out = [document.documentElement.outerHTML];
  for (const el of document.querySelectorAll('*')) if (el.shadowRoot) out.push(el.shadowRoot.innerHTML);
  return out.join('\\n');
}"""


def test_the_panel_shows_the_reply_in_your_words_and_the_page_never_sees_them(
    browser: Browser,
) -> None:
    set_site(browser, HOST, {"epsilon": EPSILON})
    site = open_spied_site(browser, HOST)
    panel = open_panel(browser, tab_id(browser, site))
    panel.wait_for_function(
        "() => document.querySelector('#reply-which').textContent.includes('No reply')"
    )
    panel.fill("#compose", PROMPT)
    panel.click("#send")
    panel.wait_for_selector("body[data-sent]", timeout=30000)
    assert panel.evaluate("() => document.body.dataset.sent") == "sent", panel.inner_text("#result")
    sent = wait_for_records(site, browser.recorder)[0].text
    assert_perturbed_shape(sent, PROMPT)
    body = squash(sent)[len(squash(DEFAULT_HEADER)) :].strip()

    # The site answers: its own script writes a reply that repeats the protected words.
    reply = f"You asked about this: {body} I can help with that."
    site.evaluate(
        """(text) => { const div = document.createElement('div');
                       div.setAttribute('data-message-author-role', 'assistant');
                       div.textContent = text; document.querySelector('#log').append(div); }""",
        reply,
    )
    panel.wait_for_selector("body[data-reply='1']", timeout=15000)
    restored = panel.inner_text("#reply")
    assert restored.startswith("You asked about this:") and restored.endswith(
        "I can help with that."
    )
    for word in RESTORED:
        assert word in restored, (word, restored)
    marks = panel.eval_on_selector_all("#reply mark.restored", "els => els.map(e => e.textContent)")
    assert set(RESTORED) <= set(marks), marks
    assert "the page's only reply" in panel.inner_text("#reply-which")

    # The options page's history shows that send's reply restored too (kept by the worker
    # once the page's reply settled; restored only in Veil's page).
    deadline = time.time() + 20
    while not (entries := history(browser, "chatgpt")) or "reply" not in entries[-1]:
        assert time.time() < deadline, "the reply was not kept with the send's history entry"
        time.sleep(0.2)
    assert entries[-1]["reply"]["text"] == reply and entries[-1]["status"] == "protected"
    options = browser.options()
    options.select_option("#history-site", "chatgpt")
    cell = options.wait_for_selector("#history-table td.reply[data-reply=restored]", timeout=15000)
    shown = cell.inner_text()
    assert shown.startswith("You asked about this:"), shown
    for word in RESTORED:
        assert word in shown, (word, shown)
    marks = options.eval_on_selector_all(
        "#history-table td.reply mark.restored", "els => els.map(e => e.textContent)"
    )
    assert set(RESTORED) <= set(marks), marks
    options.close()

    # Nothing of it reached the page: not its listeners, not its DOM.
    panel.click("#reply-refresh")  # reading the reply again changes nothing on the page either
    panel.wait_for_timeout(500)
    seen = site.evaluate("() => window.__seen")
    for value in [*strings_of(seen), site.evaluate(PAGE_TEXT)]:
        for word in SECRET_WORDS:
            assert word not in value, (word, value[:200])
    assert any(body[:20] in v for v in strings_of(seen)), "the spy saw the reply being written"
