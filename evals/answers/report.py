"""``report.md`` and the plots of ``veil eval answers`` from ``results.json``."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from evals.common import (
    command,
    describe_environment,
    markdown_table,
    pyplot,
    save_figure,
)
from evals.common import (
    write_report as _write,
)

GOAL_RIGHT = 0.80  # answerable questions right, default model, the owner's default
GOAL_DECLINE = 0.90  # unanswerable questions declined


def _pct(n: int, d: int) -> str:
    return "-" if d == 0 else f"{n}/{d} ({100 * n / d:.0f}%)"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One summary per (model, principal, defense), in the order they ran."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in results["answers"]:
        out.setdefault((row["model"], row["principal"], row["defense"]), []).append(row)
    summaries = []
    for (model, principal, defense), rows in out.items():
        answerable = [r for r in rows if r["answerable"]]
        unanswerable = [r for r in rows if not r["answerable"]]
        cited = [r for r in answerable if r["cited"] is not None]
        summaries.append(
            {
                "model": model,
                "principal": principal,
                "defense": defense,
                "questions": len(rows),
                "answerable": len(answerable),
                "right": sum(r["right"] for r in answerable),
                "unanswerable": len(unanswerable),
                "declined": sum(r["right"] for r in unanswerable),
                "cited": sum(bool(r["cited"]) for r in cited),
                "citable": len(cited),
                "errors": sum(1 for r in rows if r.get("error")),
                "loops": sum(
                    1 for r in rows if r["repeats"] and r.get("finish_reason") == "length"
                ),
                "first_token_s": _median(
                    [r["first_token_s"] for r in rows if r.get("first_token_s")]
                ),
                "tokens_per_s": _median([r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]),
                "epsilon": _median([float(r["epsilon"]) for r in rows if r.get("epsilon")]),
                "by_kind": {
                    kind: [
                        sum(r["right"] for r in rows if r["kind"] == kind),
                        sum(1 for r in rows if r["kind"] == kind),
                    ]
                    for kind in dict.fromkeys(r["kind"] for r in rows)
                },
            }
        )
    return summaries


def goals(results: dict[str, Any]) -> list[str]:
    """The issue's goals, measured on the first model with the owner's no-noise answers."""
    notes = []
    summary = cells(results)
    for cell in summary:
        if cell["principal"] == "owner" and cell["defense"] == "none":
            right = cell["right"] / cell["answerable"] if cell["answerable"] else 0.0
            declined = cell["declined"] / cell["unanswerable"] if cell["unanswerable"] else 0.0
            notes.append(
                f"{cell['model']}, owner without noise: {100 * right:.0f}% of answerable questions "
                f"right (goal {100 * GOAL_RIGHT:.0f}%: {'met' if right >= GOAL_RIGHT else 'not met'}), "
                f"{100 * declined:.0f}% of unanswerable ones declined (goal "
                f"{100 * GOAL_DECLINE:.0f}%: {'met' if declined >= GOAL_DECLINE else 'not met'})"
            )
    loops = sum(c["loops"] for c in summary)
    notes.append(
        f"answers that ran to max_tokens repeating themselves: {loops} "
        f"(goal 0: {'met' if loops == 0 else 'not met'})"
    )
    return notes


def _plots(results: dict[str, Any], out: Path) -> list[str]:
    summary = cells(results)
    if not summary:
        return []
    plt = pyplot()
    names = []
    labels = [f"{c['model']}\n{c['principal']} {c['defense']}" for c in summary]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(summary)), 4))
    xs = range(len(summary))
    right = [c["right"] / c["answerable"] if c["answerable"] else 0 for c in summary]
    declined = [c["declined"] / c["unanswerable"] if c["unanswerable"] else 0 for c in summary]
    ax.bar([x - 0.2 for x in xs], right, 0.4, label="answerable: right")
    ax.bar([x + 0.2 for x in xs], declined, 0.4, label="unanswerable: declined")
    ax.axhline(GOAL_RIGHT, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of questions")
    ax.legend(fontsize=8)
    ax.set_title("Right answers and correct refusals")
    names.append(save_figure(fig, out, "answers.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for c in summary:
        if c["first_token_s"] and c["tokens_per_s"]:
            ax.scatter(c["first_token_s"], c["tokens_per_s"])
            ax.annotate(
                f"{c['model']} {c['principal']} {c['defense']}",
                (c["first_token_s"], c["tokens_per_s"]),
                fontsize=6,
            )
    ax.axvline(1.5, color="grey", linestyle="--", linewidth=1)
    ax.axhline(5, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("median first-token latency (s)")
    ax.set_ylabel("median tokens/s")
    ax.set_title("Speed (dashed: the goal, first token <= 1.5 s, >= 5 tokens/s)")
    names.append(save_figure(fig, out, "speed.png"))
    return names


def _options(config: dict[str, Any]) -> list[str]:
    """The options that made this run (what differs from the full configuration)."""
    from evals.answers.config import FULL

    options = ["--models", *config["models"]]
    if [tuple(c) for c in config.get("cells") or []] != list(FULL.cells):
        options += ["--cells", *(f"{w}:{d}" for w, d in config["cells"])]
    if config.get("limit"):
        options += ["--limit", str(config["limit"])]
    if config.get("max_tokens") != FULL.max_tokens:
        options += ["--max-tokens", str(config["max_tokens"])]
    for name, flag in (
        ("changelog_packages", "--changelog-packages"),
        ("copyright_packages", "--copyright-packages"),
    ):
        if config.get(name) not in (None, getattr(FULL, name)):
            options += [flag, str(config[name])]
    return options


def write_report(results: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(results, out)
    summary = cells(results)
    config = results["config"]
    asked = len(results["questions"])
    lines = [
        "# Answers: right, declined, cited, and how fast (veil eval answers)",
        "",
        f"Regenerate: `{command('answers', out, *_options(config), smoke=config['smoke'])}`",
        "",
        describe_environment(results.get("environment")),
        "",
        "## What was asked",
        "",
        f"{results['questions_built']} questions were built from real Debian records on the "
        f"machine ({results['documents']['changelog']} changelog entries of "
        f"{len(results['packages']['changelog'])} packages, "
        f"{results['documents']['copyright']} machine-readable copyright files), "
        f"{asked} of them asked in this run, each to every model and cell below, through "
        "the companion's HTTP API (upload, guest keys, streamed chat completions). Each "
        "answerable question is answered by exactly one document; the unanswerable ones ask "
        "for a bug no entry names, a version no entry has, or a package whose files are not "
        "in the store. An answer is right when its first line holds the recorded value (a "
        "version standing alone, the uploader's name or family name, the date in any common "
        "format, the licence's short name, the copyright holder, the upstream host) and does "
        "not decline; an unanswerable one is right when its first line declines. "
        f"`max_tokens` {config['max_tokens']}.",
        "",
        "## Results",
        "",
    ]
    rows = [
        [
            c["model"],
            c["principal"],
            c["defense"],
            _pct(c["right"], c["answerable"]),
            _pct(c["declined"], c["unanswerable"]),
            _pct(c["cited"], c["citable"]) if c["principal"] == "owner" or c["citable"] else "-",
            _fmt(c["first_token_s"]),
            _fmt(c["tokens_per_s"], 1),
            _fmt(c["epsilon"], 1),
            c["loops"],
            c["errors"],
        ]
        for c in summary
    ]
    lines.append(
        markdown_table(
            [
                "model",
                "who",
                "defense",
                "answerable: right",
                "unanswerable: declined",
                "answering doc cited",
                "first token s (median)",
                "tokens/s (median)",
                "ε per answer",
                "repetition loops",
                "errors",
            ],
            rows,
        )
    )
    lines += [
        "",
        "A guest's citations carry the document titles only with `--allow-titles` and never "
        "under a formal defense (`bounded`): there the cited column shows none by design.",
        "",
        "### By kind of question (right / asked)",
        "",
    ]
    kinds = list(dict.fromkeys(k for c in summary for k in c["by_kind"]))
    lines.append(
        markdown_table(
            ["model", "who", "defense", *kinds],
            [
                [
                    c["model"],
                    c["principal"],
                    c["defense"],
                    *(
                        f"{c['by_kind'][k][0]}/{c['by_kind'][k][1]}" if k in c["by_kind"] else "-"
                        for k in kinds
                    ),
                ]
                for c in summary
            ],
        )
    )
    lines += ["", "### Models", ""]
    lines.append(
        markdown_table(
            ["model", "parameters", "dtype", "load s", "process RSS GB after load", "what"],
            [
                [
                    m["model"],
                    f"{m['parameters'] / 1e6:.0f} M",
                    m["dtype"],
                    m["load_s"],
                    m["rss_gb"],
                    m["description"],
                ]
                for m in results["models"]
            ],
        )
    )
    lines += ["", "## Goals", ""] + [f"- {n}" for n in results.get("notes", [])]
    lines += ["", *(f"![{p}]({p})" for p in plots), ""]
    lines += ["## Packages whose records were used", ""]
    for body, packages in results["packages"].items():
        lines.append(f"- {body}: {', '.join(packages)}")
    lines += ["", "## Some answers", ""]
    sample = [r for r in results["answers"] if r["principal"] == "owner"][:12]
    questions = results["questions"]
    lines.append(
        markdown_table(
            ["model", "defense", "question", "gold", "first line of the answer", "right"],
            [
                [
                    r["model"],
                    r["defense"],
                    questions[r["q"]]["text"],
                    (questions[r["q"]]["gold"] or ["(decline)"])[0],
                    (r["answer"].strip().splitlines() or [""])[0][:80].replace("|", "/"),
                    "yes" if r["right"] else "no",
                ]
                for r in sample
            ],
        )
    )
    lines.append("")
    return _write(out, "\n".join(lines))
