"""No send carries the original, even on a chat site whose page no selector matches.

The pages (``e2e/fixtures/src/redesign/``) are served under built-in host names,
and neither their editor nor their send control matches any selector of that
host's adapter in ``extension/src/sites.js`` (checked first in every test). Each
is tried on every path -- a click on its send control, Enter (Ctrl+Enter where
the page sends on that), and a paste followed by a click -- and the recorder,
which gets every request and WebSocket message the page sends, must never see
the original. Then the same with Veil's DOM interception switched off (a
switch only the test build has): the network guard alone must refuse every
one of those sends, let the page's ordinary traffic through, and put the
protected prompt back so that sending again delivers it.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, Playwright

from e2e.harness import (
    EXTENSION_TEST,
    ROOT,
    Browser,
    history,
    notice,
    wait_notice,
    wait_saved,
)
from e2e.recorder import Arrival, Recorder
from e2e.test_protect import assert_perturbed_shape, squash
from py_core.sanitize import DEFAULT_HEADER

# A hung browser call fails its test instead of stalling the run.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

PROMPT = (
    "Patient Maria Keller was admitted on Tuesday with chest pain.\n"
    "Please summarise her discharge letter for the family doctor."
)
# page -> the built-in host it is served under
PAGES = {
    "plain-div": "gemini.google.com",  # contenteditable, <div role=button>, fetch JSON
    "pm-icon": "gemini.google.com",  # ProseMirror, icon-only <button class>, fetch JSON
    "react-textarea": "claude.ai",  # React-controlled textarea, Ctrl+Enter, fetch JSON
    "websocket": "gemini.google.com",  # textarea, bare <span>, WebSocket
    "beacon": "claude.ai",  # textarea #q9, <span role=button>, sendBeacon (Blob), Ctrl+Enter
    "delayed": "gemini.google.com",  # contenteditable, posts from a setTimeout (XHR, form-encoded)
    "formdata": "claude.ai",  # textarea, <button>, fetch with FormData (multipart)
}
PATHS = ["click", "enter", "paste-click"]
RUN = 32  # no run of this many characters of the original may arrive


@functools.cache
def adapter_selectors(host: str) -> tuple[list[str], list[str]]:
    """The editor and send selectors of the host's adapter, read from sites.js."""
    script = (
        "import('./extension/src/sites.js').then(m => console.log(JSON.stringify("
        f"m.SITES.find(s => s.hosts.includes({json.dumps(host)})))))"
    )
    node = shutil.which("node") or "node"
    out = subprocess.run([node, "-e", script], cwd=ROOT, check=True, capture_output=True, text=True)
    site = json.loads(out.stdout)
    return list(site["editor"]), list(site["send"])


def assert_adapter_finds_nothing(page: Page, host: str) -> None:
    """No selector of the host's adapter matches anything on the page."""
    editor, send = adapter_selectors(host)
    matched = page.evaluate(
        """(selectors) => selectors.filter((s) => document.querySelectorAll(s).length > 0)""",
        editor + send,
    )
    assert matched == [], f"the adapter's selectors match the redesigned page: {matched}"
    assert page.evaluate("() => !!document.querySelector(window.__fixture.send)")


def fixture(page: Page, key: str) -> str:
    return str(page.evaluate(f"() => window.__fixture.{key}"))


def type_draft(page: Page, text: str) -> None:
    page.click(fixture(page, "editor"))
    for i, line in enumerate(text.split("\n")):
        if i:
            page.keyboard.press("Shift+Enter")
        if line:
            page.keyboard.insert_text(line)


def paste_draft(page: Page, text: str) -> None:
    """Put ``text`` on the clipboard and paste it with Ctrl+V (a real, trusted paste)."""
    page.click(fixture(page, "editor"))
    page.evaluate("(t) => navigator.clipboard.writeText(t)", text)
    page.keyboard.press("Control+V")
    page.wait_for_function("() => window.__fixture.text().trim().length > 0")


def draft(page: Page, path: str) -> None:
    if path == "paste-click":
        paste_draft(page, PROMPT)
    else:
        type_draft(page, PROMPT)


