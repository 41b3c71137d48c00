"""The audit-models report: tables per model, per layer and per KV block; the certificate plot."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evals import common

SEED_EXACT = 0.975  # the seed paper's exact match (../shared/SPEC.md)
SEED_S_PER_TOKEN = 17.8  # its published seconds per token


def write(results: dict[str, Any], out: Path) -> Path:
    common.write_results(out, results, indent=2)
    return render(results, out)


def render(results: dict[str, Any], out: Path) -> Path:
    plot(out, results)
    return common.write_report(out, markdown(results))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _s(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.3g}"


def _where(row: dict[str, Any]) -> str:
    block = "last layer (after the final norm)" if row["layer"] == -1 else f"block {row['layer']}"
    if row["source"] == "hidden":
        return block
    block = "the last block" if row["layer"] == -1 else f"block {row['layer']}"
    return f"{block}'s cached {row['source']}"


def conclusion(model: str, row: dict[str, Any]) -> str:
    """What a person should conclude from one row, in words."""
    exact, proven = row["exact_match"], row["tokens_proven"]
    where = _where(row)
    if exact == 1.0 and proven == 1.0:
        return f"{where} of {model}: 100% of the text given back, every token proven"
    return (
        f"{where} of {model}: {_pct(exact)} of windows recovered exactly, "
        f"{_pct(proven)} of tokens proven"
    )


def markdown(r: dict[str, Any]) -> str:
    env = r["environment"]
    lines = [
        "# The inversion auditor on the models the companion serves",
        "",
        "Regenerate with `veil eval audit-models --threads 2 --out docs/audit-models` "
        "(runs each model's quick setup unless it is already done with the same "
        "configuration); `--render-only` re-renders this page from results.json; CI runs "
        "`--smoke` on two tiny random models, one with its own 320-token vocabulary and one "
        "with the served default's tokenizer (Qwen2.5's, 152 k tokens).",
        "",
        f"- Machine: Python {env.get('python')}, torch {env.get('torch')}; "
        f"{env.get('machine')}, {env.get('cpu_cores')} CPU cores (load average "
        f"{env.get('load_average')} at start), torch threads {r.get('threads')}; started "
        f"{env.get('started')}",
        f"- Smoke run: {r['smoke']}; whole run {r.get('elapsed_s', 0):.0f} s",
    ]
    if r.get("note"):
        lines.append(f"- Note: {r['note']}")
    lines += [
        "",
        "## Per model",
        "",
        "Setup: the quick setup (`veil audit setup`: 1,024 sequences of 64 tokens, half "
        "real text this machine has and half uniformly random tokens, no generation, "
        "their states from the bfloat16 copy where this CPU has fast bfloat16, a sampled "
        "softmax; 16,384 two-token sequences for the first two positions; the position-0 "
        "table only where it is cheap"
        + (
            "; the smoke run's setups are far smaller: evals/audit_models/config.py). "
            if r["smoke"]
            else "). "
        )
        + "Windows: 10-token windows of the Lee news corpus (never trained on) and uniformly "
        "random tokens; every committed token is proven by a forward pass or the position "
        "is reported unresolved. Published: the seed method (K Adam steps, C candidates) "
        "on the first positions of one window, same run, same machine.",
        "",
        "| model | parameters | vocabulary | setup s | table | news windows | news exact "
        "| tokens proven | news s/token | p95 | worst | random tokens | random exact "
        "| random proven | random s/token | published s/token | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in r["models"]:
        news, rand, pub = m["news"], m["random"], m["published"]
        lines.append(
            f"| {m['spec']} | {m['parameters'] / 1e6:.3g} M | {m['vocab']} | {_s(m['setup_s'])} "
            f"| {'yes' if m['table'] else 'no'} | {news['windows']} | {_pct(news['exact_match'])} "
            f"| {_pct(news['tokens_proven'])} | {_s(news['mean_s_per_token'])} "
            f"| {_s(news.get('p95_s_per_token'))} | {_s(news.get('worst_s_per_token'))} "
            f"| {rand['tokens']} | {_pct(rand['exact_match'])} | {_pct(rand['tokens_proven'])} "
            f"| {_s(rand['mean_s_per_token'])} "
            f"| {_s(pub['mean_s_per_token'])} | {m['ratio']:.0f}x |"
        )
    for m in r.get("skipped", []):
        lines.append(f"| {m['spec']} | not run: {m['why']} |" + " |" * 15)
    lines += _goal_lines(r)
    lines += [
        "",
        f"The seed paper: {100 * SEED_EXACT:.1f}% exact at {SEED_S_PER_TOKEN} s/token (its "
        "hardware); the ratio column compares with the published method run here. A token "
        "not proven is *ambiguous* when other vocabulary entries have bit-identical input "
        "embeddings (no forward pass can tell them apart; the auditor lists them) or "
        "*unresolved* when no entry reproduces the state.",
        "",
        "## By layer, and the KV cache",
        "",
        "Each row has its own setup (a ranker per layer and source). Block k = the output "
        "of block k (what split inference sends on); the KV rows invert a block's cached "
        "keys (after their rotary encoding) or values, every KV head concatenated -- what a "
        "leaked or shared prefix cache holds.",
        "",
        "| what leaked | width | setup s | windows | exact | tokens proven | mean s/token "
        "| worst | conclusion |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    first = r["models"][0]["spec"] if r["models"] else "the model"
    for row in [*r["layers"], *r["kv"]]:
        lines.append(
            f"| {_where(row)} | {row['width']} | {_s(row['setup_s'])} | {row['windows']} "
            f"| {_pct(row['exact_match'])} | {_pct(row['tokens_proven'])} "
            f"| {_s(row['mean_s_per_token'])} | {_s(row.get('worst_s_per_token'))} "
            f"| {conclusion(first, row)} |"
        )
    lines += _certificate_lines(r["certificates"])
    return "\n".join(lines) + "\n"


# The goals (docs/methods/inversion.md): per model, measured in this run.
GOAL_RATIO = 500  # x the published method's s/token on natural text, same run and machine
GOAL_SETUP_S = 300  # setup on this machine
GOAL_RANDOM_S = 1.0  # s/token on uniformly random tokens


def _goal_lines(r: dict[str, Any]) -> list[str]:
    """Each goal's figure per model, and whether it is met (a run that measured it)."""
    lines = [
        "",
        f"Goals: news 100% exact and proven; at least {GOAL_RATIO}x the published "
        f"method's s/token; setup at most {GOAL_SETUP_S} s; random tokens at most "
        f"{GOAL_RANDOM_S:g} s/token.",
        "",
        "| model | news exact and proven | ratio | setup s | random s/token |",
        "|---|---|---|---|---|",
    ]

    def mark(value: str, ok: bool) -> str:
        return f"{value} ({'met' if ok else 'not met'})"

    for m in r["models"]:
        news, rand = m["news"], m["random"]
        exact = news["exact_match"] == 1.0 and news["tokens_proven"] == 1.0
        ratio, setup_s, random_s = m["ratio"], m["setup_s"], rand["mean_s_per_token"]
        cells = [
            mark(_pct(news["exact_match"]), exact),
            mark(f"{ratio:.0f}x", ratio >= GOAL_RATIO),
            mark(_s(setup_s), setup_s <= GOAL_SETUP_S),
            mark(_s(random_s), random_s <= GOAL_RANDOM_S),
        ]
        lines.append(f"| {m['spec']} | " + " | ".join(cells) + " |")
    return lines


