"""Composing in Veil's side panel: the chat page never sees the original.

The fixture site's own script (installed before the page's scripts run, in the
page's world) listens for keydown, input, beforeinput and paste on the whole
document and records every DOM mutation (a MutationObserver over the page,
the editor included). The prompt is typed into Veil's side panel, opened as a
tab at ``sidepanel.html?tab=<id>``; what the page records, and what its send
carries, must be the protected text and nothing of the original.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import CDPSession, Page

from e2e.harness import (
    EDITOR_SELECTOR,
    SITE_ID,
    SITE_URL,
    Browser,
    editor_text,
    history,
    page_sends,
    type_prompt,
    wait_for_records,
    wait_notice,
)
from e2e.recorder import FIXTURE_FOR_HOST
from e2e.test_protect import assert_perturbed_shape, squash

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

HOSTS = [
    "chatgpt.com",  # ProseMirror, a send button
    "gemini.google.com",  # Quill
    "www.perplexity.ai",  # Lexical
    "chat.deepseek.com",  # a textarea in a form
    "copilot.microsoft.com",  # a plain contenteditable
]

PROMPT = "Patient Xylofant Quendabury was admitted on Tuesday; invoice KX-40917 is unpaid."
# Words of the original that must never reach the page. The tests send at
# ε = 1 per character (p = 0.028 that a character is kept): a word of 7 or more
# characters arrives intact with probability below 1e-10. (At the default ε 5,
# p = 0.61, a 7-letter word survives 3% of the time.)
SECRET_WORDS = ["Xylofant", "Quendabury", "admitted", "Tuesday", "KX-40917", "invoice"]
EPSILON = 1.0

# The site's own listeners: everything the page could read while the person writes.
SPY = """
(() => {
  const seen = [];
  window.__seen = seen;
  const text = (t) => (t && (t.value !== undefined ? t.value : t.textContent)) || "";
  for (const type of ["keydown", "keyup", "keypress", "input", "beforeinput", "paste", "compositionstart"]) {
    document.addEventListener(type, (e) => {
      seen.push({
        type,
        key: e.key ?? null,
        data: e.data ?? null,
        clip: e.clipboardData ? e.clipboardData.getData("text/plain") : null,
        target: text(e.target),
      });
    }, true);
  }
  new MutationObserver((records) => {
    for (const r of records) {
      if (r.type === "characterData") seen.push({ type: "mutation", data: r.target.nodeValue });
      for (const n of r.addedNodes) seen.push({ type: "mutation", data: n.textContent });
    }
  }).observe(document, { subtree: true, childList: true, characterData: true });
})();
"""


def open_spied_site(browser: Browser, host: str) -> Page:
    page = browser.ctx.new_page()
    page.add_init_script(SPY)
    # A URL of its own, so its tab is found even if another test left a tab of the host open.
    page.goto(f"{SITE_URL[host]}?tab-of={uuid.uuid4().hex}")
    page.wait_for_selector(EDITOR_SELECTOR[FIXTURE_FOR_HOST[host]])
    page.wait_for_function("() => window.__fixture !== undefined")
    page.wait_for_load_state("load")
    # From here on the page's own rendering is done: what its listeners see next
    # comes from Veil (the page's text so far is checked for secrets too).
    page.evaluate("() => { window.__baseline = window.__seen.length; }")
    return page


def set_site(browser: Browser, host: str, patch: dict[str, Any]) -> None:
    reply = browser.evaluate(
        """([siteId, patch]) => chrome.runtime.sendMessage({type: 'set-site', target: 'background',
             data: {siteId, patch}})""",
        [SITE_ID[host], patch],
    )
    assert reply["ok"], reply


def tab_id(browser: Browser, page: Page) -> int:
    """The tab id of ``page`` (opened by open_spied_site, at a URL of its own)."""
    found = browser.evaluate(
        "async (url) => (await chrome.tabs.query({})).filter(t => t.url === url).map(t => t.id)",
        page.url,
    )
    assert len(found) == 1, (page.url, found)
    return int(found[0])


def open_panel(browser: Browser, tab: int, state: str = "ready") -> Page:
    panel = browser.ctx.new_page()
    panel.goto(browser.url(f"sidepanel.html?tab={tab}"))
    panel.wait_for_selector("body[data-ready=true]", timeout=30000)
    panel.wait_for_selector(f"#panel-state[data-state={state}]", timeout=30000)
    return panel


def strings_of(seen: list[dict[str, Any]]) -> list[str]:
    out = []
    for event in seen:
        for key in ("key", "data", "clip", "target"):
            value = event.get(key)
            if isinstance(value, str) and value.strip():
                out.append(value)
    return out


def assert_page_saw_nothing_of(page: Page, original: str, sent: str | None) -> list[dict]:
    """Every string the page's listeners saw is part of ``sent``; no word of the original."""
    everything: list[dict[str, Any]] = page.evaluate("() => window.__seen")
    for value in strings_of(everything):
        for word in SECRET_WORDS:
            assert word not in value, (word, value)
        assert squash(original) not in squash(value)
    seen: list[dict[str, Any]] = page.evaluate("() => window.__seen.slice(window.__baseline)")
    for value in strings_of(seen):
        if sent is None:
            raise AssertionError(f"the page saw {value!r} though nothing was sent")
        # Keys: only the synthetic Enter of a site that sends on Enter.
        if value == "Enter":
            continue
        # (A rich editor's textContent runs its paragraphs together: compare without whitespace.)
        assert "".join(value.split()) in "".join(sent.split()), (value, sent)
    typed = [
        e for e in seen if e["type"] in ("keydown", "keyup", "keypress") and e["key"] != "Enter"
    ]
    assert typed == [], typed
    return seen


