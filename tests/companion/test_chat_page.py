"""The chat page in real Chromium against a real companion (uvicorn on a free port)."""

from __future__ import annotations

import os
import shutil

import pytest

from companion.settings import veil_home
from tests.companion.fakes import free_port, serve_http


@pytest.mark.slow
def test_chat_page_uploads_asks_and_shows_the_receipt(tmp_path):
    """Token, upload, a streamed answer with its receipt and citation, and the audit link."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed")
    from playwright.sync_api import sync_playwright

    from companion.app import create_app
    from companion.settings import Settings

    models = str(veil_home() / "models")
    if os.path.isdir(models):
        os.symlink(models, tmp_path / "models")
    port = free_port()
    app = create_app(Settings(home=tmp_path, port=port))
    with serve_http(app, port, timeout=120):
        note = tmp_path / "visit.txt"
        note.write_text("Doctor: for the sprained ankle, rest, ice and ibuprofen 400 mg.")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.fill("#token", app.state.token)
            page.click("#save-token")
            page.wait_for_selector("#token-state:has-text('Connected')")
            page.fill("#new-collection", "visits")
            page.set_input_files("#files", str(note))
            page.click("#upload")
            page.wait_for_selector("#doc-list li:has-text('visit.txt')", timeout=60_000)
            page.fill("#max-tokens", "12")
            page.fill("#prompt", "What should I take for the ankle?")
            page.click("#send")
            page.wait_for_selector(".msg.assistant .receipt", timeout=120_000)
            headline = page.inner_text(".msg.assistant .receipt .receipt-headline")
            # the owner's default: their own documents read plainly (the receipt says so)
            assert headline.startswith("None"), headline
            first_kind = page.get_attribute(".msg.assistant .receipt", "data-kind")
            assert "visit.txt" in page.inner_text(".msg.assistant .citations")
            assert page.get_attribute("nav a[href='/static/audit.html']", "href")
            # The menu is the registry; each kind of receipt is rendered distinctly.
            from companion.decoding.registry import DEFENSES, get_defense

            options = page.eval_on_selector_all("#defense option", "os => os.map(o => o.value)")
            assert options == list(DEFENSES)
            shots = os.environ.get("VEIL_SCREENSHOTS")
            kinds = {"none": first_kind}
            for n, name in enumerate(("bounded", "static", "pad", "copy_aware"), start=2):
                page.select_option("#defense", name)
                page.fill("#prompt", "What should I take for the ankle?")
                page.click("#send")
                box = f".msg.assistant:nth-of-type({2 * n}) .receipt"
                # a formal defense that will charge the document asks first (budget.js)
                asked = "#budget-confirm-dialog[open]"
                page.wait_for_selector(f"{box}, {asked}", timeout=120_000)
                if page.locator(asked).count():
                    page.click(f"{asked} .budget-spend")
                page.wait_for_selector(box, timeout=120_000)
                text = page.inner_text(f"{box} .receipt-headline")
                assert text.startswith(get_defense(name).label), text
                kinds[name] = page.get_attribute(box, "data-kind")
                if shots:
                    page.click(f"{box} summary")
                    page.locator(box).screenshot(path=os.path.join(shots, f"receipt-{name}.png"))
            assert kinds["bounded"] == "meaningful" and kinds["static"] == "weak"
            assert kinds["pad"] in ("heuristic", "unprotected") and kinds["none"] == "unprotected"
            assert kinds["copy_aware"] in ("heuristic", "unprotected")
            browser.close()