def send(page: Page, path: str) -> None:
    if path == "enter":
        page.click(fixture(page, "editor"))
        page.keyboard.press(fixture(page, "enter"))
    else:
        page.click(fixture(page, "send"))


def sends(recorder: Recorder) -> list[Arrival]:
    return [a for a in recorder.arrivals() if a.kind in ("send", "ws")]


def wait_until(page: Page, check: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    """Wait (serving routes meanwhile) until ``check()`` is true."""
    waited = 0.0
    while not check():
        if waited > timeout:
            raise TimeoutError(f"{what} within {timeout} s")
        page.wait_for_timeout(50)
        waited += 0.05


def original_runs() -> set[str]:
    s = "".join(PROMPT.split())
    return {s[i : i + RUN] for i in range(len(s) - RUN + 1)}


def assert_original_never_arrived(recorder: Recorder) -> None:
    runs = original_runs()
    for arrival in recorder.arrivals():
        body = "".join(arrival.text().split())
        assert squash(PROMPT) not in squash(arrival.text()), f"the original arrived: {arrival}"
        leaked = [r for r in runs if r in body]
        assert not leaked, (
            f"{len(leaked)} runs of {RUN} characters of the original arrived: {arrival}"
        )


def sent_prompt(arrival: Arrival) -> str:
    """The prompt a send carried: the value that starts with Veil's header."""
    header = squash(DEFAULT_HEADER)
    values = [v for v in arrival.values if squash(v).startswith(header)]
    assert values, f"no value of {arrival} starts with Veil's header"
    return values[0]


@pytest.fixture(scope="session")
def grant_clipboard(shared_browser: Browser) -> None:
    shared_browser.ctx.grant_permissions(["clipboard-read", "clipboard-write"])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(PAGES))
def test_a_redesigned_page_never_gets_the_original(
    browser: Browser, grant_clipboard: None, name: str, path: str
) -> None:
    """Click, Enter and paste-then-click on each redesigned page: the protected text arrives, the original never."""
    host = PAGES[name]
    page = browser.open_redesign(host, name)
    assert_adapter_finds_nothing(page, host)
    draft(page, path)
    # Ordinary traffic (the page says how long the draft is) still goes through.
    wait_until(page, lambda: browser.recorder.arrivals("ping"), "no ping arrived")
    send(page, path)
    wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
    got = sends(browser.recorder)
    assert len(got) == 1, got
    assert_perturbed_shape(sent_prompt(got[0]), PROMPT)
    assert_original_never_arrived(browser.recorder)
    assert wait_notice(page, {"protected"})[0] == "protected"
    assert [e["status"] for e in history(browser, "gemini" if "gemini" in host else "claude")] == [
        "protected"
    ]


def test_a_control_that_is_not_a_send_passes_and_keeps_the_text(
    browser: Browser, grant_clipboard: None
) -> None:
    """The composer's attach button is let through: nothing is protected or sent, the text stays."""
    page = browser.open_redesign("gemini.google.com", "plain-div")
    type_draft(page, PROMPT)
    page.evaluate(
        "() => document.querySelector('.a1').addEventListener('click', () => window.__attached = true)"
    )
    page.click(".a1")
    page.wait_for_function("() => window.__attached === true")
    assert squash(fixture_text(page)) == squash(PROMPT)
    assert notice(page) == ("", "")
    assert history(browser, "gemini") == []
    # The real send next to it is still caught.
    page.click(".go")
    wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
    assert_perturbed_shape(sent_prompt(sends(browser.recorder)[0]), PROMPT)


def fixture_text(page: Page) -> str:
    return str(page.evaluate("() => window.__fixture.text()"))


# ---------------------------------------------------------------- the network guard alone


@pytest.fixture(scope="module")
def guard_browser(
    playwright: Playwright,
    built: Path,
    recorder: Recorder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Browser]:
    """The test build with Veil's DOM interception switched off: only the network guard stands."""
    browser = Browser(
        playwright, EXTENSION_TEST, tmp_path_factory.mktemp("guard-profile"), recorder
    )
    browser.ctx.grant_permissions(["clipboard-read", "clipboard-write"])
    browser.wait_core()
    yield browser
    browser.close()


