"""The helpers every evaluation shares (evals/common.py)."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from evals import common
from py_core.errors import InvalidParameterError


def test_markdown_table_has_header_rule_and_rows() -> None:
    """A header row, a rule of one cell per column, then the rows, cells as str()."""
    text = common.markdown_table(["a", "b"], [[1, "x"], [2.5, None]])
    assert text == "| a | b |\n|---|---|\n| 1 | x |\n| 2.5 | None |"
    assert common.markdown_table(["only"], []) == "| only |\n|---|"


def test_results_round_trip_keeps_nan_and_numpy_scalars(tmp_path: Path) -> None:
    """write_results then read_results gives the data back; NaN stays NaN."""
    np = pytest.importorskip("numpy")
    path = common.write_results(tmp_path / "out", {"x": float("nan"), "y": np.float32(0.5)})
    assert path == tmp_path / "out" / common.RESULTS
    back = common.read_results(tmp_path / "out")
    assert math.isnan(back["x"]) and back["y"] == 0.5


def test_read_results_names_the_missing_file(tmp_path: Path) -> None:
    """Re-rendering without results.json is a clear InvalidParameterError (exit 2)."""
    with pytest.raises(InvalidParameterError, match=r"--render-only needs .*results\.json"):
        common.read_results(tmp_path)


def test_write_report_writes_report_md(tmp_path: Path) -> None:
    """Every evaluation's report has the same name."""
    path = common.write_report(tmp_path / "new", "# title\n")
    assert path.name == "report.md" and path.read_text() == "# title\n"


def test_save_figure_writes_the_png_and_returns_its_name(tmp_path: Path) -> None:
    """The plot helper saves under OUT with the Agg backend and closes the figure."""
    plt = common.pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    assert common.save_figure(fig, tmp_path, "line.png", dpi=50) == "line.png"
    assert (tmp_path / "line.png").read_bytes()[:4] == b"\x89PNG"
    assert not plt.fignum_exists(fig.number)


def test_model_identity_is_name_and_sha256_of_the_weights(tmp_path: Path) -> None:
    """A file is named by its file name and hashed whole; no directory appears."""
    weights = tmp_path / "deep" / "dir" / "tiny.gguf"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"weights" * 1000)
    identity = common.model_identity(weights)
    assert identity == {
        "name": "tiny.gguf",
        "sha256": hashlib.sha256(b"weights" * 1000).hexdigest(),
    }
    assert common.model_identity(weights, name="Tiny")["name"] == "Tiny"
    weights.write_bytes(b"other weights")
    assert common.model_identity(weights)["sha256"] == hashlib.sha256(b"other weights").hexdigest()
    assert str(tmp_path) not in common.describe_model(identity)


def test_model_identity_of_a_folder_hashes_its_weight_files(tmp_path: Path) -> None:
    """One weight file: its own sha256; several: a hash over theirs; no weights: refused."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"abc")
    assert common.model_identity(folder) == {
        "name": "model",
        "sha256": hashlib.sha256(b"abc").hexdigest(),
    }
    (folder / "model-2.safetensors").write_bytes(b"def")
    assert common.model_identity(folder)["sha256"] != hashlib.sha256(b"abc").hexdigest()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidParameterError, match="no weight files"):
        common.model_identity(empty)
    with pytest.raises(InvalidParameterError, match="no model at 'missing'"):
        common.model_identity(tmp_path / "missing")


def test_model_identity_reads_a_file_once() -> None:
    """The hash is cached per file, size and modification time."""
    path = Path(common.__file__)
    common.model_identity(path)
    hits = common._sha256.cache_info().hits
    common.model_identity(path)
    assert common._sha256.cache_info().hits == hits + 1


def test_environment_has_versions_and_no_paths() -> None:
    """Python/torch versions, CPU, threads, commit and start time; no absolute path."""
    env = common.environment(device="cpu")
    assert env["python"] and env["cpu_cores"] and env["started"].endswith("UTC")
    for value in env.values():
        assert not (isinstance(value, str) and ("/" in value or "\\" in value)), value
    line = common.describe_environment(env)
    assert f"Python {env['python']}" in line and "device cpu" in line
    assert common.describe_environment(None) == "" and common.describe_environment({}) == ""


def test_packaged_file_finds_data_inside_an_installed_package() -> None:
    """A file inside a package is found; a missing package or file is a clear error."""
    assert common.packaged_file("json", "decoder.py").name == "decoder.py"
    with pytest.raises(InvalidParameterError, match="not installed; pip install it"):
        common.packaged_file("no_such_package_here", "x", install="pip install it")
    with pytest.raises(InvalidParameterError, match=r"does not ship nothing\.txt"):
        common.packaged_file("json", "nothing.txt")


@pytest.mark.parametrize(
    ("out", "smoke", "expected"),
    [
        (common.ROOT / "docs" / "krr", False, "veil eval krr --out docs/krr"),
        (Path("/somewhere/else"), True, "veil eval krr --out DIR --smoke"),
    ],
)
def test_command_shows_out_without_this_machines_paths(out, smoke, expected) -> None:
    """Inside the repository --out is relative; outside it is DIR."""
    assert common.command("krr", out, smoke=smoke) == expected


def test_config_for_overrides_only_the_options_given() -> None:
    """Options left at None keep the configuration's value."""

    @dataclass(frozen=True)
    class Config:
        seed: int
        people: int

    args = argparse.Namespace(seed=None, people=7)
    assert common.config_for(args, Config(seed=1, people=2), ["seed", "people"]) == Config(1, 7)


def test_nan_to_none_walks_nested_values() -> None:
    """NaN becomes None in dicts and lists; other values are untouched."""
    assert common.nan_to_none({"a": [float("nan"), 1.0], "b": "x"}) == {"a": [None, 1.0], "b": "x"}
    assert json.dumps(common.nan_to_none([float("nan")])) == "[null]"
