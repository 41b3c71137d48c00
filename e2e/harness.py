"""Launching Chromium with the built extension, and driving its pages."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from playwright.sync_api import BrowserContext, Page, Playwright, Route, WebSocketRoute, Worker

from e2e.recorder import FIXTURE_FOR_HOST, Record, Recorder

ROOT = Path(__file__).resolve().parent.parent
EXTENSION = ROOT / "build" / "extension"
# The same extension with the tests' switches compiled in (build.mjs --test-switches).
EXTENSION_TEST = ROOT / "build" / "extension-test"
FIXTURES = ROOT / "build" / "e2e-fixtures"

SITE_URL = {host: f"https://{host}/" for host in FIXTURE_FOR_HOST}
SITE_ID = {
    "chatgpt.com": "chatgpt",
    "claude.ai": "claude",
    "gemini.google.com": "gemini",
    "www.perplexity.ai": "perplexity",
    "chat.deepseek.com": "deepseek",
    "copilot.microsoft.com": "copilot",
}
# The editor each fixture page uses, and the selector to type into.
EDITOR_SELECTOR = {
    "prosemirror": "#prompt-textarea",
    "quill": "rich-textarea .ql-editor",
    "lexical": "#ask-input",
    "textarea": "#chat-input",
    "contenteditable": "#userInput",
}
# Routed to the recorder: the fixtures' chat hosts, and huggingface.co (outside
# /chat it is no built-in site, so a test can add it as a site of its own).
ROUTED_HOSTS = [*FIXTURE_FOR_HOST, "huggingface.co"]
HOST_PATTERN = re.compile(r"^https://(" + "|".join(re.escape(h) for h in ROUTED_HOSTS) + r")/")
WS_PATTERN = re.compile(r"^wss://(" + "|".join(re.escape(h) for h in ROUTED_HOSTS) + r")/")


def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise RuntimeError(
            "chromium is not installed: run `sudo apt-get install -y chromium` "
            "(never `playwright install`)"
        )
    return path


def build_all() -> None:
    """Build the extension (if its sources changed) and the fixture pages."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not installed; the extension is built with node")
    if not (ROOT / "node_modules" / "pyodide").is_dir():
        raise RuntimeError("node_modules is missing: run `npm ci` at the repository root")
    subprocess.run([node, "extension/build.mjs", "--if-stale"], cwd=ROOT, check=True)
    subprocess.run(
        [node, "extension/build.mjs", "--test-switches", "--if-stale"], cwd=ROOT, check=True
    )
    subprocess.run([node, "e2e/fixtures/build.mjs"], cwd=ROOT, check=True)


def chromium_args(extension: Path) -> list[str]:
    return [
        f"--disable-extensions-except={extension}",
        f"--load-extension={extension}",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]