@pytest.fixture
def guard_only(guard_browser: Browser, recorder: Recorder) -> Iterator[Browser]:
    guard_browser.reset_storage()
    guard_browser.evaluate(
        "() => chrome.storage.local.set({veilTestSwitches: {domInterception: false}})"
    )
    recorder.clear()
    yield guard_browser
    for page in guard_browser.pages():
        if not page.is_closed():
            page.close(run_before_unload=True)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(PAGES))
def test_the_network_guard_alone_blocks_every_send(
    guard_only: Browser, name: str, path: str
) -> None:
    """DOM interception off: the page's own send is refused by the guard, then the protected prompt goes."""
    browser = guard_only
    host = PAGES[name]
    page = browser.open_redesign(host, name)
    draft(page, path)
    wait_until(page, lambda: browser.recorder.arrivals("ping"), "no ping arrived")
    send(page, path)
    _, text = wait_notice(page, {"blocked"})
    assert "carried your prompt unprotected" in text, text
    assert page.evaluate("() => window.__attempts") == 1, "the page itself tried to send"
    assert sends(browser.recorder) == []
    assert_original_never_arrived(browser.recorder)
    # Veil protected the prompt and put it back in the box: sending again delivers it.
    header = squash(DEFAULT_HEADER)
    page.wait_for_function(
        "(h) => window.__fixture.text().replace(/\\s+/g, ' ').trim().startsWith(h)", arg=header
    )
    send(page, "click" if path == "paste-click" else path)
    wait_until(page, lambda: sends(browser.recorder), "the protected prompt was not sent")
    assert_perturbed_shape(sent_prompt(sends(browser.recorder)[0]), PROMPT)
    assert_original_never_arrived(browser.recorder)
    assert page.evaluate("() => window.__attempts") == 2


# ---------------------------------------------------------------- fail closed, protection off


@pytest.fixture
def broken_guard_browser(
    playwright: Playwright, built: Path, recorder: Recorder, tmp_path: Path
) -> Iterator[Browser]:
    """The test build with its Python bundle corrupted, DOM interception off."""
    copy = tmp_path / "extension"
    shutil.copytree(EXTENSION_TEST, copy)
    (copy / "python" / "veil_core.zip").write_bytes(b"this is not a zip archive")
    recorder.clear()
    browser = Browser(playwright, copy, tmp_path / "profile", recorder)
    browser.evaluate("() => chrome.storage.local.set({veilTestSwitches: {domInterception: false}})")
    yield browser
    browser.close()


def test_without_a_core_the_guard_blocks_and_says_why(broken_guard_browser: Browser) -> None:
    """The core cannot start: the guard refuses the page's send and the notice says why; the text comes back."""
    browser = broken_guard_browser
    assert browser.wait_core()["state"] == "error"
    page = browser.open_redesign("gemini.google.com", "delayed")
    type_draft(page, PROMPT)
    page.click(fixture(page, "send"))
    page.wait_for_function(
        """() => { const h = document.querySelector('veil-notice');
                   return h && !h.hidden && /core|Python|failed|start/i.test(h.shadowRoot.textContent)
                          && h.dataset.kind === 'blocked'; }"""
    )
    page.wait_for_function("(t) => window.__fixture.text().trim().length > 0", arg=PROMPT)
    assert squash(fixture_text(page)) == squash(PROMPT)
    assert sends(browser.recorder) == []
    assert_original_never_arrived(browser.recorder)


