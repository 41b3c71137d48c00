"""The core's first start runs in the offscreen page's module worker (issue 27, point 5).

Every page of the extension shares one renderer and its main thread; the cold
boot (WebAssembly compile, CPython's start, py_core's import, the snapshot) used
to run on it and froze the popup for seconds. On a fresh profile the popup is
opened at once: its timers keep running every few hundred ms during the whole
boot, and the core's line shows the boot's steps with the time so far, then ready.
(The start-up figures themselves: bench/core_start_bench.py.)
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from playwright.sync_api import Playwright

from e2e.harness import Browser
from e2e.recorder import Recorder

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

SINCE = re.compile(r" (\d+\.\d) s$")  # the boot's time so far, at the end of its line

TICKS = """() => { window.__ticks = []; setInterval(() => window.__ticks.push(performance.now()), 100);
                   const core = document.querySelector('#core'); window.__lines = [core.textContent];
                   new MutationObserver(() => window.__lines.push(core.textContent))
                     .observe(core, {childList: true, characterData: true, subtree: true}); }"""


def test_the_popup_stays_live_and_shows_progress_during_the_first_start(
    playwright: Playwright, built: Path, recorder: Recorder, tmp_path: Path
) -> None:
    browser = Browser(playwright, built, tmp_path / "profile", recorder)
    try:
        popup = browser.popup("chatgpt.com")
        popup.evaluate(TICKS)
        popup.wait_for_function(
            "() => document.querySelector('#core').dataset.state === 'ready'", timeout=180_000
        )
        ready_at = popup.evaluate("() => performance.now()")
        status = browser.core_status()
        assert status["state"] == "ready" and status.get("worker") is True, status
        assert status["fromSnapshot"] is False
        ticks = popup.evaluate("() => window.__ticks")
        lines = popup.evaluate("() => window.__lines")
        booting = [line for line in lines if "starting…" in line]
        during = [t for t in ticks if t <= ready_at]
        gaps = [b - a for a, b in itertools.pairwise([*during, ready_at])]
        boot_ms = ready_at - ticks[0]
        # The cold boot takes real time (1 s idle, up to 5 s on a loaded machine; the popup
        # opens some 0.3 s into it) -- or this test shows nothing; through all of it the
        # popup's own 100 ms timer kept running: at least half its ticks came, and it never
        # stalled for 2 s.
        assert boot_ms > 300, (boot_ms, status.get("phases"))
        assert len(during) >= boot_ms / 100 / 2, (len(during), boot_ms, status.get("phases"))
        assert max(gaps) < 2000, (max(gaps), status.get("phases"))
        # Its line said the core was starting (the line as the popup opened counts: the
        # boot may end before the next redraw), with the time growing, then ready. It is
        # redrawn every 500 ms and at once when the step changes, so the popup shows one
        # timed line per half second it saw of the boot (one or two on an idle machine, ten
        # on a loaded one), the time never going back (a new step may come within the same
        # tenth of a second as the line before it: same time, other step); once it watched
        # for a second, a line named the step.
        assert booting, (boot_ms, lines[:10])
        timed = [
            (float(m.group(1)), line)
            for line in dict.fromkeys(booting)
            if (m := SINCE.search(line))
        ]
        for (t0, line0), (t1, line1) in itertools.pairwise(timed):
            assert t1 >= t0, lines[:10]
            if t1 == t0:  # the same moment twice: only as a new step is shown
                assert SINCE.sub("", line1) != SINCE.sub("", line0), lines[:10]
        shown = sorted({t for t, _ in timed})
        assert len(shown) >= min(3, int(boot_ms // 500)), (boot_ms, lines[:10])
        if boot_ms >= 1000:
            named = [line for line in booting if "Veil's Python code" in line or "Pyodide" in line]
            assert named, (boot_ms, booting)
        assert popup.inner_text("#core").startswith("Privacy core ready"), popup.inner_text("#core")
    finally:
        browser.close()
