"""The inversion evaluation's report: speed ratios, goals, plots and report.md."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from evals import common


def write(results: dict[str, Any], out: Path) -> Path:
    """Write OUT/results.json, the plots and OUT/report.md; return the report's path."""
    common.write_results(out, results, indent=2)
    return render(results, out)


def render(results: dict[str, Any], out: Path) -> Path:
    """The plots (where results.json holds their data) and OUT/report.md."""
    plots(out, results)
    return common.write_report(out, markdown(results, out))


def speed(report: dict[str, Any]) -> dict[str, Any]:
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


def _break_even(pub: float, fast: float, setup_s: float) -> float | None:
    """Tokens after which (setup + n·fast)/n <= pub/500."""
    budget = pub / 500 - fast
    return setup_s / budget if budget > 0 else None


def goals(report: dict[str, Any]) -> list[str]:
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


def plots(out: Path, r: dict[str, Any]) -> list[str]:
    """The three figures, from ``r["plot_data"]``; none for results that lack it."""
    data = r.get("plot_data")
    if not data:
        return []
    plt = common.pyplot()
    made = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, times in data["fast_seconds"].items():
        if times:
            ax.plot(times, [(i + 1) / len(times) for i in range(len(times))], label=f"fast, {name}")
    pub = data["published_seconds"]
    if pub:
        ax.axvline(statistics.fmean(pub), color="k", ls="--", label="published K/C, mean")
    ax.set_xscale("log")
    ax.set_xlabel("seconds per token")
    ax.set_ylabel("fraction of tokens")
    ax.set_title("Time per token (CDF)")
    ax.legend(fontsize=8)
    made.append(common.save_figure(fig, out, "time_per_token.png"))

    sigma_rows = r["noise"]["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [max(row["sigma"], 1e-6) for row in sigma_rows]
    ax.plot(xs, [row["token_accuracy"] for row in sigma_rows], "o-", label="token accuracy")
    ax.plot(xs, [row["exact_match"] for row in sigma_rows], "s--", label="exact match (window)")
    ax.set_xscale("log")
    ax.set_xlabel("sigma of Gaussian noise on the states (sigma=0 drawn at 1e-6)")
    ax.set_ylabel("recovery")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Recovery under noise (nearest of 64 ranked candidates)")
    ax.legend()
    made.append(common.save_figure(fig, out, "sigma_recovery.png"))

    exact, failed = data["exact_losses"], data["failed_losses"]
    threshold = r["diagnosis"]["threshold"]
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
    if threshold is not None and math.isfinite(threshold):
        ax.axvline(threshold, color="k", ls=":", label=f"threshold {threshold:.1e}")
    ax.set_xscale("log")
    ax.set_yticks([0, 1], ["exact", "failed"])
    ax.set_ylim(-0.5, 1.5)
    ax.set_xlabel("cumulative discrete loss")
    ax.set_title("Self-diagnosis without the original text")
    ax.legend(fontsize=8)
    made.append(common.save_figure(fig, out, "cumulative_loss.png"))
    return made


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


def _fast_row(name: str, s: dict[str, Any]) -> list[str]:
    return [
        name,
        str(s["windows"]),
        str(s["tokens"]),
        f"{100 * s['exact_match']:.1f}%",
        f"{100 * s['token_accuracy']:.1f}%",
        f"{100 * s['tokens_proven']:.1f}%",
        _fmt(s["mean_s_per_token"]),
        _fmt(s["median_s_per_token"]),
        _fmt(s.get("p95_s_per_token")),
        _fmt(s["worst_s_per_token"]),
        f"{100 * s['found_in_first_batch']:.1f}%",
        _fmt(s.get("mean_candidates_examined")),
        _fmt(s.get("mean_full_precision_checks")),
        str(s["exhaustive_positions"]),
    ]


def markdown(r: dict[str, Any], out: Path) -> str:
    lines = [
        "# Hidden-state inversion: evaluation report",
        "",
        "Regenerate with `veil audit setup --thorough --threads 2 --force` (the thorough "
        f"per-model setup, timed) then `{common.command('inversion', out, '--threads', '2', smoke=r['smoke'])}`; "
        f"`{common.RENDER_FLAG}` re-renders this report from results.json; CI runs `--smoke` "
        "on a tiny random model.",
        "",
        "This report is SmolLM2-135M's last layer after the *thorough* setup. Every model the "
        "companion serves (SmolLM2, Qwen2.5-Coder-0.5B and the 1.5B default) after the quick "
        "setup, recovery by layer and from the KV cache, the certificates under noise and "
        "each goal's figure: [docs/audit-models/report.md](../audit-models/report.md) "
        "(`veil eval audit-models --threads 2 --out docs/audit-models`).",
        "",
        f"- Model: {common.describe_model(r.get('model_file'))}, cache identity `{r['model']}`, "
        f"layer {r['layer']} (-1 = last layer after the final norm)",
        f"- Machine: {common.describe_environment(r.get('environment'))}",
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
        common.markdown_table(
            [
                "set",
                "windows",
                "tokens",
                "exact match",
                "token acc.",
                "tokens proven",
                "mean s/token",
                "median",
                "p95",
                "worst",
                "found in 1st batch (<=8)",
                "mean candidates examined",
                "mean fp32 checks",
                "positions with >512 candidates examined",
            ],
            [_fast_row(name, s) for name, s in r["fast"].items()],
        ),
    ]
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
        common.markdown_table(
            [
                "sigma",
                "sigma / RMS",
                "token accuracy",
                "exact match",
                "mean discrete loss",
                "s/token",
            ],
            [
                [
                    _fmt(row["sigma"]),
                    _fmt(row["sigma_over_rms"]),
                    f"{100 * row['token_accuracy']:.1f}%",
                    f"{100 * row['exact_match']:.1f}%",
                    _fmt(row["mean_discrete_loss"]),
                    _fmt(row["mean_s_per_token"]),
                ]
                for row in r["noise"]["rows"]
            ],
        ),
    ]
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
        common.markdown_table(
            [
                "recoveries",
                "exact",
                "failed",
                "AUROC",
                "max exact loss",
                "min failed loss",
                "threshold",
                "perfect separation",
                "proof flag = truth",
            ],
            [
                [
                    d["recoveries"],
                    d["exact"],
                    d["failed"],
                    _fmt(d["auroc"], 4),
                    _fmt(d["max_exact_cumulative_loss"]),
                    _fmt(d["min_failed_cumulative_loss"]),
                    _fmt(d["threshold"]),
                    d["perfect_separation"],
                    f"{100 * d['proof_flag_agrees_with_truth']:.1f}%",
                ]
            ],
        ),
        "",
        "![cumulative loss](cumulative_loss.png)",
        "",
        "## Goals",
        "",
        *[f"- {g}" for g in goals(r)],
        "",
    ]
    return "\n".join(lines)
