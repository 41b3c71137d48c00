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
) -> tuple[int | str | None, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code: int | str | None
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


# ---------------------------------------------------------------- RootGuard modes

PROMPT = "I am 52 years old and weigh 81 kg."


def _files(tmp_path: Path, values: dict[str, float] | None = None) -> dict[str, Path]:
    paths = {"values": tmp_path / "values.json", "state": tmp_path / "state.json"}
    paths["values"].write_text(json.dumps(values or {"age": 52, "weight_kg": 81}), "utf-8")
    return paths


def _rg_argv(mode: str, paths: dict[str, Path], *extra: str) -> list[str]:
    files = ["--values", str(paths["values"]), "--state", str(paths["state"])]
    return ["perturb", "--mode", mode, *files, *extra]


def test_numbers_mode_creates_the_state_once_and_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """First run draws and saves the state (said on stderr); later runs send the same values."""
    from py_core.rootguard import api

    paths = _files(tmp_path)
    code, first, err = _run(_rg_argv("numbers", paths), PROMPT, monkeypatch, capsys)
    assert code == 0 and "sanitized once" in err and str(paths["state"]) in err
    state = json.loads(paths["state"].read_text("utf-8"))
    values = {"age": 52, "weight_kg": 81}
    assert first == api.protect_text(PROMPT, api.DEFAULT_PROFILE, values, state)["text"]
    saved = paths["state"].read_bytes()
    for _ in range(2):
        code, again, err = _run(_rg_argv("numbers", paths), PROMPT, monkeypatch, capsys)
        assert (code, again, err) == (0, first, "")
        assert paths["state"].read_bytes() == saved  # nothing drawn, nothing written


def test_a_value_mentioned_first_later_is_drawn_once_and_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value added to --values after the state was made is drawn on first mention and kept."""
    paths = _files(tmp_path, {"age": 52})
    assert _run(_rg_argv("numbers", paths), PROMPT, monkeypatch, capsys)[0] == 0
    before = json.loads(paths["state"].read_text("utf-8"))
    paths["values"].write_text(json.dumps({"age": 52, "weight_kg": 81}), "utf-8")
    code, first, _ = _run(_rg_argv("numbers", paths), PROMPT, monkeypatch, capsys)
    after = json.loads(paths["state"].read_text("utf-8"))
    assert code == 0 and "weight_kg" in after["roots"] and "weight_kg" not in before["roots"]
    assert after["roots"]["age"] == before["roots"]["age"]
    assert _run(_rg_argv("numbers", paths), PROMPT, monkeypatch, capsys)[1] == first


def test_both_mode_perturbs_around_the_noisy_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both: header + k-RR text; the receipt lists RootGuard's replacements, left unperturbed."""
    paths = _files(tmp_path)
    argv = _rg_argv("both", paths, "-e", "1", "--receipt")
    code, out, _ = _run(argv, PROMPT, monkeypatch, capsys)
    report = json.loads(out)
    assert code == 0 and set(report) == {"receipt", "replacements"}
    assert {r["name"] for r in report["replacements"]} == {"age", "weight_kg"}
    protected = sum(len(r["replacement"]) for r in report["replacements"])
    assert report["receipt"]["chars_protected"] == protected
    code, out, _ = _run(_rg_argv("both", paths, "-e", "1"), PROMPT, monkeypatch, capsys)
    assert code == 0 and out.startswith(DEFAULT_HEADER)
    sent = out[len(DEFAULT_HEADER) :]
    for r in report["replacements"]:  # the same cached values, at the same places
        assert sent[r["start"] : r["end"]] == r["replacement"]


def test_numbers_mode_receipt_has_no_k_rr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Numbers mode has no k-RR receipt, only the replacements."""
    paths = _files(tmp_path)
    code, out, _ = _run(_rg_argv("numbers", paths, "--receipt"), PROMPT, monkeypatch, capsys)
    report = json.loads(out)
    assert code == 0 and report["receipt"] is None and len(report["replacements"]) == 2


def test_a_custom_profile_file_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--profile reads a RootGuard profile; its roots are the ones replaced."""
    import copy

    from py_core.rootguard import api

    profile = copy.deepcopy(api.DEFAULT_PROFILE)
    profile["values"] = {"age": profile["values"]["age"]}
    (tmp_path / "profile.json").write_text(json.dumps(profile), "utf-8")
    paths = _files(tmp_path, {"age": 52})
    argv = _rg_argv("numbers", paths, "--profile", str(tmp_path / "profile.json"), "--receipt")
    code, out, err = _run(argv, PROMPT, monkeypatch, capsys)
    assert code == 0, err
    assert [r["name"] for r in json.loads(out)["replacements"]] == ["age"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--mode", "numbers"], "--values FILE"),
        (["--mode", "both", "-e", "2", "--values", "{values}"], "--state FILE"),
        (["-e", "2", "--state", "{state}"], "--state: RootGuard's files"),
        (["--mode", "both", "--values", "{values}", "--state", "{state}"], "--epsilon"),
        (["--mode", "numbers", "-e", "2", "--values", "{values}", "--state", "{state}"], "-e"),
        (
            ["--mode", "numbers", "--no-header", "--values", "{values}", "--state", "{state}"],
            "no k-RR",
        ),
        (["--mode", "numbers", "--values", "{bad}", "--state", "{state}"], "not JSON"),
        (["--mode", "numbers", "--values", "{list}", "--state", "{state}"], "JSON object"),
        (
            ["--mode", "numbers", "--values", "{far}", "--state", "{state}"],
            "outside its public domain",
        ),
        (["--mode", "numbers", "--values", "{values}", "--state", "{bad}"], "not JSON"),
        (
            [
                "--mode",
                "numbers",
                "--values",
                "{values}",
                "--profile",
                "{list}",
                "--state",
                "{state}",
            ],
            "JSON object",
        ),
        (
            [
                "--mode",
                "numbers",
                "--values",
                "{values}",
                "--profile",
                "{empty}",
                "--state",
                "{state}",
            ],
            "has problems",
        ),
        (["--mode", "emoji"], "invalid choice"),
    ],
)
def test_bad_rootguard_input_exits_2_with_one_line(
    extra: list[str],
    needle: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Missing, unused or malformed RootGuard files: exit 2, one line, no state file written."""
    files = {
        "values": '{"age": 52}',
        "bad": "{not json",
        "list": "[1, 2]",
        "far": '{"age": 500}',
        "empty": '{"values": {}}',
    }
    names = {"state": str(tmp_path / "state.json")}
    for name, content in files.items():
        (tmp_path / f"{name}.json").write_text(content, "utf-8")
        names[name] = str(tmp_path / f"{name}.json")
    argv = ["perturb", *(arg.format(**names) for arg in extra)]
    code, out, err = _run(argv, PROMPT, monkeypatch, capsys)
    assert code == 2 and out == ""
    assert needle in err and err.strip().count("\n") == 0, err
    assert not (tmp_path / "state.json").exists()


@pytest.mark.parametrize("damage", ["checksum", "profile"])
def test_a_state_that_does_not_fit_is_refused_and_kept(
    damage: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A tampered state, or one drawn under another profile: exit 2, one line, file untouched."""
    import copy

    from py_core.rootguard import api

    paths = _files(tmp_path)
    assert _run(_rg_argv("numbers", paths), PROMPT, monkeypatch, capsys)[0] == 0
    extra: list[str] = []
    if damage == "checksum":
        state = json.loads(paths["state"].read_text("utf-8"))
        state["roots"]["age"]["value"] = 1
        paths["state"].write_text(json.dumps(state), "utf-8")
    else:
        profile = copy.deepcopy(api.DEFAULT_PROFILE)
        profile["values"]["age"]["domain"] = [10, 100]
        (tmp_path / "profile.json").write_text(json.dumps(profile), "utf-8")
        extra = ["--profile", str(tmp_path / "profile.json")]
    saved = paths["state"].read_bytes()
    code, out, err = _run(_rg_argv("numbers", paths, *extra), PROMPT, monkeypatch, capsys)
    assert code == 2 and out == "" and "nothing was re-drawn" in err
    assert err.strip().count("\n") == 0, err
    assert paths["state"].read_bytes() == saved


def test_the_word_memo_file_sends_a_repeated_word_as_its_first_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--memo: created on first use, a repeated word is sent as before, the ledger counts once."""
    memo = tmp_path / "memo.json"
    argv = ["perturb", "-e", "4", "--no-header", "--memo", str(memo)]
    code, first, _ = _run(argv, "Ada Lovelace", monkeypatch, capsys)
    assert code == 0 and memo.exists()
    outs = {_run(argv, "Lovelace Ada", monkeypatch, capsys)[1] for _ in range(10)}
    assert outs == {" ".join(reversed(first.split(" ")))}
    saved = json.loads(memo.read_text())
    assert saved["format"] == "veil.word_memo" and set(saved["words"]) == {"Ada", "Lovelace"}
    assert (saved["ledger"]["words"], saved["ledger"]["chars"]) == (2, 11)
    # Not a memo: refused, the file is kept as it was.
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    code, _, err = _run(["perturb", "-e", "4", "--memo", str(bad)], "x", monkeypatch, capsys)
    assert code == 2 and "not a Veil word memo" in err
    assert bad.read_text() == '{"format": "other"}'
    code, _, err = _run(
        [
            "perturb",
            "--mode",
            "numbers",
            "--values",
            str(memo),
            "--state",
            str(tmp_path / "s"),
            "--memo",
            str(memo),
        ],
        "x",
        monkeypatch,
        capsys,
    )
    assert code == 2 and "--memo" in err
