"""report.md (and a plot) for ``veil eval rootguard --agents`` from its results.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evals import common

PAPER = "RootGuard's RQ4: 21,600 agent sessions, 0 compliance failures, M-Opt > M-Roots > M-All"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _pct2(x: float) -> str:
    return f"{100 * x:.2f}%"


def _macro(rows: list[dict[str, Any]], method: str, eps: float, key: str) -> float:
    vals = [r[key] for r in rows if r["method"] == method and r["epsilon"] == eps]
    return sum(vals) / len(vals)


def _plot(results: dict[str, Any], out: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - the eval extra has matplotlib
        return None
    rows = results["reconstruction"]
    eps_list = sorted({r["epsilon"] for r in rows})
    fig, axes = plt.subplots(1, len(eps_list), figsize=(5 * len(eps_list), 3.6), squeeze=False)
    for ax, eps in zip(axes[0], eps_list, strict=True):
        for method in ("M-All", "M-Roots", "M-Opt"):
            pts = sorted(
                (r["q"], r["wmape"]) for r in rows if r["method"] == method and r["epsilon"] == eps
            )
            ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", label=method)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("turns seen by the adversary (all services pooled)")
        ax.set_ylabel("reconstruction wMAPE (%)")
        ax.set_title(f"ε = {eps:g} per disclosure (M-All)")
        ax.legend()
    fig.tight_layout()
    name = "agents_reconstruction.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def write_report(results: dict[str, Any], out: Path) -> Path:
    cfg = results["config"]
    totals = results["totals"]
    target = results["target"]
    eps_list = sorted({r["epsilon"] for r in target})
    lines = [
        "# RootGuard for agents: scripted sessions through `veil mcp proxy` (RQ4-style)",
        "",
        f"Regenerate with `{results['command']}`"
        + (" (smoke configuration: too small to read anything into)." if cfg["smoke"] else "."),
        "",
        f"Paper: {PAPER}. Here: {totals['sessions']:,} scripted sessions "
        f"({cfg['people']} NHANES people x 8 templates x 3 configurations x "
        f"{len(cfg['epsilons'])} ε), {cfg['turns']} turns each, 4 upstream MCP services per turn "
        f"(clinic, labs, insurer, calculator) that record every argument: {totals['calls']:,} tool "
        f"calls through the shipped proxy (`companion.mcp.proxy.Proxy`, the MCP SDK's in-process "
        f"transport on both sides) in {results['cpu_s']:.0f} s of CPU. "
        "No LLM drives these sessions: the agent "
        "is scripted (it sends the person's true values, as told, in every shape the services "
        "ask for); a local model driving a subset is not done.",
        "",
        "Configurations: **M-All** noises every disclosure afresh at ε (the proxy's rewriter with "
        "a source that draws anew on every request); **M-Roots** and **M-Opt** are RootGuard's "
        "cache with `B = (2k+1) ε` split equally or by the sensitivity rule. Privacy units: "
        f"`{cfg['setting']}` (1% of the population mean of each root, the paper-comparable scale "
        "of docs/rootguard/report.md).",
        "",
        "## Compliance (goal: 0 failures)",
        "",
        "A private slot is every place a service received one of the template's roots or the "
        "score (flat fields, name/value pairs with the value as a string in another unit, "
        "camelCase strings with units, free-text sentences, the score's inputs, and the "
        "agent's own estimate of the score in a field that names no value). It complies when it "
        "holds a released value at its written precision: the cached noisy value (RootGuard) or "
        "one of the session's fresh draws (M-All).",
        "",
        "| what | count |",
        "|---|---:|",
        f"| private slots received by the services | {totals['slots']:,} |",
        f"| **compliance failures** (not a released value) | **{totals['failures']}** |",
        f"| of which a true value passed through | {totals['true_passed']} |",
        f"| other numbers changed on the way (visit numbers, dates, dependents, the note's tail) "
        f"| {totals['collateral']} |",
        f"| results that came back changed | {totals['changed_results']} |",
        f"| calls the proxy refused (a number equal to two declared values; not sent) "
        f"| {totals.get('refused', 0)} |",
        "",
        "The other numbers that changed are visit numbers (1 to "
        f"{cfg['turns']}) that happened to equal a declared lab value written as an integer "
        "(a fasting insulin of 4.1, an ALT of 14): with no field naming a value, the proxy's "
        "strict mode replaces a number equal to a declared value -- the safe side, at the cost "
        f"of {totals['collateral']:,} changed visit numbers in {totals['calls']:,} calls -- and "
        "refuses a call when the number equals two declared values (`--not-strict` leaves "
        "such numbers alone).",
        "",
        "## Target error per configuration (goal: M-Opt < M-Roots < M-All)",
        "",
        "The score the calculator service computed from what it received, every turn; macro "
        "average over the 8 templates (wMAPE and risk-class error, RCE).",
        "",
        "| ε | M-All wMAPE | M-Roots wMAPE | M-Opt wMAPE | M-All RCE | M-Roots RCE | M-Opt RCE "
        "| order M-Opt < M-Roots < M-All |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    ratios = []
    for eps in eps_list:
        w = {m: _macro(target, m, eps, "wmape") for m in ("M-All", "M-Roots", "M-Opt")}
        c = {m: _macro(target, m, eps, "rce") for m in ("M-All", "M-Roots", "M-Opt")}
        order = w["M-Opt"] < w["M-Roots"] < w["M-All"]
        lines.append(
            f"| {eps:g} | {_pct2(w['M-All'])} | {_pct2(w['M-Roots'])} | {_pct2(w['M-Opt'])} | "
            f"{_pct(c['M-All'])} | {_pct(c['M-Roots'])} | {_pct(c['M-Opt'])} | "
            f"{'met' if order else 'not met'} |"
        )
        ratios.append(
            f"ε = {eps:g}: M-All / M-Opt {w['M-All'] / w['M-Opt']:.2f}x, M-Roots / M-Opt "
            f"{w['M-Roots'] / w['M-Opt']:.3f}x"
        )
    lines += [
        "",
        "RootGuard's gain over M-All is the cache ("
        + "; ".join(ratios)
        + "). The sensitivity-weighted split adds little over the equal one, as in the "
        "offline evaluation (docs/rootguard/report.md): a difference of a few percent of the "
        f"error, with {cfg['people']} people per template and one draw per RootGuard session "
        "whatever its turns; no significance test was run, so the order of M-Opt and M-Roots "
        "is not established here -- only that both are well below M-All.",
    ]
    lines += ["", f"Per template, ε = {eps_list[0]:g} (wMAPE):", ""]
    lines += ["| template | M-All | M-Roots | M-Opt |", "|---|---:|---:|---:|"]
    for title in dict.fromkeys(r["template"] for r in target):
        cells = {
            r["method"]: r["wmape"]
            for r in target
            if r["template"] == title and r["epsilon"] == eps_list[0]
        }
        lines.append(
            f"| {title} | {_pct(cells['M-All'])} | {_pct(cells['M-Roots'])} | "
            f"{_pct(cells['M-Opt'])} |"
        )
    spent = {(r["method"], r["epsilon"]): r["mean_epsilon_per_session"] for r in results["spent"]}
    lines += [
        "",
        "ε spent per session (per privacy unit, summed over the template's roots): "
        + "; ".join(
            f"ε = {eps:g}: M-All {spent[('M-All', eps)]:.1f}, RootGuard {spent[('M-Roots', eps)]:.1f}"
            for eps in eps_list
        )
        + " -- M-All spends ε on every disclosure, RootGuard its budget once.",
        "",
        "## Reconstruction by an adversary pooling every service (goal: flat under RootGuard, "
        "falling under M-All)",
        "",
        "MAP estimate of each root from everything the four services received in the first q "
        "turns (population prior); wMAPE pooled over roots and people.",
        "",
    ]
    qs = sorted({r["q"] for r in results["reconstruction"]})
    lines += [
        "| ε | method | " + " | ".join(f"q = {q}" for q in qs) + " |",
        "|---|---|" + "---:|" * len(qs),
    ]
    for eps in eps_list:
        for method in ("M-All", "M-Roots", "M-Opt"):
            by_q = {
                r["q"]: r["wmape"]
                for r in results["reconstruction"]
                if r["method"] == method and r["epsilon"] == eps
            }
            lines.append(f"| {eps:g} | {method} | " + " | ".join(_pct(by_q[q]) for q in qs) + " |")
    plot = _plot(results, out)
    if plot:
        lines += ["", f"![reconstruction]({plot})"]
    lines += [
        "",
        "## What this shows and what it does not",
        "",
        "- Every disclosure went through the same rewriter the shipped `veil mcp proxy` runs; "
        "the compliance count is measured on what the recording services received, not on the "
        "proxy's own log.",
        "- The shapes are the ones the rewriter knows (named fields, name/value pairs, units, "
        "the free-text finder's contexts). A service that asks for a value in a shape nobody "
        "declared -- a field named `x` holding a number that is *not* exactly the true value, "
        "a sentence without a unit or an alias -- is outside what this measures; see "
        "docs/mcp.md, Limits.",
        "- Under RootGuard the adversary's error does not fall with more turns or more "
        "services: every service saw the same release. Under M-All it falls as answers pile up, "
        "and M-All also spends ε on every disclosure.",
        "- The scripted agent is not an LLM: it always sends every value; a model would send "
        "fewer, in more varied words.",
        "",
        f"Machine: {common.describe_environment(results['environment'])}.",
    ]
    path = out / common.REPORT
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