def test_protection_off_is_shown_near_the_editor(browser: Browser) -> None:
    """With protection off, a persistent sign sits by the editor and the send says it went as typed."""
    page = browser.open_redesign("gemini.google.com", "plain-div")
    popup = browser.popup("gemini.google.com")
    before = popup.evaluate("() => document.body.dataset.saved || null")
    popup.uncheck("#enabled")
    wait_saved(popup, before)
    popup.close()
    page.wait_for_selector("veil-off:not([hidden])", state="attached")
    sign = page.evaluate("() => document.querySelector('veil-off').shadowRoot.textContent")
    assert "protection off" in sign
    box = page.locator(".inp").bounding_box()
    where = page.evaluate(
        "() => { const r = document.querySelector('veil-off').getBoundingClientRect(); return [r.left, r.top]; }"
    )
    assert box is not None and abs(where[1] - box["y"]) < 40, (where, box)
    type_draft(page, PROMPT)
    page.click(".go")
    wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
    assert squash(PROMPT) in squash(sends(browser.recorder)[0].text())
    _, text = wait_notice(page, {"off"})
    assert "protection is off" in text


# ---------------------------------------------------------------- what the popup and badge say


def test_the_popup_says_what_veil_found(browser: Browser) -> None:
    """On a redesigned page the popup names the editor, the send control, the guard, and says the page changed."""
    page = browser.open_redesign("gemini.google.com", "pm-icon")
    type_draft(page, "hello there")
    tab = page.evaluate("() => location.href")
    tab_id = browser.evaluate(
        "async () => (await chrome.tabs.query({url: 'https://gemini.google.com/redesign/*'}))[0].id"
    )
    popup = browser.ctx.new_page()
    popup.goto(browser.url(f"popup.html?url={quote(tab, safe='')}&tab={tab_id}"))
    popup.wait_for_selector("#check[data-state=ready]")
    lines = popup.locator("#check li").all_inner_texts()
    assert lines[0].startswith("Editor: prosemirror, found where you typed"), lines
    assert lines[1].startswith("Send control: found by the composer rule"), lines
    assert lines[2].startswith("Network guard: active"), lines
    changed = popup.locator("#check-changed")
    assert changed.is_visible()
    assert "this site changed its page" in changed.inner_text().lower()
    badge = browser.evaluate("async (id) => chrome.action.getBadgeText({tabId: id})", tab_id)
    assert badge == "on?"


# ---------------------------------------------------------------- sites the person adds

ADDED = "https://huggingface.co"  # no built-in site outside /chat; its permission is granted


def add_site(browser: Browser, origin: str) -> dict[str, object]:
    return dict(
        browser.evaluate(
            """(origin) => chrome.runtime.sendMessage({type: 'add-site', target: 'background',
                                                      data: {origin}})""",
            origin,
        )
    )


def test_an_added_site_gets_the_composer_rule_and_the_guard(browser: Browser) -> None:
    """A site the person adds: both scripts are registered, and a redesigned page there is protected."""
    reply = add_site(browser, ADDED)
    assert reply["ok"], reply
    scripts = browser.evaluate("() => chrome.scripting.getRegisteredContentScripts()")
    by_id = {s["id"]: s for s in scripts}
    assert by_id[f"custom:{ADDED}"]["js"] == ["content.js"]
    guard = by_id[f"guard:custom:{ADDED}"]
    assert (guard["js"], guard["world"], guard["runAt"]) == (["guard.js"], "MAIN", "document_start")
    page = browser.open_redesign("huggingface.co", "plain-div")
    type_draft(page, PROMPT)
    page.click(".go")
    wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
    assert_perturbed_shape(sent_prompt(sends(browser.recorder)[0]), PROMPT)
    assert_original_never_arrived(browser.recorder)
    assert [e["status"] for e in history(browser, f"custom:{ADDED}")] == ["protected"]
    browser.evaluate(
        """(id) => chrome.runtime.sendMessage({type: 'remove-site', target: 'background',
                                              data: {siteId: id}})""",
        f"custom:{ADDED}",
    )


def test_on_an_added_site_the_guard_alone_blocks_the_send(guard_only: Browser) -> None:
    """DOM interception off on a site the person added: the network guard refuses the original."""
    browser = guard_only
    assert add_site(browser, ADDED)["ok"]
    page = browser.open_redesign("huggingface.co", "formdata")
    type_draft(page, PROMPT)
    page.click(fixture(page, "send"))
    _, text = wait_notice(page, {"blocked"})
    assert "carried your prompt unprotected" in text
    assert page.evaluate("() => window.__attempts") == 1
    assert sends(browser.recorder) == []
    assert_original_never_arrived(browser.recorder)


