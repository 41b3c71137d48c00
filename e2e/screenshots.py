"""Screenshots for the docs: the popup, the options page and a protected send.

    python -m e2e.screenshots --out docs/extension

Drives the built extension in headless Chromium against the fixture pages
(the same set-up as the e2e tests) and writes popup.png, options.png and
protected-send.png.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from e2e.harness import EXTENSION, FIXTURES, Browser, build_all, type_prompt, wait_for_records
from e2e.recorder import Recorder

DRAFT = (
    "Patient Maria Keller, 54, was seen on Tuesday for chest pain; her husband Tom "
    "(0176 5551234) asks whether she can fly next week. I am 52 years old and weigh 81 kg."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/extension"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    build_all()
    recorder = Recorder(FIXTURES).start()
    try:
        with sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
            browser = Browser(p, EXTENSION, Path(tmp) / "profile", recorder)
            try:
                browser.wait_core(timeout=120)
                # RootGuard set up through the options page, "both" mode on ChatGPT.
                options = browser.options()
                for name, value in {"age": 52, "weight_kg": 81, "height_cm": 175}.items():
                    options.fill(f"input[data-true={name}]", str(value))
                options.click("#rg-save")
                options.wait_for_selector("td[data-noisy=age]:not(:empty)", timeout=20000)
                options.close()

                site = browser.open_site("chatgpt.com")
                type_prompt(site, "chatgpt.com", DRAFT)
                tab = browser.evaluate(
                    "async () => (await chrome.tabs.query({url: 'https://chatgpt.com/*'}))[0].id"
                )
                popup = browser.ctx.new_page()
                popup.set_viewport_size({"width": 400, "height": 760})
                popup.goto(browser.url(f"popup.html?url=https%3A%2F%2Fchatgpt.com%2F&tab={tab}"))
                popup.wait_for_selector("body[data-ready=true]")
                popup.check("input[name=mode][value=both]")
                popup.wait_for_selector("#preview:not(:empty)")
                popup.wait_for_timeout(600)
                popup.screenshot(path=str(args.out / "popup.png"), full_page=True)
                popup.close()

                site.bring_to_front()
                site.click("#prompt-textarea")
                site.keyboard.press("Enter")
                wait_for_records(site, recorder)
                site.wait_for_selector("veil-notice[data-kind=protected]", state="attached")
                site.wait_for_timeout(300)
                site.screenshot(path=str(args.out / "protected-send.png"))

                options = browser.options()
                options.set_viewport_size({"width": 1200, "height": 900})
                options.select_option("#history-site", "chatgpt")
                options.wait_for_selector("#history-table tbody tr")
                options.screenshot(path=str(args.out / "options.png"), full_page=True)
            finally:
                browser.close()
    finally:
        recorder.stop()
    print(f"wrote {args.out}/popup.png, options.png, protected-send.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
