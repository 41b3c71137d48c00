"""The audit page in real Chromium against the real app and a tiny model (slow: a browser)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from companion.audit.tiny import make_tiny_model
from companion.models import load_causal_lm
from tests.companion.audit_support import audit_app, opener_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("chromium") is None, reason="needs /usr/bin/chromium"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The companion app served by uvicorn on a free loopback port."""
    import uvicorn

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("VEIL_HOME", str(home))
    loaded = load_causal_lm(str(make_tiny_model(tmp_path_factory.mktemp("tiny"))), device="cpu")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = audit_app(home, opener_for(loaded), port=port)
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", app.state.token
    srv.should_exit = True
    thread.join(timeout=10)
    mp.undo()
    torch.set_num_threads(before)


@contextmanager
def _audit_page(base: str) -> Iterator[Any]:
    """A headless Chromium page on the companion's audit page."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium"), headless=True, args=["--no-sandbox"]
        )
        try:
            page = browser.new_page()
            page.goto(f"{base}/static/audit.html")
            yield page
        finally:
            browser.close()


def test_page_runs_an_audit_and_colours_proven_tokens(server, tmp_path):
    """The page offers the setup, runs it; then Run shows every token, green and proven."""
    base, token = server
    with _audit_page(base) as page:
        page.evaluate("t => localStorage.setItem('veil-token', t)", token)
        page.reload()
        page.wait_for_selector("#setup-box:not([hidden])", timeout=30_000)
        # before it starts, the setup says how long it will take here (a measured estimate)
        page.wait_for_selector("#setup-text:has-text('measured just now')", timeout=30_000)
        assert "minute" in page.inner_text("#setup-text")
        # the models the auditor can read are offered (GET /v1/audit/models)
        page.wait_for_function("document.querySelectorAll('#models-list option').length > 0")
        page.click("#setup")
        page.wait_for_selector("#stage:has-text('Setup done')", timeout=120_000)
        assert page.is_hidden("#setup-box")
        page.fill("#text", "Alice Smith, 12 Baker St")
        page.click("#start")
        page.wait_for_selector("#stage:has-text('Done.')", timeout=60_000)
        spans = page.locator("#tokens .tok")
        assert spans.count() > 5
        assert page.locator("#tokens .tok.flagged").count() == 0
        assert "".join(spans.all_inner_texts()) == "Alice Smith, 12 Baker St"
        assert spans.first.evaluate("e => e.style.background") == "rgb(46, 158, 79)"
        summary = page.inner_text("#summary")
        assert "exact match with the input" in summary and "100.0 %" in summary
        page.check("input[value=file]")
        page.set_input_files(
            "#file",
            files=[{"name": "x.npy", "mimeType": "application/octet-stream", "buffer": b"junk"}],
        )
        page.click("#start")
        page.wait_for_selector("#error:not([hidden])", timeout=20_000)
        assert "could not read 'x.npy'" in page.inner_text("#error")


def test_page_audits_a_blocks_cached_keys(server):
    """'What is read': block 1's cached keys have a setup of their own, which the page
    offers by that name; the text comes back from the keys, every token proven."""
    base, token = server
    with _audit_page(base) as page:
        page.evaluate("t => localStorage.setItem('veil-token', t)", token)
        page.reload()
        page.fill("#layer", "1")
        page.select_option("#states", "keys")
        page.dispatch_event("#states", "change")
        page.wait_for_selector('#setup-text:has-text("block 1\'s cached keys")', timeout=30_000)
        page.click("#setup")
        page.wait_for_selector("#stage:has-text('Setup done')", timeout=120_000)
        page.fill("#text", "Alice Smith, 12 Baker St")
        page.click("#start")
        page.wait_for_selector("#stage:has-text('Done.')", timeout=60_000)
        assert page.locator("#tokens .tok.flagged").count() == 0
        spans = page.locator("#tokens .tok")
        assert "".join(spans.all_inner_texts()) == "Alice Smith, 12 Baker St"


def test_page_lists_running_jobs_and_reattaches(server):
    """A job started elsewhere is listed when the page opens; Follow shows its progress."""
    import httpx

    base, token = server
    auth = {"Authorization": f"Bearer {token}"}
    body = {"text": "The prime minister", "method": "gradient", "steps": 100000, "seed": 1}
    job = httpx.post(f"{base}/v1/audit/inversion", json=body, headers=auth).json()["id"]
    try:
        with _audit_page(base) as page:
            page.evaluate("t => localStorage.setItem('veil-token', t)", token)
            page.reload()
            row = page.locator("#jobs tbody tr", has_text=job)
            row.wait_for(timeout=20_000)
            row.locator("button", has_text="Follow").click()
            page.wait_for_selector("#stage:has-text('Inverting')", timeout=20_000)
            page.click("#cancel")
            page.wait_for_selector("#stage:has-text('Cancelled.')", timeout=20_000)
    finally:
        httpx.delete(f"{base}/v1/audit/inversion/{job}", headers=auth)


def test_page_without_token_shows_the_servers_message(server):
    """With no token stored, the page shows the 401 message instead of failing silently."""
    base, _ = server
    with _audit_page(base) as page:
        page.fill("#text", "Sydney")
        page.click("#start")
        page.wait_for_selector("#error:not([hidden])", timeout=20_000)
        assert "token" in page.inner_text("#error")
