"""`veil perturb`: output, receipt, seeds and exit codes."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from companion.cli import main
from py_core.sanitize import DEFAULT_HEADER

ROOT = Path(__file__).resolve().parents[2]


def _run(
    argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_prints_header_and_perturbed_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Default output is the restoration header plus a same-length perturbed text."""
    code, out, _ = _run(["perturb", "--epsilon", "3"], "hello world\n", monkeypatch, capsys)
    assert code == 0
    assert out.startswith(DEFAULT_HEADER) and len(out) == len(DEFAULT_HEADER) + len("hello world\n")
    assert out.endswith("\n") and out[len(DEFAULT_HEADER) + 5] == " "


def test_receipt_is_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--receipt prints the receipt as JSON."""
    code, out, _ = _run(["perturb", "-e", "2", "--receipt"], "abc de", monkeypatch, capsys)
    receipt = json.loads(out)
    assert code == 0 and receipt["chars_perturbed"] == 5 and receipt["epsilon_requested"] == 2.0


def test_seed_requires_insecure_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--seed alone is refused with exit 2; with --insecure-seed it warns and is reproducible."""
    code, _, err = _run(["perturb", "-e", "2", "--seed", "1"], "abc", monkeypatch, capsys)
    assert code == 2 and "--insecure-seed" in err and err.count("\n") == 1
    argv = ["perturb", "-e", "2", "--seed", "1", "--insecure-seed", "--no-header"]
    code, first, err = _run(argv, "reproducible", monkeypatch, capsys)
    assert code == 0 and "warning" in err
    assert _run(argv, "reproducible", monkeypatch, capsys)[1] == first


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["perturb", "-e", "-1"], "epsilon"),
        (["perturb", "-e", "nan"], "epsilon"),
        (["perturb", "-e", "abc"], "invalid float"),
        (["perturb"], "--epsilon"),
        (["perturb", "-e", "1", "/nonexistent/file.txt"], "no such file"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str],
    needle: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Bad input: exit code 2 and a one-line message saying what to fix."""
    code, out, err = _run(argv, "x", monkeypatch, capsys)
    assert code == 2 and out == ""
    assert needle in err and err.strip().count("\n") == 0


def test_console_entry_point_runs_as_module(tmp_path: Path) -> None:
    """`python -m companion perturb FILE` works in a fresh interpreter."""
    path = tmp_path / "prompt.txt"
    path.write_text("My name is Ada.", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "companion", "perturb", "-e", "5", "--no-header", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) == len("My name is Ada.")
