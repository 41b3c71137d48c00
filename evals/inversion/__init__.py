"""Hidden-state inversion: exact recovery, speed against the published method, noise, self-diagnosis.

Full run (SmolLM2-135M-Instruct, CPU; writes docs/inversion/):

    python -m companion eval inversion --threads 1

Smoke run (a tiny random model, seconds; CI):

    python -m companion eval inversion --smoke

Measured, on windows of real English the ranker never saw (the Lee news corpus
shipped in the ``gensim`` wheel; the ranker is trained only on text the model
generated itself), plus longer windows, Python source code and uniformly random
tokens: exact match, token accuracy, proof status, time per token (mean and
worst), one-time setup time; the published configuration (K Adam steps, C
candidates) on a few positions in the same run for the speed ratio; recovery
against Gaussian noise sigma on the states; and whether the cumulative discrete loss
separates exact from failed recoveries (AUROC and threshold), using the failures
of a deliberately starved search (C candidates, no fallback) and of the
published method.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("docs/inversion")
LEE = "test/test_data/lee_background.cor"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help="tiny random model, seconds (CI)")
    parser.add_argument("--out", type=Path, default=None, help=f"report folder ({DEFAULT_OUT})")
    parser.add_argument("--model", default=None, help="model spec (default SmolLM2-135M)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--windows", type=int, default=100, help="10-token news windows")
    parser.add_argument("--window-length", type=int, default=10)
    parser.add_argument("--long-windows", type=int, default=5, help="windows of --long-length")
    parser.add_argument("--long-length", type=int, default=32)
    parser.add_argument("--code-windows", type=int, default=3, help="10-token Python code windows")
    parser.add_argument("--random-windows", type=int, default=2, help="10 uniformly random tokens")
    parser.add_argument(
        "--published-tokens", type=int, default=3, help="positions run with the published method"
    )
    parser.add_argument("--published-steps", type=int, default=1000, help="K")
    parser.add_argument("--published-candidates", type=int, default=2000, help="C")
    parser.add_argument(
        "--sigmas",
        default="0,1e-3,1e-2,3e-2,1e-1,3e-1,1",
        help="comma-separated noise levels for the sigma curve",
    )
    parser.add_argument("--sigma-windows", type=int, default=5)
    parser.add_argument(
        "--unscreened-windows",
        type=int,
        default=30,
        help="news windows also run without bfloat16 screening (what screening buys)",
    )
    parser.add_argument("--starved-candidates", type=int, default=1, help="C of the starved search")
    parser.add_argument("--seed", type=int, default=2024, help="window sampling and noise seed")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite README.md from --out/results.json (e.g. after the setup time was corrected)",
    )
    parser.add_argument("--note", default=None, help="a note printed at the top of the report")


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(max(1, args.threads))
    if args.render_only:
        return render_only(args.out or DEFAULT_OUT, args.note)
    if args.smoke:
        return _run_smoke(args)
    out = args.out or DEFAULT_OUT
    from companion.audit.service import open_target, setup_with_bar

    target = open_target(args.model, threads=args.threads)
    return _evaluate(target, args, out, setup=lambda: setup_with_bar(target))


def _run_smoke(args: argparse.Namespace) -> int:
    from companion.audit.hidden import TargetModel
    from companion.audit.ranker import SetupConfig, run_setup
    from companion.audit.tiny import make_tiny_model
    from companion.models import load_causal_lm

    with tempfile.TemporaryDirectory(prefix="veil-inversion-smoke-") as tmp:
        old_home = os.environ.get("VEIL_HOME")
        os.environ["VEIL_HOME"] = str(Path(tmp) / "home")
        try:
            folder = make_tiny_model(Path(tmp) / "tiny")
            target = TargetModel(load_causal_lm(str(folder), device="cpu"))
            config = SetupConfig(sequences=96, length=24, generation_batch=48, epochs=3, hidden=128)
            args.windows = min(args.windows, 6)
            args.long_windows = min(args.long_windows, 2)
            args.long_length = min(args.long_length, 16)
            args.code_windows = min(args.code_windows, 2)
            args.random_windows = min(args.random_windows, 2)
            args.published_tokens = min(args.published_tokens, 3)
            args.published_steps = min(args.published_steps, 60)
            args.published_candidates = min(args.published_candidates, 64)
            args.sigma_windows = min(args.sigma_windows, 2)
            args.unscreened_windows = min(args.unscreened_windows, 2)
            args.sigmas = "0,1e-2,1"
            out = args.out or Path(tmp) / "report"
            code = _evaluate(target, args, out, setup=lambda: run_setup(target, config))
            print(f"smoke report written to {out}")
            return code
        finally:
            if old_home is None:
                os.environ.pop("VEIL_HOME", None)
            else:
                os.environ["VEIL_HOME"] = old_home


# -- data ---------------------------------------------------------------------


def lee_text() -> str:
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        from py_core.errors import InvalidParameterError

        raise InvalidParameterError(
            "the Lee corpus ships in the gensim wheel: pip install --no-deps 'gensim>=4.3'"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / LEE
    return path.read_text(encoding="utf-8", errors="replace")


def code_text() -> str:
    import inspect
    import json.decoder
    import textwrap

    return textwrap.dedent(inspect.getsource(json.decoder))


def windows_from(ids: list[int], count: int, length: int, rng: random.Random) -> list[list[int]]:
    """``count`` non-overlapping windows of ``length`` tokens at random offsets."""
    slots = len(ids) // length
    if slots < count:
        raise ValueError(f"only {slots} windows of {length} tokens available, {count} asked")
    picks = rng.sample(range(slots), count)
    return [ids[s * length : (s + 1) * length] for s in sorted(picks)]


# -- metrics ------------------------------------------------------------------


def auroc(scores_pos: list[float], scores_neg: list[float]) -> float:
    """P(score of a positive > score of a negative), ties counted half."""
    if not scores_pos or not scores_neg:
        return float("nan")
    wins = 0.0
    for p in scores_pos:
        for n in scores_neg:
            wins += 1.0 if p > n else 0.5 if p == n else 0.0
    return wins / (len(scores_pos) * len(scores_neg))


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summarise(results: list[Any]) -> dict[str, Any]:
    tokens = [p for r in results for p in r.positions]
    times = [p.seconds for p in tokens]
    ranks = [p.rank for p in tokens if p.status == "proven" and p.rank is not None]
    return {
        "windows": len(results),
        "tokens": len(tokens),
        "exact_match": sum(bool(r.exact_match) for r in results) / max(1, len(results)),
        "token_accuracy": sum(p.token_id == p.true_token_id for p in tokens) / max(1, len(tokens)),
        "all_proven": sum(r.proven for r in results) / max(1, len(results)),
        "tokens_proven": sum(p.status == "proven" for p in tokens) / max(1, len(tokens)),
        "flagged_tokens": sum(p.flagged for p in tokens),
        "mean_s_per_token": statistics.fmean(times) if times else float("nan"),
        "median_s_per_token": statistics.median(times) if times else float("nan"),
        "worst_s_per_token": max(times) if times else float("nan"),
        "total_s": sum(r.seconds for r in results),
        "found_in_first_batch": sum(1 for r in ranks if r <= 8) / max(1, len(ranks)),
        "found_in_top512": sum(1 for r in ranks if r <= 512) / max(1, len(ranks)),
        "exhaustive_positions": sum(1 for p in tokens if p.candidates_checked > 512),
        "p95_s_per_token": _quantile(times, 0.95),
        "mean_candidates_examined": statistics.fmean(p.candidates_checked for p in tokens)
        if tokens
        else float("nan"),
        "mean_full_precision_checks": statistics.fmean(
            p.candidates_checked - p.screened for p in tokens
        )
        if tokens
        else float("nan"),
        "max_cumulative_loss": max((r.cumulative_loss for r in results), default=float("nan")),
    }


# -- the evaluation -----------------------------------------------------------


def _evaluate(target: Any, args: argparse.Namespace, out: Path, *, setup: Any) -> int:
    import torch

    from companion.audit.invert import GradientConfig, invert_fast, invert_gradient

    rng = random.Random(args.seed)
    report: dict[str, Any] = {
        "model": target.identity,
        "source": target.loaded.source,
        "layer": target.layer,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip()
        + f", {os.cpu_count()} CPU cores (load average {os.getloadavg()[0]:.1f} at start)"
        + f", torch threads {torch.get_num_threads()}, device {target.device}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "smoke": bool(args.smoke),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "note": getattr(args, "note", None),
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

    special = set(getattr(target.tokenizer, "all_special_ids", []) or [])
    news_ids = target.encode(lee_text())
    news = windows_from(news_ids, args.windows, args.window_length, rng)
    sets: dict[str, list[list[int]]] = {"news-10": news}
    long_ids = windows_from(
        news_ids, args.long_windows, args.long_length, random.Random(args.seed + 1)
    )
    sets[f"news-{args.long_length}"] = long_ids
    sets["code-10"] = windows_from(target.encode(code_text()), args.code_windows, 10, rng)
    allowed = [i for i in range(target.vocab_size) if i not in special]
    sets["random-10"] = [
        [rng.choice(allowed) for _ in range(10)] for _ in range(args.random_windows)
    ]

    # Warm-up, not timed: one window of random tokens (none of the sets') builds the
    # screening copy and lets the math libraries set up the shapes a long search uses.
    warm_rng = random.Random(args.seed + 99)
    warm = [warm_rng.choice(allowed) for _ in range(6)]
    invert_fast(target, target.hidden_states(warm), artifacts)
    invert_fast(target, target.hidden_states(warm), artifacts, screen=False)

    all_fast: dict[str, list[Any]] = {}
    for name, windows in sets.items():
        results = []
        for i, ids in enumerate(windows):
            states = target.hidden_states(ids)
            results.append(invert_fast(target, states, artifacts, true_token_ids=ids))
            print(
                f"{name} {i + 1}/{len(windows)}: exact={results[-1].exact_match} "
                f"{results[-1].seconds_per_token:.3f} s/token",
                flush=True,
            )
        all_fast[name] = results
    report["fast"] = {name: _summarise(res) for name, res in all_fast.items()}
    report["fast_examples"] = [
        {"set": name, "text": res[0].text, "exact": res[0].exact_match}
        for name, res in all_fast.items()
        if res
    ]

    # What screening buys: the first news windows again, with and without it, each
    # window run both ways back to back so machine load hits both alike.
    paired: dict[bool, list[Any]] = {True: [], False: []}
    for ids in sets["news-10"][: args.unscreened_windows]:
        states = target.hidden_states(ids)
        for screen in (False, True):
            paired[screen].append(
                invert_fast(target, states, artifacts, true_token_ids=ids, screen=screen)
            )
    if paired[False]:
        report["unscreened"] = {
            "without": _summarise(paired[False]),
            "with": _summarise(paired[True]),
        }
        print(
            f"unscreened: {report['unscreened']['without']['mean_s_per_token']:.3f} s/token "
            f"vs {report['unscreened']['with']['mean_s_per_token']:.3f} with screening",
            flush=True,
        )

    # The published configuration on the first positions of the first news window.
    pub_results = []
    pub_windows = sets["news-10"][:1]
    for ids in pub_windows:
        ids = ids[: args.published_tokens]
        states = target.hidden_states(ids)
        config = GradientConfig(
            steps=args.published_steps, candidates=args.published_candidates, seed=args.seed
        )
        pub_results.append(
            invert_gradient(
                target,
                states,
                config,
                true_token_ids=ids,
                callback=lambda e: print(
                    f"published: position {e['position']} {e['token']!r} {e['status']} "
                    f"{e['seconds']:.1f} s",
                    flush=True,
                ),
            )
        )
    report["published"] = _summarise(pub_results)
    report["published"]["K"] = args.published_steps
    report["published"]["C"] = args.published_candidates
    report["published"]["rank_traces"] = [
        {"position": p.position, "true": p.true_token_id, "trace": p.true_rank_trace}
        for r in pub_results
        for p in r.positions
    ]
    report["speed"] = _speed(report)

    # sigma-vs-recovery: nearest-candidate mode (no proof possible under noise).
    sigmas = [float(s) for s in args.sigmas.split(",") if s.strip()]
    noise_windows = sets["news-10"][: args.sigma_windows]
    sigma_rows = []
    gen = torch.Generator().manual_seed(args.seed)
    scale = float(
        torch.cat([target.hidden_states(ids) for ids in noise_windows]).pow(2).mean().sqrt()
    )
    for sigma in sigmas:
        results = []
        for ids in noise_windows:
            states = target.hidden_states(ids)
            noisy = states + torch.randn(states.shape, generator=gen).to(states.device) * sigma
            results.append(
                invert_fast(
                    target, noisy, artifacts, tolerance=None, max_candidates=64, true_token_ids=ids
                )
            )
        summary = _summarise(results)
        sigma_rows.append(
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
    report["noise"] = {"state_rms": scale, "rows": sigma_rows, "candidates": 64}

    # Self-diagnosis: exact recoveries vs failed ones (starved search and published method).
    starved = [
        invert_fast(
            target,
            target.hidden_states(ids),
            artifacts,
            max_candidates=args.starved_candidates,
            true_token_ids=ids,
        )
        for ids in sets["news-10"]
    ]
    report["starved"] = _summarise(starved)
    report["starved"]["C"] = args.starved_candidates
    pool = [r for res in all_fast.values() for r in res] + starved + pub_results
    exact = [r.cumulative_loss for r in pool if r.exact_match]
    failed = [r.cumulative_loss for r in pool if not r.exact_match]
    flag_agrees = sum(r.proven == bool(r.exact_match) for r in pool)
    threshold = (
        math.sqrt(max(exact) * min(failed)) if exact and failed and max(exact) > 0 else float("nan")
    )
    report["diagnosis"] = {
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
    report["elapsed_s"] = time.perf_counter() - started
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=2, default=float))
    _plots(out, all_fast, pub_results, sigma_rows, exact, failed, threshold)
    (out / "README.md").write_text(_markdown(report))
    goals = _goals(report)
    for line in goals:
        print(line)
    return 0


def _speed(report: dict[str, Any]) -> dict[str, Any]:
    """Published vs fast time per token, per token and with the one-time setup amortised."""
    fast10 = report["fast"]["news-10"]
    setup_s = float(report["setup"]["seconds_recorded"] or 0.0)
    pub_mean = report["published"]["mean_s_per_token"]
    amortised = (fast10["total_s"] + setup_s) / fast10["tokens"]
    return {
        "published_mean_s_per_token": pub_mean,
        "fast_mean_s_per_token": fast10["mean_s_per_token"],
        "ratio": pub_mean / fast10["mean_s_per_token"],
        "setup_s": setup_s,
        "fast_with_setup_amortised_s_per_token": amortised,
        "ratio_setup_amortised": pub_mean / amortised,
        "amortised_over_tokens": fast10["tokens"],
        "break_even_tokens_for_500x": _break_even(pub_mean, fast10["mean_s_per_token"], setup_s),
    }


def render_only(out: Path, note: str | None = None) -> int:
    """Rewrite README.md (and the setup/speed figures) from results.json and the setup record."""
    from companion.audit.ranker import audit_home

    report = json.loads((out / "results.json").read_text())
    done = audit_home() / f"{report['model']}-L{report['layer']}" / "done.json"
    if done.exists():
        meta = json.loads(done.read_text())
        report["setup"]["seconds_recorded"] = meta.get("setup_seconds")
        report["setup"]["timings"] = meta.get("timings")
        if meta.get("timing_note"):
            report["setup"]["note"] = meta["timing_note"]
    report["speed"] = _speed(report)
    if note:
        report["note"] = note
    (out / "results.json").write_text(json.dumps(report, indent=2, default=float))
    (out / "README.md").write_text(_markdown(report))
    for line in _goals(report):
        print(line)
    return 0


def _break_even(pub: float, fast: float, setup_s: float) -> float | None:
    """Tokens after which (setup + n·fast)/n <= pub/500."""
    budget = pub / 500 - fast
    return setup_s / budget if budget > 0 else None


def _goals(report: dict[str, Any]) -> list[str]:
    fast = report["fast"]["news-10"]
    diag = report["diagnosis"]
    return [
        f"goal exact match 100% on {fast['windows']} windows: {100 * fast['exact_match']:.1f}%",
        f"goal every token proven: {100 * fast['tokens_proven']:.1f}%",
        f"goal >=500x faster than published: {report['speed']['ratio']:.0f}x "
        f"({report['speed']['ratio_setup_amortised']:.0f}x with setup amortised)",
        f"goal perfect separation by cumulative loss: {diag['perfect_separation']} "
        f"(AUROC {diag['auroc']:.4f})",
    ]


def _plots(
    out: Path,
    fast: dict[str, list[Any]],
    published: list[Any],
    sigma_rows: list[dict[str, Any]],
    exact: list[float],
    failed: list[float],
    threshold: float,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, results in fast.items():
        times = sorted(p.seconds for r in results for p in r.positions)
        if times:
            ax.plot(times, [(i + 1) / len(times) for i in range(len(times))], label=f"fast, {name}")
    pub = [p.seconds for r in published for p in r.positions]
    if pub:
        ax.axvline(statistics.fmean(pub), color="k", ls="--", label="published K/C, mean")
    ax.set_xscale("log")
    ax.set_xlabel("seconds per token")
    ax.set_ylabel("fraction of tokens")
    ax.set_title("Time per token (CDF)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "time_per_token.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [max(r["sigma"], 1e-6) for r in sigma_rows]
    ax.plot(xs, [r["token_accuracy"] for r in sigma_rows], "o-", label="token accuracy")
    ax.plot(xs, [r["exact_match"] for r in sigma_rows], "s--", label="exact match (window)")
    ax.set_xscale("log")
    ax.set_xlabel("sigma of Gaussian noise on the states (sigma=0 drawn at 1e-6)")
    ax.set_ylabel("recovery")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Recovery under noise (nearest of 64 ranked candidates)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "sigma_recovery.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    floor = 1e-16
    ax.scatter([max(x, floor) for x in exact], [0] * len(exact), marker="|", s=200, label="exact")
    ax.scatter(
        [max(x, floor) for x in failed],
        [1] * len(failed),
        marker="|",
        s=200,
        color="C3",
        label="failed",
    )
    if math.isfinite(threshold):
        ax.axvline(threshold, color="k", ls=":", label=f"threshold {threshold:.1e}")
    ax.set_xscale("log")
    ax.set_yticks([0, 1], ["exact", "failed"])
    ax.set_ylim(-0.5, 1.5)
    ax.set_xlabel("cumulative discrete loss")
    ax.set_title("Self-diagnosis without the original text")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "cumulative_loss.png", dpi=120)
    plt.close(fig)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
            return f"{x:.2e}"
        return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{digits}f}".rstrip("0").rstrip(".")
    return str(x)


def _markdown(r: dict[str, Any]) -> str:
    lines = [
        "# Hidden-state inversion: evaluation report",
        "",
        "Regenerate with `python -m companion audit setup --threads 2 --force` (one-time "
        "per-model setup, timed) then `python -m companion eval inversion --threads 2` "
        "(`veil eval inversion`); CI runs `--smoke` on a tiny random model.",
        "",
        f"- Model: `{r['source']}` (identity `{r['model']}`), layer {r['layer']} "
        "(-1 = last layer after the final norm)",
        f"- Machine: {r['machine']}; Python {r['python']}, torch {r['torch']}; started {r['started']}",
        f"- Smoke run: {r['smoke']}; whole run {r['elapsed_s']:.0f} s",
        *([f"- Note: {r['note']}"] if r.get("note") else []),
        f"- One-time setup (position-0 table, self-generated text, ranker training): "
        f"{_fmt(r['setup']['seconds_recorded'])} s; stages {r['setup']['timings']}"
        + (f" ({r['setup']['note']})" if r["setup"].get("note") else ""),
        f"- Ranker on held-out *generated* text: {r['setup']['ranker_held_out']}",
        "",
        "## Fast exact path",
        "",
        "The search: candidates in the ranker's order; the first 72 (batches of 8 and 64) "
        "verified at full precision, the rest screened in growing chunks by a bfloat16 copy of the model, "
        "and only those whose screened state is close verified at full precision; a "
        "token is committed only when its fp32 state reproduces the leaked one within "
        "the tolerance (max-abs 1e-3), else the whole vocabulary is verified in fp32. "
        "Timings follow one untimed warm-up inversion of 6 random tokens (it builds the "
        "bfloat16 copy once per process).",
        "",
        "| set | windows | tokens | exact match | token acc. | tokens proven | mean s/token | "
        "median | p95 | worst | found in 1st batch (<=8) | mean candidates examined | "
        "mean fp32 checks | positions with >512 candidates examined |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in r["fast"].items():
        lines.append(
            f"| {name} | {s['windows']} | {s['tokens']} | {100 * s['exact_match']:.1f}% | "
            f"{100 * s['token_accuracy']:.1f}% | {100 * s['tokens_proven']:.1f}% | "
            f"{_fmt(s['mean_s_per_token'])} | {_fmt(s['median_s_per_token'])} | "
            f"{_fmt(s.get('p95_s_per_token'))} | "
            f"{_fmt(s['worst_s_per_token'])} | {100 * s['found_in_first_batch']:.1f}% | "
            f"{_fmt(s.get('mean_candidates_examined'))} | "
            f"{_fmt(s.get('mean_full_precision_checks'))} | {s['exhaustive_positions']} |"
        )
    if r.get("unscreened"):
        u = r["unscreened"]
        lines += [
            "",
            f"What screening buys (first {u['without']['windows']} news windows run again both "
            "ways, back to back per window): "
            f"{_fmt(u['without']['mean_s_per_token'])} s/token verifying every candidate in "
            f"fp32 vs {_fmt(u['with']['mean_s_per_token'])} s/token with screening "
            f"(worst {_fmt(u['without']['worst_s_per_token'])} vs "
            f"{_fmt(u['with']['worst_s_per_token'])} s); "
            f"exact match {100 * u['without']['exact_match']:.0f}% vs "
            f"{100 * u['with']['exact_match']:.0f}%.",
        ]
    p = r["published"]
    sp = r["speed"]
    lines += [
        "",
        "Examples: "
        + "; ".join(f"{e['set']}: {json.dumps(e['text'])}" for e in r["fast_examples"]),
        "",
        "## Published configuration (same run, same machine)",
        "",
        f"K = {p['K']} Adam steps, C = {p['C']} candidates, on the first {p['tokens']} positions "
        f"of one news window: token accuracy {100 * p['token_accuracy']:.1f}%, "
        f"mean {_fmt(p['mean_s_per_token'])} s/token (worst {_fmt(p['worst_s_per_token'])}).",
        "",
        "| | s/token | ratio published/fast |",
        "|---|---|---|",
        f"| fast, per token | {_fmt(sp['fast_mean_s_per_token'])} | {sp['ratio']:.0f}x |",
        f"| fast, setup amortised over {sp['amortised_over_tokens']} tokens | "
        f"{_fmt(sp['fast_with_setup_amortised_s_per_token'])} | {sp['ratio_setup_amortised']:.0f}x |",
        "",
        f"Tokens needed for the setup-amortised ratio to reach 500x: "
        f"{_fmt(sp['break_even_tokens_for_500x'])}.",
        "",
        "Rank of the true token (by embedding distance to the proxy) during the Adam loop: "
        + "; ".join(
            f"pos {t['position']}: "
            + ", ".join(f"{s}:{k}" for s, k in t["trace"][:: max(1, len(t["trace"]) // 6)])
            for t in p["rank_traces"]
        ),
        "",
        "![time per token](time_per_token.png)",
        "",
        "## Recovery under Gaussian noise on the states",
        "",
        f"Nearest of the {r['noise']['candidates']} best-ranked candidates per position (no proof is "
        f"possible under noise); RMS of a state coordinate = {_fmt(r['noise']['state_rms'])}.",
        "",
        "| sigma | sigma / RMS | token accuracy | exact match | mean discrete loss | s/token |",
        "|---|---|---|---|---|---|",
    ]
    for row in r["noise"]["rows"]:
        lines.append(
            f"| {_fmt(row['sigma'])} | {_fmt(row['sigma_over_rms'])} | "
            f"{100 * row['token_accuracy']:.1f}% | {100 * row['exact_match']:.1f}% | "
            f"{_fmt(row['mean_discrete_loss'])} | {_fmt(row['mean_s_per_token'])} |"
        )
    d = r["diagnosis"]
    st = r["starved"]
    lines += [
        "",
        "![sigma](sigma_recovery.png)",
        "",
        "## Self-diagnosis: cumulative discrete loss",
        "",
        f"Pool: every fast-path recovery above, a starved search (C = {st['C']}, no fallback; "
        f"exact match {100 * st['exact_match']:.1f}%, token accuracy {100 * st['token_accuracy']:.1f}%) "
        "and the published-method runs.",
        "",
        "| recoveries | exact | failed | AUROC | max exact loss | min failed loss | threshold | "
        "perfect separation | proof flag = truth |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {d['recoveries']} | {d['exact']} | {d['failed']} | {_fmt(d['auroc'], 4)} | "
        f"{_fmt(d['max_exact_cumulative_loss'])} | {_fmt(d['min_failed_cumulative_loss'])} | "
        f"{_fmt(d['threshold'])} | {d['perfect_separation']} | "
        f"{100 * d['proof_flag_agrees_with_truth']:.1f}% |",
        "",
        "![cumulative loss](cumulative_loss.png)",
        "",
        "## Goals",
        "",
        *[f"- {g}" for g in _goals(r)],
        "",
    ]
    return "\n".join(lines)
