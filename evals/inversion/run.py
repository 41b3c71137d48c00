"""Run the inversion evaluation: each measurement is one step over the same window sets."""

from __future__ import annotations

import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evals import common
from evals.inversion.config import Config
from evals.inversion.data import allowed_tokens, window_sets
from evals.inversion.metrics import auroc, summarise


def evaluate(config: Config, out: Path, *, threads: int) -> dict[str, Any]:
    """Open the model (a tiny random one for the smoke run), run every step, return results."""
    if not config.tiny_model:
        from companion.audit.service import open_target, setup_with_bar

        target = open_target(config.model, threads=threads)
        return run_steps(target, config, setup=lambda: setup_with_bar(target, _setup(config)))
    from companion.audit.hidden import TargetModel
    from companion.audit.ranker import run_setup
    from companion.audit.tiny import make_tiny_model
    from companion.models import load_causal_lm

    with tempfile.TemporaryDirectory(prefix="veil-inversion-smoke-") as tmp, _veil_home(tmp):
        folder = make_tiny_model(Path(tmp) / "tiny")
        target = TargetModel(load_causal_lm(str(folder), device="cpu"))
        return run_steps(target, config, setup=lambda: run_setup(target, _setup(config)))


def _setup(config: Config) -> Any:
    """The thorough setup (the model's own samples, the full softmax): what the committed
    report measured; ``veil eval audit-models`` measures the quick default."""
    from companion.audit.ranker import SetupConfig

    return SetupConfig.thorough(**(config.setup or {}))


@contextmanager
def _veil_home(tmp: str) -> Iterator[None]:
    """Keep the smoke run's per-model caches out of the person's own VEIL_HOME."""
    old_home = os.environ.get("VEIL_HOME")
    os.environ["VEIL_HOME"] = str(Path(tmp) / "home")
    try:
        yield
    finally:
        if old_home is None:
            os.environ.pop("VEIL_HOME", None)
        else:
            os.environ["VEIL_HOME"] = old_home


def run_steps(target: Any, config: Config, *, setup: Callable[[], Any]) -> dict[str, Any]:
    rng = random.Random(config.seed)
    report: dict[str, Any] = {
        "model": target.identity,
        "model_file": common.model_identity(target.loaded.source),
        "layer": target.layer,
        "environment": common.environment(device=str(target.device)),
        "smoke": config.smoke,
        "note": config.note,
    }
    started = time.perf_counter()
    artifacts = setup()
    report["setup"] = {
        "seconds_this_run": time.perf_counter() - started,
        "seconds_recorded": artifacts.meta.get("setup_seconds"),
        "timings": artifacts.meta.get("timings"),
        "ranker_held_out": artifacts.meta.get("ranker"),
        "config": artifacts.meta.get("config"),
    }
    print(f"setup: {report['setup']['seconds_recorded']:.0f} s recorded", flush=True)

    sets = window_sets(target, config, rng)
    _warm_up(target, artifacts, config)
    fast = _fast(target, artifacts, sets)
    report["fast"] = {name: summarise(res) for name, res in fast.items()}
    report["fast_examples"] = [
        {"set": name, "text": res[0].text, "exact": res[0].exact_match}
        for name, res in fast.items()
        if res
    ]
    unscreened = _screening(target, artifacts, sets["news-10"][: config.unscreened_windows])
    if unscreened:
        report["unscreened"] = unscreened
    published = _published(target, config, sets["news-10"][:1])
    report["published"] = summarise(published)
    report["published"]["K"] = config.published_steps
    report["published"]["C"] = config.published_candidates
    report["published"]["rank_traces"] = [
        {"position": p.position, "true": p.true_token_id, "trace": p.true_rank_trace}
        for r in published
        for p in r.positions
    ]
    from evals.inversion.report import speed

    report["speed"] = speed(report)
    report["noise"] = _noise(target, artifacts, config, sets["news-10"][: config.sigma_windows])
    starved = [
        _invert(target, artifacts, ids, max_candidates=config.starved_candidates)
        for ids in sets["news-10"]
    ]
    report["starved"] = summarise(starved)
    report["starved"]["C"] = config.starved_candidates
    pool = [r for res in fast.values() for r in res] + starved + published
    report["diagnosis"], losses = _diagnosis(pool)
    report["plot_data"] = {
        "fast_seconds": {
            name: sorted(p.seconds for r in res for p in r.positions) for name, res in fast.items()
        },
        "published_seconds": [p.seconds for r in published for p in r.positions],
        **losses,
    }
    report["elapsed_s"] = time.perf_counter() - started
    return report


def _invert(target: Any, artifacts: Any, ids: list[int], **options: Any) -> Any:
    from companion.audit.invert import invert_fast

    return invert_fast(target, target.hidden_states(ids), artifacts, true_token_ids=ids, **options)


