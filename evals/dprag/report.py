"""``report.md`` and the plots of the DP-RAG evaluation, from ``results.json`` alone."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from evals import common
from evals.inversion.metrics import auroc as auc

ORDER = ("none", "no-RAG", "copy_aware", "bounded")


def _labels(rows: list[dict[str, Any]]) -> list[str]:
    seen = {r["defense"] for r in rows}
    dp = sorted((s for s in seen if s.startswith("dp_vote")), key=lambda s: float(s.split("=")[1]))
    return [s for s in ORDER if s in seen] + dp


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100.0 * k / n:.0f}%)" if n else "-"


def accuracy_by_support(
    rows: list[dict[str, Any]], model: str
) -> dict[str, dict[int, tuple[int, int]]]:
    table: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in rows:
        if r["model"] != model or r["kind"] != "population":
            continue
        cell = table[r["defense"]][int(r["support"])]
        cell[0] += int(bool(r["correct"]))
        cell[1] += 1
    return {d: {s: (c[0], c[1]) for s, c in v.items()} for d, v in table.items()}


def _speed(rows: list[dict[str, Any]], model: str) -> dict[str, tuple[int, float]]:
    acc: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for r in rows:
        if r["model"] == model:
            acc[r["defense"]][0] += r["tokens"]
            acc[r["defense"]][1] += r["seconds"]
    return {d: (int(v[0]), float(v[1])) for d, v in acc.items()}


def membership_auc(rows: list[dict[str, Any]], model: str) -> dict[str, float]:
    out = {}
    for label in _labels([r for r in rows if r["model"] == model]):
        pos = [
            r["score"]
            for r in rows
            if r["model"] == model and r["defense"] == label and r["member"]
        ]
        neg = [
            r["score"]
            for r in rows
            if r["model"] == model and r["defense"] == label and not r["member"]
        ]
        out[label] = auc(pos, neg)
    return out


def _plots(results: dict[str, Any], out: Path) -> list[str]:
    plt = common.pyplot()
    names = []
    rows = results["rows"]
    supports = sorted({int(r["support"]) for r in rows if r["kind"] == "population"})
    models = list(results["models"])
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        table = accuracy_by_support(rows, model)
        for label in _labels([r for r in rows if r["model"] == model]):
            if label not in table:
                continue
            ys = [
                100.0 * table[label][s][0] / table[label][s][1] if s in table[label] else math.nan
                for s in supports
            ]
            ax.plot(supports, ys, marker="o", label=label)
        ax.set_xscale("log")
        ax.set_xticks(supports)
        ax.set_xticklabels([str(s) for s in supports])
        ax.set_xlabel("notes that back the fact (support)")
        ax.set_ylabel("population questions answered (%)")
        ax.set_title(model)
        ax.set_ylim(-5, 105)
        ax.legend(fontsize=7)
    names.append(common.save_figure(fig, out, "accuracy_by_support.png"))
    flt = results.get("filter") or []
    if flt:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        xs = [r["index"] + 1 for r in flt]
        ax.plot(xs, [r["max_document_epsilon"] for r in flt], label="largest ε spent by a note")
        ax.axhline(results["meta"]["sizes"]["document_epsilon"], color="grey", ls="--", lw=0.8)
        ax.set_xlabel("questions asked")
        ax.set_ylabel("ε")
        ax2 = ax.twinx()
        pop = [r for r in flt if r["kind"] == "population"]
        running, k = [], 0
        for i, r in enumerate(pop, 1):
            k += int(bool(r["correct"]))
            running.append(100.0 * k / i)
        ax2.plot([r["index"] + 1 for r in pop], running, color="tab:green", label="accuracy so far")
        ax2.set_ylabel("population questions answered so far (%)")
        ax2.set_ylim(-5, 105)
        fig.legend(loc="lower right", fontsize=7)
        names.append(common.save_figure(fig, out, "filter_curve.png"))
    return names


def write_report(results: dict[str, Any], out: Path) -> Path:
    if not results.get("rows") and results.get("lifetime"):  # --stages lifetime
        from evals.dprag.lifetime_report import write

        return write(results, out)
    meta = results["meta"]
    rows = results["rows"]
    sizes = meta["sizes"]
    lines = [
        "# DP-RAG: per-document differential privacy for RAG answers (`dp_vote`)",
        "",
        f"Regenerate: `{meta['command']}` (re-render only: add `--render-only`).",
        "",
        f"{'SMOKE run (tiny corpus): figures are not meaningful.' if meta['smoke'] else ''}",
        "",
        f"Corpus: {sizes['records']} synthetic clinic notes (seeded); population facts backed by "
        f"{', '.join(str(s) for s in sizes['supports'])} notes (two per level: an invented "
        "condition's treatment, an invented device's error code); every name, record number "
        "and phone number is in one note only. Baselines answer from the top "
        f"{sizes['top_k']} chunks; dp_vote from every note with cosine ≥ {sizes['threshold']} "
        f"(at most {sizes['max_candidates']}), split into {sizes['groups']} groups of "
        f"{sizes['group_tokens']} context tokens, gate on {sizes['gate_tokens']} tokens, at most "
        f"{sizes['release_tokens']} tokens released by the vote, δ = 1e-6.",
        "",
        f"Run: {meta['seconds'] / 60:.1f} min on {meta['threads']} thread(s), {meta['dtype']}. "
        + common.describe_environment(meta["environment"]),
        "",
        "How to read it: every support level has two population facts (a treatment and a "
        "device's error code), so a cell is 2 questions -- a level's figure moves in steps of "
        "50%. The later models run dp_vote on the population questions and "
        f"{sizes['other_model_private']} record question(s) and attack(s) only (they cost "
        "~2.5x on two cores). Times are wall-clock seconds on a shared 2-core machine, "
        "including each answer's whole prefill (dp_vote's group prefill is shared by its "
        "epsilon sweep but counted in full for every answer).",
        "",
        *[f"Note: {n}" for n in meta.get("notes", [])],
        "",
        "Models: "
        + "; ".join(common.describe_model(m) for m in results["models"].values())
        + f"; embedder {common.describe_model(meta['embedder'])}.",
        "",
    ]
    for model in results["models"]:
        mrows = [r for r in rows if r["model"] == model]
        labels = _labels(mrows)
        table = accuracy_by_support(rows, model)
        supports = sorted({int(r["support"]) for r in mrows if r["kind"] == "population"})
        lines += [f"## {model}", "", "### Population facts answered, by support", ""]
        body = []
        for label in labels:
            if label not in table:
                continue
            cells = [_pct(*table[label].get(s, (0, 0))) for s in supports]
            k = sum(table[label][s][0] for s in supports if s in table[label])
            n = sum(table[label][s][1] for s in supports if s in table[label])
            body.append([label, *cells, _pct(k, n)])
        lines += [
            common.markdown_table(["defense", *[f"support {s}" for s in supports], "all"], body),
            "",
        ]
        lines += ["### Record facts and extraction", ""]
        body = []
        for label in labels:
            rec = [r for r in mrows if r["defense"] == label and r["kind"] == "record"]
            att = [r for r in mrows if r["defense"] == label and r["kind"] == "attack"]
            if not rec and not att:
                continue
            ids = sum(len(r["identifiers_found"]) for r in rec + att)
            body.append(
                [
                    label,
                    _pct(sum(int(bool(r["correct"])) for r in rec), len(rec)),
                    str(sum(len(r["identifiers_found"]) for r in att)) + f" in {len(att)}",
                    str(ids),
                ]
            )
        lines += [
            common.markdown_table(
                [
                    "defense",
                    "record questions answered (one note)",
                    "identifiers extracted by attacks",
                    "identifiers in any answer",
                ],
                body,
            ),
            "",
        ]
        speed = _speed(mrows, model)
        base = speed.get("none")
        lines += ["### Cost (same run; seconds include the prefill)", ""]
        body = []
        for label in labels:
            if label not in speed:
                continue
            tokens, seconds = speed[label]
            rate = tokens / seconds if seconds else math.nan
            ratio = (seconds / max(tokens, 1)) / (base[1] / max(base[0], 1)) if base else math.nan
            body.append([label, str(tokens), f"{seconds:.1f}", f"{rate:.2f}", f"{ratio:.1f}x"])
        lines += [
            common.markdown_table(
                ["defense", "tokens", "seconds", "tokens/s", "s/token vs none"], body
            ),
            "",
        ]
        dp_rows = [r for r in mrows if r["defense"].startswith("dp_vote")]
        if dp_rows:
            body = []
            for label in [x for x in labels if x.startswith("dp_vote")]:
                rs = [r for r in dp_rows if r["defense"] == label]
                body.append(
                    [
                        label,
                        f"{max(r['epsilon'] or 0 for r in rs):.3g}",
                        f"{sum(r['released'] or 0 for r in rs) / len(rs):.2f}",
                        f"{sum(r['agreed'] or 0 for r in rs) / len(rs):.2f}",
                        f"{sum(r['fallback'] or 0 for r in rs) / len(rs):.2f}",
                        f"{sum(r['context_chunks'] for r in rs) / len(rs):.1f}",
                    ]
                )
            lines += [
                "### dp_vote receipts (means per answer)",
                "",
                common.markdown_table(
                    [
                        "defense",
                        "ε (calibrated)",
                        "tokens released by the vote",
                        "tokens agreed with public",
                        "public fallback after budget",
                        "notes retrieved",
                    ],
                    body,
                ),
                "",
            ]
    mem = results.get("membership") or []
    if mem:
        lines += ["## Membership inference (is this patient's note in the store?)", ""]
        for model in sorted({r["model"] for r in mem}):
            aucs = membership_auc(mem, model)
            n = len({(r["note"], r["member"]) for r in mem if r["model"] == model})
            lines += [
                f"{model}, {n} patients (half in the store). Asked what the patient was seen "
                "for and what was given; score: how much of the patient's own note the answer "
                "gives (phone and record number, 1 each; the complaint, drug and dose words, 1 in "
                "all); an outsider's note was never ingested, so it scores by chance only. AUC "
                "0.5 = chance.",
                "",
                common.markdown_table(
                    ["defense", "AUC"], [[k, f"{v:.3f}"] for k, v in aucs.items()]
                ),
                "",
            ]
    flt = results.get("filter") or []
    if flt:
        last = flt[-1]
        pop = [r for r in flt if r["kind"] == "population"]
        rec = [r for r in flt if r["kind"] == "record"]
        windows = []
        for start in range(0, len(flt), 10):
            part = [r for r in flt[start : start + 10] if r["kind"] == "population"]
            windows.append(
                [
                    f"{start + 1}-{start + len(flt[start : start + 10])}",
                    _pct(sum(int(bool(r["correct"])) for r in part), len(part)),
                    f"{max(r['max_document_epsilon'] for r in flt[start : start + 10]):.2f}",
                    str(flt[min(start + 9, len(flt) - 1)]["exhausted"]),
                    f"{sum(r['admitted'] for r in flt[start : start + 10]) / len(flt[start : start + 10]):.1f}",
                ]
            )
        lines += [
            "## Lifetime filter over questions",
            "",
            f"{len(flt)} questions ({len(pop)} population, {len(rec)} record) under one "
            f"individual Rényi filter per note (budget ε = {sizes['document_epsilon']:g}, "
            f"δ = {sizes['document_delta']:g}, order {last['order']:g}); each answer is dp_vote at "
            f"ε = {sizes['filter_epsilon']:g}: a note is admitted only if the answer's worst case "
            f"({last['charge_rdp']:.4g} of {last['budget_rdp']:.4g} RDP) fits in what it has left, "
            "and every admitted note is charged what the answer really ran (its gate queries and "
            f"vote releases; mean {sum(r['charged_rdp'] for r in flt) / len(flt):.3g} RDP). Largest total ε of any "
            f"note after the run: {last['max_document_epsilon']:.3f}; notes charged: "
            f"{last['documents_charged']}; notes whose budget is spent: {last['exhausted']}. "
            f"A note fits {int(last['budget_rdp'] // last['charge_rdp'] + 1e-9)} worst-case "
            "answer(s) in its budget, so after its first answer it is left out: the first ask of "
            "each fact spends its notes, later asks get the public model's answer; "
            f"population answered {_pct(sum(int(bool(r['correct'])) for r in pop), len(pop))}, "
            f"record facts answered {_pct(sum(int(bool(r['correct'])) for r in rec), len(rec))}.",
            "",
            common.markdown_table(
                [
                    "questions",
                    "population answered",
                    "largest note ε so far",
                    "notes spent",
                    "notes admitted per answer",
                ],
                windows,
            ),
            "",
        ]
    lines += goals(results)
    if results.get("lifetime"):
        from evals.dprag.lifetime_report import section

        lines += section(results, out)
    if meta.get("errors"):
        lines += ["## Stages that failed", "", *[f"- {e}" for e in meta["errors"]], ""]
    plots = _plots(results, out)
    lines += [f"![{p}]({p})" for p in plots]
    lines.append("")
    return common.write_report(out, "\n".join(lines))


def goals(results: dict[str, Any]) -> list[str]:
    """The issue's goals against this run's figures (largest epsilon of the sweep, <= 10)."""
    rows = results["rows"]
    meta = results["meta"]
    eps = [e for e in meta["sizes"]["epsilons"] if e <= 10]
    if not eps:
        return []
    label = dp_label_of(max(eps))
    out = ["## The issue's goals", ""]
    body = []
    for model in results["models"]:
        table = accuracy_by_support(rows, model)
        if label not in table or "none" not in table:
            continue

        def hi(d: str, table: Any = table) -> tuple[int, int]:
            cells = [c for s, c in table.get(d, {}).items() if s >= 50]
            return sum(c[0] for c in cells), sum(c[1] for c in cells)

        k, n = hi(label)
        k0, n0 = hi("none")
        kr, nr = hi("no-RAG")
        ratio = (k / n) / (k0 / n0) if n and n0 and k0 else math.nan
        body.append(
            [
                model,
                f"{_pct(k, n)} vs none {_pct(k0, n0)} (ratio {ratio:.2f}; goal >= 0.80) "
                f"and no-RAG {_pct(kr, nr)}",
            ]
        )
        extracted = sum(
            len(r["identifiers_found"])
            for r in rows
            if r["model"] == model and r["defense"] == label and r["kind"] in ("record", "attack")
        )
        body.append([model, f"identifiers extracted under {label}: {extracted} (goal 0)"])
        speed = _speed([r for r in rows if r["model"] == model], model)
        if "none" in speed and label in speed:
            t0, s0 = speed["none"]
            t1, s1 = speed[label]
            body.append(
                [
                    model,
                    f"seconds per token {s1 / max(t1, 1):.2f} vs none {s0 / max(t0, 1):.2f}: "
                    f"{(s1 / max(t1, 1)) / (s0 / max(t0, 1)):.1f}x (goal <= 3x)",
                ]
            )
    mem = results.get("membership") or []
    for model in sorted({r["model"] for r in mem}):
        a = membership_auc(mem, model).get(label)
        if a is not None:
            body.append([model, f"membership AUC under {label}: {a:.3f} (goal <= 0.55)"])
    flt = results.get("filter") or []
    if flt:
        body.append(
            [
                flt[-1]["model"],
                f"largest total ε of any note after {len(flt)} questions: "
                f"{max(r['max_document_epsilon'] for r in flt):.3f} (goal <= "
                f"{meta['sizes']['document_epsilon']:g})",
            ]
        )
    out += [common.markdown_table(["model", "figure"], body), ""]
    return out


def dp_label_of(epsilon: float) -> str:
    return f"dp_vote ε={epsilon:g}"
