"""Every registered evaluation follows the contract of evals/common.py."""

from __future__ import annotations

import dataclasses
import importlib
import shutil
from pathlib import Path

import pytest

from companion.cli import build_parser, main
from evals import common
from evals.cli import EVALUATIONS

NAMES = sorted(EVALUATIONS)


@pytest.mark.parametrize("name", NAMES)
def test_smoke_and_full_are_frozen_configs_of_one_type(name: str) -> None:
    """SMOKE and FULL are frozen dataclass instances of one type, told apart by .smoke."""
    module = importlib.import_module(EVALUATIONS[name])
    smoke, full = module.SMOKE, module.FULL
    assert type(smoke) is type(full) and dataclasses.is_dataclass(smoke)
    assert type(smoke).__dataclass_params__.frozen
    assert smoke.smoke is True and full.smoke is False


@pytest.mark.parametrize("name", NAMES)
def test_out_is_required(name: str, capsys) -> None:
    """A run without --out exits 2 and says --out is required."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["eval", name, "--smoke"])
    assert exit_info.value.code == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize("name", NAMES)
def test_every_evaluation_has_the_render_flag(name: str) -> None:
    """--render-only parses the same way everywhere and runs through common.main."""
    module = importlib.import_module(EVALUATIONS[name])
    args = build_parser().parse_args(["eval", name, common.RENDER_FLAG, "--out", "x"])
    assert args.render_only and not args.smoke and args.out == Path("x")
    assert args.func.func is common.main and args.func.args == (module,)


@pytest.mark.parametrize("name", NAMES)
def test_render_without_results_exits_2(name: str, tmp_path: Path, capsys) -> None:
    """Re-rendering a folder with no results.json is refused with a clear message."""
    assert main(["eval", name, common.RENDER_FLAG, "--out", str(tmp_path)]) == 2
    assert "results.json" in capsys.readouterr().err
    assert not (tmp_path / common.REPORT).exists()


@pytest.mark.parametrize("name", NAMES)
def test_committed_results_render_to_report_md_without_paths(name: str, tmp_path: Path) -> None:
    """The committed docs/NAME/results.json re-renders to report.md, naming no local path."""
    shutil.copy(common.ROOT / "docs" / name / common.RESULTS, tmp_path / common.RESULTS)
    assert main(["eval", name, common.RENDER_FLAG, "--out", str(tmp_path)]) == 0
    report = (tmp_path / common.REPORT).read_text(encoding="utf-8")
    assert report.startswith("# ")
    for forbidden in (str(common.ROOT), str(tmp_path), "site-packages", "/home/"):
        assert forbidden not in report
    committed = (common.ROOT / "docs" / name / common.REPORT).read_text(encoding="utf-8")
    assert "site-packages" not in committed and str(common.ROOT) not in committed