@pytest.mark.parametrize("host", HOSTS)
def test_panel_send_gives_the_page_only_the_protected_text(browser: Browser, host: str) -> None:
    """Typed in the panel, sent through the site: the page sees and sends only the protected text."""
    set_site(browser, host, {"epsilon": EPSILON})
    site = open_spied_site(browser, host)
    tab = tab_id(browser, site)
    # Before the panel is open the popup says the person types in the site's box.
    popup = browser.ctx.new_page()
    popup.goto(browser.url(f"popup.html?url={SITE_URL[host]}&tab={tab}"))
    popup.wait_for_selector("#compose-mode[data-mode=site]", timeout=30000)
    assert "sees every key" in popup.inner_text("#compose-mode")
    popup.close()

    panel = open_panel(browser, tab)
    panel.click("#compose")
    panel.keyboard.type(PROMPT)
    # The same preview as the popup: the words marked, the protected text shown.
    panel.wait_for_function(
        "n => document.querySelectorAll('#forecast .word').length === n", arg=len(PROMPT.split())
    )
    assert "likely hidden" in panel.inner_text("#forecast")
    shown = panel.inner_text("#preview")
    assert shown and PROMPT not in shown
    # While the panel is open the popup says so.
    popup = browser.ctx.new_page()
    popup.goto(browser.url(f"popup.html?url={SITE_URL[host]}&tab={tab}"))
    popup.wait_for_selector("#compose-mode[data-mode=panel]", timeout=30000)
    popup.close()

    panel.click("#send")
    panel.wait_for_selector("body[data-sent]", timeout=30000)
    assert panel.evaluate("() => document.body.dataset.sent") == "sent", panel.inner_text("#result")
    records = wait_for_records(site, browser.recorder)
    assert len(records) == 1
    # (A form submission is counted by the recorder only, not by the page's script.)
    assert page_sends(site) == (0 if records[0].via == "form" else 1)
    sent = records[0].text
    assert_perturbed_shape(sent, PROMPT)
    assert squash(panel.inner_text("#sent")) == squash(sent)  # the receipt shows what left
    assert squash(shown) == squash(sent)  # the preview's draw is what was sent (the word memo)
    assert "per character" in panel.inner_text("#receipt")
    for word in SECRET_WORDS:
        assert word not in sent
    seen = assert_page_saw_nothing_of(site, PROMPT, sent)
    assert any(e["type"] in ("input", "paste", "mutation") for e in seen), (
        "the spy saw nothing at all"
    )
    # Protected once, not twice: the history holds one entry, and it is what was sent.
    entries = history(browser, SITE_ID[host])
    assert [e["status"] for e in entries] == ["protected"]
    assert squash(entries[0]["original"]) == squash(PROMPT)
    assert squash(entries[0]["sent"]) == squash(sent)
    assert editor_text(site).strip() == ""
    assert panel.input_value("#compose") == ""