def _certificate_lines(c: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Certificates per position (noise against the gap)",
        "",
        f"One news window's first {len(c['gaps'])} positions; the gap of each is the distance "
        "from its state to the nearest other vocabulary entry's state after the same prefix, "
        f"over the whole vocabulary ({c['seconds']:.0f} s for all). A position whose noise "
        "norm is under half its gap is *exposed for certain*: the nearest-state decoder "
        "recovers it whatever the noise's direction. Over the line it is *not certified "
        "exposed* -- not protected: the decoder may still succeed, and an attacker with a "
        "prior over text does better. sigma threshold = gap / (2 sqrt(d)): below it the "
        "expected Gaussian noise norm leaves the token certainly exposed.",
        "",
        "| position | token | gap | nearest other | sigma threshold |",
        "|---|---|---|---|---|",
    ]
    for tok, g in zip(c["tokens"], c["gaps"], strict=True):
        lines.append(
            f"| {g['position']} | `{tok!r}` | {_s(g['gap'])} | {g['nearest_id']} "
            f"| {_s(g['sigma_threshold'])} |"
        )
    lines += ["", "| sigma | exposed for certain | not certified |", "|---|---|---|"]
    for row in c["per_sigma"]:
        exposed = sum(p["exposed"] for p in row["positions"])
        lines.append(f"| {row['sigma']:g} | {exposed} | {len(row['positions']) - exposed} |")
    lines += ["", "![certificates](certificates.png)"]
    return lines


def plot(out: Path, r: dict[str, Any]) -> None:
    c = r.get("certificates")
    if not c or not c.get("gaps"):
        return
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [g["position"] for g in c["gaps"]]
    ax.bar(xs, [g["sigma_threshold"] for g in c["gaps"]], color="#4a7", label="sigma threshold")
    for row in c["per_sigma"]:
        ax.axhline(row["sigma"], ls="--", lw=1, color="#a44")
        ax.text(xs[-1] + 0.45, row["sigma"], f"sigma={row['sigma']:g}", fontsize=7, va="center")
    ax.set_yscale("log")
    ax.set_xticks(xs, [repr(t) for t in c["tokens"]], fontsize=7, rotation=30)
    ax.set_ylabel("Gaussian sigma")
    ax.set_title("Per position: noise below the bar leaves the token exposed for certain")
    ax.legend(fontsize=8)
    common.save_figure(fig, out, "certificates.png")
