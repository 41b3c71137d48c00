"""The extension's settings use py_core's modes, ε limits and header values (one definition)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from py_core import protect

ROOT = Path(__file__).resolve().parents[2]
POPUP_HTML = ROOT / "extension" / "static" / "popup.html"

_DUMP = """
import * as s from "./extension/src/settings.js";
console.log(JSON.stringify({
  modes: s.MODES, defaultMode: s.DEFAULT_MODE, siteMode: s.DEFAULT_SITE.mode,
  min: s.EPSILON_MIN, max: s.EPSILON_MAX, step: s.EPSILON_STEP, default: s.DEFAULT_EPSILON,
  siteEpsilon: s.DEFAULT_SITE.epsilon, headerDefault: s.HEADER_DEFAULT, headerNone: s.HEADER_NONE,
  globalHeader: s.defaultSettings().header,
}));
"""


def _settings_js() -> dict[str, object]:
    node = shutil.which("node")
    assert node, "Node.js is required (scripts/setup.sh installs it)"
    proc = subprocess.run(
        [node, "--input-type=module", "-e", _DUMP],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def test_settings_js_constants_equal_py_core() -> None:
    """settings.js exports exactly py_core.protect's modes, ε limits and header values."""
    js = _settings_js()
    assert js["modes"] == list(protect.MODE_NAMES)
    assert js["defaultMode"] == js["siteMode"] == protect.DEFAULT_MODE
    eps = protect.EPSILON
    assert (js["min"], js["max"], js["step"], js["default"]) == (
        eps.min,
        eps.max,
        eps.step,
        eps.default,
    )
    assert js["siteEpsilon"] == eps.default
    assert (js["headerDefault"], js["headerNone"]) == (protect.HEADER_DEFAULT, protect.HEADER_NONE)
    assert js["globalHeader"] == protect.HEADER_DEFAULT  # a new install sends py_core's header


def test_popup_offers_py_core_modes_and_hard_codes_no_epsilon_limit() -> None:
    """The popup's mode buttons are py_core's modes; its ε slider takes its limits from settings.js."""
    html = POPUP_HTML.read_text(encoding="utf-8")
    radios = re.findall(r'<input type="radio" name="mode" value="([^"]+)"', html)
    assert radios == list(protect.MODE_NAMES)
    slider = re.search(r'<input type="range" id="epsilon"[^>]*>', html)
    assert slider is not None
    assert not re.search(r"\b(min|max|step)=", slider.group(0)), slider.group(0)