def test_the_popup_offers_protection_only_on_web_pages(browser: Browser) -> None:
    """On chrome:// and extension pages the popup says Veil cannot protect them, and offers nothing."""
    for url in ("chrome://newtab/", browser.url("options.html")):
        popup = browser.ctx.new_page()
        popup.goto(browser.url(f"popup.html?url={quote(url, safe='')}"))
        popup.wait_for_selector("body[data-ready=true]")
        assert popup.locator("#unprotectable").is_visible(), url
        assert not popup.locator("#add-site").is_visible(), url
        popup.close()
    popup = browser.ctx.new_page()
    popup.goto(browser.url(f"popup.html?url={quote('https://chat.example.org/c/1', safe='')}"))
    popup.wait_for_selector("body[data-ready=true]")
    assert popup.locator("#add-site").is_visible()
    assert not popup.locator("#unprotectable").is_visible()


def test_adding_a_site_says_it_waits_for_chrome(browser: Browser) -> None:
    """While Chrome's permission prompt is open the popup says so, and an old error is gone."""
    popup = browser.ctx.new_page()
    popup.goto(browser.url(f"popup.html?url={quote('https://chat.example.org/c/1', safe='')}"))
    popup.wait_for_selector("body[data-ready=true]")
    popup.evaluate(
        "() => { const e = document.getElementById('error'); e.hidden = false; e.textContent = 'old'; }"
    )
    popup.click("#add-site")
    popup.wait_for_selector('#add-site-state:has-text("Chrome is asking whether Veil may")')
    assert not popup.locator("#error").is_visible()
    assert popup.locator("#add-site").is_disabled()


def test_a_streamed_body_is_refused_while_a_draft_is_unprotected(browser: Browser) -> None:
    """A request whose body is a stream cannot be checked: refused while the draft is in the box."""
    page = browser.open_redesign("gemini.google.com", "plain-div")
    type_draft(page, PROMPT)
    message = page.evaluate(
        """() => fetch('/__recorder/raw/send', {method: 'POST', duplex: 'half',
                     body: new ReadableStream({start(c) { c.enqueue(new TextEncoder().encode('x')); c.close(); }})})
                 .then(() => 'sent', (err) => String(err.message))"""
    )
    assert message.startswith("Veil blocked this request"), message
    _, text = wait_notice(page, {"blocked"})
    assert "a streamed body" in text, text
    # Not a send the person made: the draft stays as typed, nothing is protected.
    assert "Your text is still in the box" in text, text
    assert squash(fixture_text(page)) == squash(PROMPT)
    assert sends(browser.recorder) == []
    # With the box empty, the page's ordinary requests are not checked at all.
    page.evaluate("() => document.querySelector('.inp').replaceChildren()")
    ordinary = page.evaluate(
        """() => fetch('/__recorder/raw/ping', {method: 'POST', body: 'ordinary'}).then((r) => r.status)"""
    )
    assert ordinary == 200


def test_an_enter_that_makes_a_new_line_gives_the_text_back(browser: Browser) -> None:
    """Where Enter is a line break (the page sends on Ctrl+Enter), Veil sends nothing and keeps the text."""
    page = browser.open_redesign("claude.ai", "react-textarea")
    type_draft(page, "Dear Dr. Keller, about the results")
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    _, text = wait_notice(page, {"protected"})
    assert "Enter makes a new line on this page" in text, text
    assert fixture_text(page) == "Dear Dr. Keller, about the results\n"
    # From now on a plain Enter is the page's own: a line break, nothing intercepted.
    page.keyboard.insert_text("of Tuesday")
    page.keyboard.press("Enter")
    page.wait_for_function("() => window.__fixture.text().endsWith('Tuesday\\n')")
    assert sends(browser.recorder) == []
    page.keyboard.insert_text("kind regards")
    page.keyboard.press("Control+Enter")
    wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
    want = "Dear Dr. Keller, about the results\nof Tuesday\nkind regards"
    assert_perturbed_shape(sent_prompt(sends(browser.recorder)[0]), want)
