"""RootGuard on NHANES: target utility, reconstruction and allocation (SPEC §3).

``veil eval rootguard --out DIR [--smoke]`` runs the three experiments of
:mod:`evals.rootguard.experiment` on the population of
:mod:`evals.rootguard.data` and writes ``report.md``, ``results.json`` and PNG
plots to ``DIR``.  The committed full report is regenerated with::

    python -m companion eval rootguard --out docs/rootguard

(about 15 minutes on 2 CPU cores); ``--smoke`` runs a small subsample in well
under a minute and is what CI runs.
"""

from __future__ import annotations

import argparse
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for report.md, results.json, plots")
    parser.add_argument("--smoke", action="store_true", help="small subsample (CI, < 60 s)")
    parser.add_argument("--seed", type=int, default=20260601, help="seed of the experiment RNGs")
    parser.add_argument(
        "--people", type=int, default=0, help="people to use (0 = all; smoke uses 150)"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite report.md and the plots from DIR/results.json without re-running",
    )


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    import numpy as np

    from evals.rootguard import experiment as ex
    from evals.rootguard.data import ASSUMPTIONS, load_population
    from evals.rootguard.report import write_report

    started = time.time()
    out = Path(args.out)
    if args.report_only:
        write_report(json.loads((out / "results.json").read_text()), out)
        print(f"rootguard eval: rewrote {out / 'report.md'}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    seed = int(args.seed)
    population = load_population(ex.domains(), seed)
    means = {k: float(v.mean()) for k, v in population.values.items()}
    sds = {k: float(v.std()) for k, v in population.values.items()}
    order = np.random.default_rng(seed).permutation(population.size)
    config: dict[str, Any]
    if args.smoke:
        config = {
            "people": args.people or 150,
            "reconstruction_people": 40,
            "epsilons": (0.1, 1.0),
            "reps": {"relative": 1, "default": 1, "domain": 1},
            "fit_reps": 1,
            "fit_grid": 17,
        }
    else:
        config = {
            "people": args.people or population.size,
            "reconstruction_people": 1500,
            "epsilons": (0.05, 0.1, 0.2, 0.5, 1.0),
            "reps": {"relative": 3, "default": 1, "domain": 1},
            "fit_reps": 4,
            "fit_grid": 65,
        }
    pop = population.subset(order[: config["people"]])
    rec_pop = population.subset(order[: config["reconstruction_people"]])
    qs = (1, 2, 4, 8, 16)
    results: dict[str, object] = {
        "config": {**config, "seed": seed, "smoke": bool(args.smoke), "qs": qs},
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
        results["utility"] += ex.run_utility(  # type: ignore[operator]
            pop, setting, config["epsilons"], config["reps"][setting], seed + 10 * i, means
        )
        t1 = time.time()
        results["reconstruction"] += ex.run_reconstruction(  # type: ignore[operator]
            rec_pop, setting, 0.1, qs, seed + 10 * i + 1, means, sds
        )
        t2 = time.time()
        results["allocation"][setting] = ex.run_allocation_fit(  # type: ignore[index]
            pop,
            setting,
            config["epsilons"],
            config["fit_reps"],
            seed + 10 * i + 2,
            means,
            config["fit_grid"],
        )
        t3 = time.time()
        results["timings"][setting] = {  # type: ignore[index]
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
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    write_report(results, out)
    print(f"rootguard eval: wrote {out / 'report.md'} in {time.time() - started:.0f} s")
    return 0