def _warm_up(target: Any, artifacts: Any, config: Config) -> None:
    """Untimed: one window of random tokens (none of the sets') builds the screening copy
    and lets the math libraries set up the shapes a long search uses."""
    from companion.audit.invert import invert_fast

    warm_rng = random.Random(config.seed + 99)
    allowed = allowed_tokens(target)
    warm = [warm_rng.choice(allowed) for _ in range(6)]
    invert_fast(target, target.hidden_states(warm), artifacts)
    invert_fast(target, target.hidden_states(warm), artifacts, screen=False)


def _fast(target: Any, artifacts: Any, sets: dict[str, list[list[int]]]) -> dict[str, list[Any]]:
    """The fast exact path on every window of every set."""
    fast: dict[str, list[Any]] = {}
    for name, windows in sets.items():
        results = []
        for i, ids in enumerate(windows):
            results.append(_invert(target, artifacts, ids))
            print(
                f"{name} {i + 1}/{len(windows)}: exact={results[-1].exact_match} "
                f"{results[-1].seconds_per_token:.3f} s/token",
                flush=True,
            )
        fast[name] = results
    return fast


def _screening(target: Any, artifacts: Any, windows: list[list[int]]) -> dict[str, Any] | None:
    """What screening buys: each window run without and with it, back to back, so that
    machine load hits both alike."""
    paired: dict[bool, list[Any]] = {True: [], False: []}
    for ids in windows:
        for screen in (False, True):
            paired[screen].append(_invert(target, artifacts, ids, screen=screen))
    if not paired[False]:
        return None
    result = {"without": summarise(paired[False]), "with": summarise(paired[True])}
    print(
        f"unscreened: {result['without']['mean_s_per_token']:.3f} s/token "
        f"vs {result['with']['mean_s_per_token']:.3f} with screening",
        flush=True,
    )
    return result


def _published(target: Any, config: Config, windows: list[list[int]]) -> list[Any]:
    """The published configuration (K Adam steps, C candidates) on the first positions."""
    from companion.audit.invert import GradientConfig, invert_gradient

    results = []
    for window in windows:
        ids = window[: config.published_tokens]
        gradient = GradientConfig(
            steps=config.published_steps, candidates=config.published_candidates, seed=config.seed
        )
        results.append(
            invert_gradient(
                target,
                target.hidden_states(ids),
                gradient,
                true_token_ids=ids,
                callback=lambda e: print(
                    f"published: position {e['position']} {e['token']!r} {e['status']} "
                    f"{e['seconds']:.1f} s",
                    flush=True,
                ),
            )
        )
    return results


def _noise(target: Any, artifacts: Any, config: Config, windows: list[list[int]]) -> dict[str, Any]:
    """Recovery against Gaussian noise on the states (nearest-candidate mode: no proof)."""
    import torch

    from companion.audit.invert import invert_fast

    rows = []
    gen = torch.Generator().manual_seed(config.seed)
    scale = float(torch.cat([target.hidden_states(ids) for ids in windows]).pow(2).mean().sqrt())
    for sigma in config.sigmas:
        results = []
        for ids in windows:
            states = target.hidden_states(ids)
            noisy = states + torch.randn(states.shape, generator=gen).to(states.device) * sigma
            results.append(
                invert_fast(
                    target, noisy, artifacts, tolerance=None, max_candidates=64, true_token_ids=ids
                )
            )
        summary = summarise(results)
        rows.append(
            {
                "sigma": sigma,
                "sigma_over_rms": sigma / scale,
                "token_accuracy": summary["token_accuracy"],
                "exact_match": summary["exact_match"],
                "mean_s_per_token": summary["mean_s_per_token"],
                "mean_discrete_loss": statistics.fmean(
                    p.discrete_loss for r in results for p in r.positions
                ),
            }
        )
        print(f"sigma {sigma}: token accuracy {summary['token_accuracy']:.3f}", flush=True)
    return {"state_rms": scale, "rows": rows, "candidates": 64}


def _diagnosis(pool: list[Any]) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Does the cumulative discrete loss separate exact from failed recoveries?"""
    exact = [r.cumulative_loss for r in pool if r.exact_match]
    failed = [r.cumulative_loss for r in pool if not r.exact_match]
    flag_agrees = sum(r.proven == bool(r.exact_match) for r in pool)
    threshold = (
        math.sqrt(max(exact) * min(failed)) if exact and failed and max(exact) > 0 else float("nan")
    )
    diagnosis = {
        "recoveries": len(pool),
        "exact": len(exact),
        "failed": len(failed),
        "auroc": auroc(
            [-math.log10(max(x, 1e-300)) for x in exact],
            [-math.log10(max(x, 1e-300)) for x in failed],
        ),
        "max_exact_cumulative_loss": max(exact) if exact else None,
        "min_failed_cumulative_loss": min(failed) if failed else None,
        "threshold": threshold,
        "perfect_separation": bool(exact and failed and max(exact) < min(failed)),
        "proof_flag_agrees_with_truth": flag_agrees / max(1, len(pool)),
    }
    return diagnosis, {"exact_losses": exact, "failed_losses": failed}
