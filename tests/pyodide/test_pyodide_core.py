"""py_core's stdlib-only checks, run inside Pyodide 314 under Node (no browser)."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_core_checks_pass_in_pyodide() -> None:
    """Every tests/py_core/*_checks.py module passes inside Pyodide."""
    node = shutil.which("node")
    assert node, "Node.js is required (scripts/setup.sh installs the npm packages)"
    assert (ROOT / "node_modules" / "pyodide").is_dir(), "run `npm ci` first (scripts/setup.sh)"
    modules = sorted(
        f"tests.py_core.{path.stem}"
        for path in (ROOT / "tests" / "py_core").glob("*_checks.py")
        if not path.name.startswith("test_")
    )
    proc = subprocess.run(
        [node, str(ROOT / "tests" / "pyodide" / "run_checks.mjs"), *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checks passed" in proc.stdout