def test_panel_writes_nothing_when_the_site_is_not_protected(browser: Browser) -> None:
    """Protection off: the panel says so, its send is refused, the page receives nothing."""
    host = "chatgpt.com"
    site = open_spied_site(browser, host)
    tab = tab_id(browser, site)
    set_site(browser, host, {"enabled": False})
    panel = open_panel(browser, tab, state="refused")
    assert "off for this site" in panel.inner_text("#panel-state")
    panel.fill("#compose", PROMPT)
    assert panel.is_disabled("#send")
    # Asked anyway (as a page of the extension could): refused, nothing written.
    reply = panel.evaluate(
        """([tabId, text]) => chrome.runtime.sendMessage({type: 'compose-send', target: 'background',
             data: {tabId, text}})""",
        [tab, PROMPT],
    )
    assert reply["ok"] and reply["data"]["sent"] is False and reply["data"]["text"] is None, reply
    assert "Nothing was sent" in reply["data"]["notice"]
    site.wait_for_timeout(300)
    assert_page_saw_nothing_of(site, PROMPT, None)
    assert editor_text(site) == "" and page_sends(site) == 0
    assert browser.recorder.records() == []
    assert history(browser, "chatgpt") == []


def test_panel_refuses_a_box_the_person_typed_into(browser: Browser) -> None:
    """Text typed straight into the site's box is not overwritten; it stays protected at send time."""
    host = "chatgpt.com"
    site = open_spied_site(browser, host)
    type_prompt(site, host, "typed in the site itself")
    panel = open_panel(browser, tab_id(browser, site))
    panel.fill("#compose", PROMPT)
    panel.click("#send")
    panel.wait_for_selector("body[data-sent]", timeout=30000)
    assert panel.evaluate("() => document.body.dataset.sent") == "refused"
    assert "holds text typed there" in panel.inner_text("#result")
    assert editor_text(site) == "typed in the site itself"
    assert browser.recorder.records() == []
    assert history(browser, "chatgpt") == []  # refused before anything was drawn
    # The direct way still works, protected at send time.
    site.click(EDITOR_SELECTOR[FIXTURE_FOR_HOST[host]])
    site.keyboard.press("Enter")
    records = wait_for_records(site, browser.recorder)
    assert_perturbed_shape(records[0].text, "typed in the site itself")


