"""Measure the privacy core's start in Chromium (issue 27, point 5): not a test.

    python -m e2e.measure_start [--runs 3]

For each run, a fresh profile: the first start after install (cold: no memory
snapshot yet), then the browser closed and started again on the same profile
(the start after a browser restart: from the snapshot once one was made), and
then, with the core running, the service worker stopped the way Chrome stops
an idle one and a preview asked for (warm: the worker wakes, the core is
there). Prints each figure as the offscreen page reports it (coreStatus.ms,
from its document's start) and as the browser saw it (from launch to ready),
and the preview's round trip.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from e2e.harness import EXTENSION, FIXTURES, Browser, build_all
from e2e.recorder import Recorder


def core_status(browser: Browser, timeout: float = 180.0) -> dict:
    """The core's status once ready, read in the service worker.

    (Read in the service worker, not an extension page: before the core moved into
    the offscreen page's module worker, a cold boot kept every extension page's main
    thread busy for seconds.)
    """
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = browser.sw().evaluate("() => chrome.storage.session.get('coreStatus')")
        status = dict(status.get("coreStatus") or {})
        if status.get("state") in ("ready", "error"):
            return status
        time.sleep(0.05)
    raise TimeoutError(f"the core did not report within {timeout} s")


def launch(p, profile: Path, recorder: Recorder) -> tuple[Browser, dict, float]:
    started = time.time()
    browser = Browser(p, EXTENSION, profile, recorder)
    status = core_status(browser)
    return browser, status, time.time() - started


def preview_ms(browser: Browser) -> float:
    started = time.time()
    reply = browser.evaluate(
        """() => chrome.runtime.sendMessage({type: 'preview', target: 'background',
             data: {siteId: 'chatgpt', text: 'Patient Maria Keller, 52, was admitted on Tuesday.'}})"""
    )
    assert reply["ok"], reply
    return (time.time() - started) * 1000


def one_run(p, recorder: Recorder) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "profile"
        browser, cold, cold_wall = launch(p, profile, recorder)
        time.sleep(3)  # let the snapshot be written
        browser.close()
        browser, restart, restart_wall = launch(p, profile, recorder)
        preview_ms(browser)  # the core answers once
        browser.stop_service_worker()
        time.sleep(1)
        warm = preview_ms(browser)
        browser.close()
    return {
        "cold_ms": cold.get("ms"),
        "cold_wall_s": round(cold_wall, 2),
        "cold_phases": cold.get("phases"),
        "restart_ms": restart.get("ms"),
        "restart_from_snapshot": restart.get("fromSnapshot"),
        "restart_wall_s": round(restart_wall, 2),
        "restart_phases": restart.get("phases"),
        "warm_preview_ms": round(warm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    build_all()
    recorder = Recorder(FIXTURES).start()
    runs = []
    try:
        with sync_playwright() as p:
            for i in range(args.runs):
                runs.append(one_run(p, recorder))
                print(json.dumps({"run": i + 1, **runs[-1]}))
    finally:
        recorder.stop()
    for key in ("cold_ms", "restart_ms", "warm_preview_ms"):
        values = [r[key] for r in runs if isinstance(r[key], (int, float))]
        if values:
            print(
                f"{key}: median {statistics.median(values):.0f}, min {min(values):.0f}, max {max(values):.0f}"
            )


if __name__ == "__main__":
    main()
