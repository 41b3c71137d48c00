"""RootGuard on NHANES: target utility, reconstruction and allocation (docs/methods/rootguard.md).

``veil eval rootguard --out DIR [--smoke]`` runs the three experiments of
:mod:`evals.rootguard.experiment` on the population of
:mod:`evals.rootguard.data` and writes ``report.md``, ``results.json`` and PNG
plots to ``DIR`` (the contract of :mod:`evals.common`).  The committed full
report is regenerated with::

    veil eval rootguard --out docs/rootguard

(about 15 minutes on 2 CPU cores); ``SMOKE`` runs a small subsample in well
under a minute and is what CI runs.

``--agents`` runs the agents evaluation instead (:mod:`evals.rootguard.agents`,
RQ4): scripted agent sessions through ``veil mcp proxy`` to recording MCP
services, with its own ``AGENTS_SMOKE``/``AGENTS_FULL``::

    veil eval rootguard --agents --out docs/rootguard/agents
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evals.rootguard.config import AGENTS_FULL, AGENTS_SMOKE, FULL, SMOKE, AgentsConfig, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "render"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agents",
        action="store_true",
        help="the agents evaluation instead (RQ4): scripted agent sessions through veil mcp "
        "proxy to recording MCP services (docs/rootguard/agents; FULL about 10 min of CPU)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help=f"seed of the experiment RNGs (default {FULL.seed})"
    )
    parser.add_argument(
        "--people",
        type=int,
        default=None,
        help=f"people to use (0 = all; default: all, smoke {SMOKE.people})",
    )


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    if getattr(args, "agents", False):
        return evaluate_agents(args, AGENTS_SMOKE if config.smoke else AGENTS_FULL)
    import numpy as np

    from evals import common
    from evals.rootguard import experiment as ex
    from evals.rootguard.data import ASSUMPTIONS, load_population
    from evals.rootguard.report import write_report

    config = common.config_for(args, config, ["seed", "people"])
    started = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seed = config.seed
    population = load_population(ex.domains(), seed)
    means = {k: float(v.mean()) for k, v in population.values.items()}
    sds = {k: float(v.std()) for k, v in population.values.items()}
    order = np.random.default_rng(seed).permutation(population.size)
    people = config.people or population.size
    pop = population.subset(order[:people])
    rec_pop = population.subset(order[: config.reconstruction_people])
    recorded = asdict(config)
    recorded["people"] = people
    results: dict[str, Any] = {
        "config": recorded,
        "environment": common.environment(),
        "population": {
            "source_rows": population.source_rows,
            "eligible": population.size,
            "used": pop.size,
            "female_share": float(pop.female.mean()),
            "means": means,
            "sds": sds,
        },
        "assumptions": list(ASSUMPTIONS),
        "settings": ex.SETTINGS,
        "utility": [],
        "reconstruction": [],
        "allocation": {},
        "timings": {},
    }
    for i, setting in enumerate(ex.SETTINGS):
        t0 = time.time()
        results["utility"] += ex.run_utility(
            pop, setting, config.epsilons, config.reps[setting], seed + 10 * i, means
        )
        t1 = time.time()
        results["reconstruction"] += ex.run_reconstruction(
            rec_pop, setting, 0.1, config.qs, seed + 10 * i + 1, means, sds
        )
        t2 = time.time()
        results["allocation"][setting] = ex.run_allocation_fit(
            pop,
            setting,
            config.epsilons,
            config.fit_reps,
            seed + 10 * i + 2,
            means,
            config.fit_grid,
        )
        t3 = time.time()
        results["timings"][setting] = {
            "utility_s": t1 - t0,
            "reconstruction_s": t2 - t1,
            "allocation_s": t3 - t2,
        }
        print(
            f"rootguard eval: {setting}: utility {t1 - t0:.0f} s, reconstruction {t2 - t1:.0f} s, "
            f"allocation {t3 - t2:.0f} s",
            flush=True,
        )
    results["elapsed_s"] = time.time() - started
    common.write_results(out, results)
    path = write_report(results, out)
    print(f"rootguard eval: done in {time.time() - started:.0f} s")
    return path


def evaluate_agents(args: argparse.Namespace, config: AgentsConfig) -> Path:
    """``--agents``: scripted agent sessions through the MCP proxy (evals.rootguard.agents)."""
    import numpy as np

    from evals import common
    from evals.rootguard import experiment as ex
    from evals.rootguard.agents import run_agents
    from evals.rootguard.agents_report import write_report
    from evals.rootguard.data import load_population

    config = common.config_for(args, config, ["seed", "people"])
    started = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    population = load_population(ex.domains(), config.seed)
    means = {k: float(v.mean()) for k, v in population.values.items()}
    sds = {k: float(v.std()) for k, v in population.values.items()}
    order = np.random.default_rng(config.seed).permutation(population.size)
    pop = population.subset(order[: config.people])
    results: dict[str, Any] = {
        "kind": "agents",
        "config": asdict(config),
        "command": common.command("rootguard", out, "--agents", smoke=config.smoke),
        "environment": common.environment(),
    }
    results |= run_agents(
        pop, config.epsilons, config.turns, config.qs, config.seed, means, sds, config.setting
    )
    results["elapsed_s"] = time.time() - started
    common.write_results(out, results)
    path = write_report(results, out)
    print(
        f"rootguard agents eval: {results['totals']['sessions']} sessions, "
        f"{results['totals']['failures']} compliance failures, {results['cpu_s']:.0f} s CPU"
    )
    return path


def render(out: Path) -> Path:
    from evals import common

    results = common.read_results(out)
    if results.get("kind") == "agents":
        from evals.rootguard.agents_report import write_report as write_agents

        return write_agents(results, out)
    from evals.rootguard.report import write_report

    return write_report(results, out)