class Browser:
    """One Chromium with the extension loaded, its chat sites routed to the recorder."""

    def __init__(
        self, playwright: Playwright, extension: Path, profile: Path, recorder: Recorder
    ) -> None:
        self.extension = extension
        self.profile = profile
        self.recorder = recorder
        self.launched_at = time.time()
        self.ctx: BrowserContext = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium_path(),
            headless=True,
            args=chromium_args(extension),
            viewport={"width": 1100, "height": 800},
        )
        self.ctx.route(HOST_PATTERN, self._route)
        self.ctx.route_web_socket(WS_PATTERN, self._route_ws)
        self.ext_id = urlsplit(self.sw().url).hostname or ""
        self._ext_page: Page | None = None

    def _route(self, route: Route) -> None:
        parts = urlsplit(route.request.url)
        local = f"{self.recorder.base_url}/site/{parts.hostname}{parts.path}"
        if parts.query:
            local += "?" + parts.query
        response = route.fetch(url=local)
        route.fulfill(response=response)

    def _route_ws(self, ws: WebSocketRoute) -> None:
        """A chat site's WebSocket: every message the page sends is recorded (nothing answers)."""
        site = urlsplit(ws.url).hostname or ""

        def on_message(message: str | bytes) -> None:
            body = message.encode() if isinstance(message, str) else message
            self.recorder.add_arrival(site, "ws", "application/json", body)

        ws.on_message(on_message)

    def close(self) -> None:
        self.ctx.close()

    # ------------------------------------------------------------ the worker

    def sw(self, timeout: float = 15.0) -> Worker:
        """The extension's service worker (started again if Chrome stopped it)."""
        deadline = time.time() + timeout
        while True:
            for worker in self.ctx.service_workers:
                if worker.url.endswith("/sw.js"):
                    return worker
            if time.time() > deadline:
                raise TimeoutError("the extension's service worker did not start")
            try:
                return self.ctx.wait_for_event("serviceworker", timeout=1000)
            except Exception:
                continue

    def evaluate(self, script: str, arg: Any = None) -> Any:
        """Run ``script`` (a JS function) in an extension page, where chrome.* is available.

        A page, not the service worker: Playwright's handle on a worker that
        Chrome stopped can hang, while an extension page lives on.
        """
        page = self._ext_page
        if page is None or page.is_closed():
            page = self.ctx.new_page()
            page.goto(self.url("popup.html?url=about:blank"))
            page.wait_for_selector("body[data-ready=true]", timeout=30000)
            self._ext_page = page
        return page.evaluate(script, arg)

    def pages(self) -> list[Page]:
        """The open tabs other than the page used for chrome.* calls."""
        return [p for p in self.ctx.pages if p is not self._ext_page]

    def storage(self) -> dict[str, Any]:
        return dict(self.evaluate("() => chrome.storage.local.get(null)"))

    def reset_storage(self) -> None:
        self.evaluate("() => chrome.storage.local.clear()")

    def core_status(self) -> dict[str, Any]:
        result = self.evaluate("() => chrome.storage.session.get('coreStatus')")
        return dict(result.get("coreStatus") or {})

    def wait_core(self, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            status = self.core_status()
            if status.get("state") in ("ready", "error"):
                return status
            time.sleep(0.05)
        raise TimeoutError(f"the core did not report within {timeout} s")

    def stop_service_worker(self) -> None:
        """Stop the worker the way Chrome does when idle (CDP ServiceWorker.stopAllWorkers)."""
        page = self.ctx.new_page()
        try:
            cdp = self.ctx.new_cdp_session(page)
            cdp.send("ServiceWorker.enable")
            cdp.send("ServiceWorker.stopAllWorkers")
            cdp.detach()
        finally:
            page.close()

    # ------------------------------------------------------------ pages

    def url(self, path: str) -> str:
        return f"chrome-extension://{self.ext_id}/{path}"

    def open_site(self, host: str) -> Page:
        page = self.ctx.new_page()
        page.goto(SITE_URL[host])
        page.wait_for_selector(EDITOR_SELECTOR[FIXTURE_FOR_HOST[host]])
        page.wait_for_function("() => window.__fixture !== undefined")
        return page

    def open_redesign(self, host: str, name: str) -> Page:
        """A redesigned page (e2e/fixtures/src/redesign/NAME.js) served at https://HOST/redesign/NAME."""
        page = self.ctx.new_page()
        page.goto(f"https://{host}/redesign/{name}")
        page.wait_for_function("() => window.__fixture !== undefined")
        page.wait_for_selector(page.evaluate("() => window.__fixture.editor"))
        return page

    def popup(self, host: str) -> Page:
        page = self.ctx.new_page()
        page.goto(self.url(f"popup.html?url={quote(SITE_URL[host], safe='')}"))
        page.wait_for_selector("body[data-ready=true]", timeout=30000)
        return page

    def options(self) -> Page:
        page = self.ctx.new_page()
        page.goto(self.url("options.html"))
        page.wait_for_selector("body[data-ready=true]", timeout=30000)
        return page


def history(browser: Browser, site_id: str) -> list[dict[str, Any]]:
    """The full history entries of a site, oldest first (index joined with entries)."""
    stored = browser.storage()
    return [stored[f"entry:{e['id']}"] for e in stored.get(f"history:{site_id}", [])]


def wait_receipts(browser: Browser, site_id: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    """History entries once every protected one has its composed ε (finished after the send)."""
    deadline = time.time() + timeout
    while True:
        entries = history(browser, site_id)
        pending = [
            e
            for e in entries
            if e.get("receipt") and e["receipt"].get("epsilon_total_composed") is None
        ]
        if not pending:
            return entries
        if time.time() > deadline:
            raise TimeoutError(f"{len(pending)} receipts were not finished in {timeout} s")
        time.sleep(0.05)


def type_prompt(page: Page, host: str, text: str) -> None:
    """Click into the site's editor and type ``text`` (Shift+Enter for line breaks)."""
    selector = EDITOR_SELECTOR[FIXTURE_FOR_HOST[host]]
    page.click(selector)
    for i, line in enumerate(text.split("\n")):
        if i:
            page.keyboard.press("Shift+Enter")
        if line:
            page.keyboard.insert_text(line)


def send_prompt(browser: Browser, host: str, text: str) -> str:
    """Type ``text`` into a fresh tab of ``host``, press Enter: the one request's text."""
    browser.recorder.clear()
    page = browser.open_site(host)
    type_prompt(page, host, text)
    page.keyboard.press("Enter")
    records = wait_for_records(page, browser.recorder)
    assert len(records) == 1, records
    page.close()
    return records[0].text


def editor_text(page: Page) -> str:
    return str(page.evaluate("() => window.__fixture.text()"))


def wait_for_records(
    page: Page, recorder: Recorder, count: int = 1, timeout: float = 20.0
) -> list[Record]:
    """Wait (while Playwright serves routes) until ``count`` records arrived."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        records = recorder.records()
        if len(records) >= count:
            return records
        page.wait_for_timeout(50)
    raise TimeoutError(
        f"the recorder got {len(recorder.records())} of {count} sends in {timeout} s"
    )


def page_sends(page: Page) -> int:
    """How many times the fixture page sent (counted in the page as it sends, before the POST)."""
    return int(page.evaluate("() => window.__sends || 0"))


def wait_history(
    browser: Browser, site_id: str, statuses: list[str], timeout: float = 20.0
) -> None:
    """Wait until the site's history holds entries of exactly these statuses, in order."""
    deadline = time.time() + timeout
    while True:
        got = [e["status"] for e in history(browser, site_id)]
        if got == statuses:
            return
        if time.time() > deadline:
            raise TimeoutError(f"history of {site_id}: {got}, expected {statuses}")
        time.sleep(0.05)


def notice(page: Page) -> tuple[str, str]:
    """(kind, text) of Veil's notice on the page; ('', '') when none is shown."""
    result = page.evaluate(
        """() => { const h = document.querySelector('veil-notice');
                   if (!h || h.hidden) return ['', ''];
                   return [h.dataset.kind || '', h.shadowRoot.querySelector('.text').textContent]; }"""
    )
    return str(result[0]), str(result[1])


def wait_notice(page: Page, kinds: set[str], timeout: float = 20.0) -> tuple[str, str]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        kind, text = notice(page)
        if kind in kinds:
            return kind, text
        page.wait_for_timeout(50)
    raise TimeoutError(f"no Veil notice of kind {kinds} within {timeout} s; last: {notice(page)}")


def set_range(page: Page, selector: str, value: float) -> None:
    """Move a range slider the way a drag ends: input, then change."""
    page.locator(selector).evaluate(
        """(el, v) => { el.value = String(v); el.dispatchEvent(new Event('input', {bubbles: true}));
                        el.dispatchEvent(new Event('change', {bubbles: true})); }""",
        value,
    )


def wait_saved(page: Page, before: str | None, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        now = page.evaluate("() => document.body.dataset.saved || null")
        if now and now != before:
            return
        page.wait_for_timeout(30)
    raise TimeoutError("the popup did not confirm the change")


def json_dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


Waiter = Callable[[], bool]