class RealPanel:
    """Chrome's own side panel (not a tab: Playwright does not attach to it), driven over CDP."""

    def __init__(self, page: Page, target_id: str) -> None:
        self.page = page
        self.cdp: CDPSession = page.context.new_cdp_session(page)
        attached = self.cdp.send("Target.attachToTarget", {"targetId": target_id, "flatten": False})
        self.session = attached["sessionId"]
        self.replies: dict[int, dict[str, Any]] = {}
        self.next_id = 0
        self.cdp.on("Target.receivedMessageFromTarget", self._received)

    def _received(self, event: dict[str, Any]) -> None:
        msg = json.loads(event["message"])
        if "id" in msg:
            self.replies[msg["id"]] = msg

    def evaluate(self, expression: str, timeout: float = 10.0) -> Any:
        self.next_id += 1
        call = {
            "id": self.next_id,
            "method": "Runtime.evaluate",
            "params": {"expression": expression, "awaitPromise": True, "returnByValue": True},
        }
        self.cdp.send(
            "Target.sendMessageToTarget", {"sessionId": self.session, "message": json.dumps(call)}
        )
        deadline = time.time() + timeout
        while self.next_id not in self.replies:
            assert time.time() < deadline, f"the side panel did not answer {expression!r}"
            self.page.wait_for_timeout(20)
        reply = self.replies.pop(self.next_id)
        assert "exceptionDetails" not in reply["result"], reply
        return reply["result"]["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        deadline = time.time() + timeout
        while not (value := self.evaluate(expression)):
            assert time.time() < deadline, f"timed out waiting for {expression!r} in the side panel"
            self.page.wait_for_timeout(50)
        return value


def side_panel_targets(page: Page) -> list[dict[str, Any]]:
    cdp = page.context.new_cdp_session(page)
    try:
        targets = cdp.send("Target.getTargets")["targetInfos"]
    finally:
        cdp.detach()
    return [t for t in targets if "/sidepanel.html" in t["url"] and not t["attached"]]


def test_popup_button_opens_chromes_side_panel_and_it_sends_protected(browser: Browser) -> None:
    """The popup's button opens the real chrome.sidePanel on the tab; a prompt written there is sent protected."""
    host = "chatgpt.com"
    set_site(browser, host, {"epsilon": EPSILON})
    site = open_spied_site(browser, host)
    tab = tab_id(browser, site)
    popup = browser.ctx.new_page()
    popup.goto(browser.url(f"popup.html?url={quote(SITE_URL[host], safe='')}&tab={tab}"))
    popup.wait_for_selector("body[data-ready=true]", timeout=30000)
    popup.click("#open-panel")  # a real click: the user gesture sidePanel.open needs
    deadline = time.time() + 10
    while not (targets := side_panel_targets(site)):
        assert time.time() < deadline, "no side panel opened"
        site.wait_for_timeout(50)
    assert targets[0]["url"].endswith(f"sidepanel.html?tab={tab}")
    contexts = browser.evaluate(
        "async () => (await chrome.runtime.getContexts({contextTypes: ['SIDE_PANEL']}))"
        ".map(c => c.documentUrl)"
    )
    assert any(url.endswith(f"sidepanel.html?tab={tab}") for url in contexts), contexts
    # The popup now says the person writes in Veil's panel (a SIDE_PANEL context for this tab).
    popup = browser.ctx.new_page()
    popup.goto(browser.url(f"popup.html?url={quote(SITE_URL[host], safe='')}&tab={tab}"))
    popup.wait_for_selector("#compose-mode[data-mode=panel]", timeout=30000)
    popup.close()
    panel = RealPanel(site, targets[0]["targetId"])
    panel.wait_for("document.querySelector('#panel-state').dataset.state === 'ready'")
    panel.evaluate(
        "(() => { const t = document.querySelector('#compose'); t.value = "
        + json.dumps(PROMPT)
        + "; t.dispatchEvent(new Event('input')); })()"
    )
    panel.wait_for("document.querySelectorAll('#forecast .word').length > 0")
    panel.evaluate("document.querySelector('#send').click()")
    assert panel.wait_for("document.body.dataset.sent") == "sent"
    records = wait_for_records(site, browser.recorder)
    assert_perturbed_shape(records[0].text, PROMPT)
    assert_page_saw_nothing_of(site, PROMPT, records[0].text)


def test_notice_button_opens_the_panel(browser: Browser) -> None:
    """The notice's button: Chrome refuses sidePanel.open without a gesture, so the panel opens in a window."""
    host = "chatgpt.com"
    site = open_spied_site(browser, host)
    type_prompt(site, host, "a first prompt typed in the site")
    site.keyboard.press("Enter")
    wait_notice(site, {"protected"})
    tab = tab_id(browser, site)
    with browser.ctx.expect_page(timeout=10000) as opened:
        site.locator("veil-notice").locator("button.panel").click()
    panel = opened.value
    assert panel.url == browser.url(f"sidepanel.html?tab={tab}")
    panel.wait_for_selector("#panel-state[data-state=ready]", timeout=30000)
