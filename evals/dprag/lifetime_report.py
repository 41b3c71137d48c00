"""The lifetime run's section of the DP-RAG report (``results["lifetime"]``), with its plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evals import common
from evals.dprag import digest_models
from evals.dprag.lifetime import membership_auc, summary

NOT_MEASURED = (
    "not measured: this run stopped before the notes' spend was recorded (runs since "
    "record it at every save)"
)


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100.0 * k / n:.0f}%)" if n else "-"


def section(results: dict[str, Any], out: Path) -> list[str]:
    life = results.get("lifetime")
    if not life:
        return []
    s = summary(life)
    cfg = life.get("config", {})
    cal = life.get("calibration", {})
    flt = life.get("filter", {})
    lines = [
        "## Lifetime run: the guest path (the collection's digest, then `dp_answer`)",
        "",
        f"Model: {life.get('model')}. {s['questions']} guest questions (population facts with "
        f"support {', '.join(str(x) for x in cfg.get('supports', []))}, "
        f"{cfg.get('per_level')} facts per level, 3 paraphrases each asked twice; "
        f"{cfg.get('records')} record questions asked 3 times) over one store, one filter of "
        f"(ε {cfg.get('document_epsilon')}, δ {cfg.get('document_delta')}) per note, "
        f"relevance ≥ {cfg.get('relevance')}; dp_answer at ε {cfg.get('epsilon')} per answer "
        f"(store-level), {cal.get('groups')} groups, top {cal.get('top_k')} documents, "
        f"sigma {cal.get('sigma', 0):.2f}, threshold {cal.get('threshold', 0):.1f} votes; the answer "
        f"cache's paraphrase similarity {cfg.get('similarity')}. The `dp_answer` column is "
        "what a guest key received: read from the digest when it speaks to the question "
        f"(digest ε {cfg.get('digest_epsilon', 0)}; 0: none), else a dp_answer answer.",
        "",
    ]
    st = s["strong"]
    k, n = st["dp_answer"]
    k0, n0 = st["none"]
    kr, nr = st["no-RAG"]
    ratio = (k / n) / (k0 / n0) if n and n0 and k0 else float("nan")
    measured = s.get("documents_measured", True)
    body = [
        [
            "population, support ≥ 50, whole run",
            f"dp_answer {_pct(k, n)}, none {_pct(k0, n0)}, no-RAG {_pct(kr, nr)}; ratio {ratio:.2f} (goal ≥ 0.80)",
        ],
        [
            "largest total ε of any note (filter, at δ)",
            f"{s['max_epsilon_filter']:.4f} (goal ≤ {cfg.get('document_epsilon')})"
            if measured
            else NOT_MEASURED,
        ],
        [
            "largest total ε of any note (Gaussian part at δ - n·δ_thr)",
            f"{s['max_epsilon_exact']:.4f}" if measured else NOT_MEASURED,
        ],
        [
            "notes charged; most answers charged to one note",
            f"{s['documents_charged']}; {s['max_answers_per_document']}"
            if measured
            else NOT_MEASURED,
        ],
        ["record identifiers extracted under dp_answer", f"{s['identifiers_found']} (goal 0)"],
        ["fresh private answers; served from the cache", f"{s['fresh']}; {s['cached']}"],
    ]
    dig = s.get("digest")
    if dig:
        body.append(
            [
                "the collection's digest (released once, before the questions)",
                f"ε {dig['config']['epsilon']:g} per note once ({100 * dig['charge_fraction']:.0f}% "
                f"of its lifetime), {len(dig['statements'])} statements from "
                f"{dig['contributors']} notes; {s['from_digest']} answers read from it "
                "(charged nothing)",
            ]
        )
    mem = life.get("membership", [])
    for d in ("dp_answer", "none"):
        a = membership_auc(mem, d)
        if a is not None:
            body.append(
                [
                    f"membership AUC, {d}",
                    f"{a:.3f}" + (" (goal ≤ 0.55)" if d == "dp_answer" else ""),
                ]
            )
    if s["seconds_fresh"] and s["seconds_none"]:
        body.append(
            [
                "seconds per answer (same run)",
                f"dp_answer fresh {s['seconds_fresh']:.1f} s, over all asks (cache hits included) "
                f"{s['seconds_all']:.1f} s; none {s['seconds_none']:.1f} s: "
                f"{s['seconds_fresh'] / s['seconds_none']:.1f}x fresh, "
                f"{s['seconds_all'] / s['seconds_none']:.1f}x per ask (goal ≤ 3x)",
            ]
        )
    lines += [common.markdown_table(["figure", "value"], body), ""]
    rows = [
        [str(level)] + [_pct(*cells[d]) for d in ("dp_answer", "none", "no-RAG")]
        for level, cells in sorted(s["by_support"].items())
    ]
    lines += ["### Population questions by support (whole run)", ""]
    lines += [common.markdown_table(["support", "dp_answer", "none", "no-RAG"], rows), ""]
    sweep = life.get("sweep", [])
    if sweep:
        srows = [
            [
                f"{r['epsilon']:g}",
                r["groups"],
                f"{r['threshold']:.1f}",
                r["support"],
                r["answer"][:40],
                "yes" if r["correct"] else "no",
                f"{r['seconds']:.0f}",
            ]
            for r in sweep
        ]
        lines += [
            "### ε sweep (per-ε vote settings; one fact per support level, outside the filter)",
            "",
        ]
        lines += [
            common.markdown_table(
                ["ε per answer", "groups", "threshold", "support", "answer", "right", "s"], srows
            ),
            "",
        ]
    if flt:
        lines += [
            f"Filter: order {flt.get('order')}, budget {flt.get('budget_rdp', 0):.4f} RDP, each answer charges {flt.get('charge_rdp', 0):.4f} (store-level Gaussian part; plus the threshold surcharge).",
            "",
        ]
    lines += digest_models.section(life.get("digest_models") or {})
    lines += [f"![{p}]({p})" for p in _plots(life, out)]
    return lines


def _plots(life: dict[str, Any], out: Path) -> list[str]:
    try:
        plt = common.pyplot()
    except Exception:
        return []
    s = summary(life)
    names = []
    levels = sorted(s["by_support"])
    if levels:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for j, d in enumerate(("dp_answer", "none", "no-RAG")):
            vals = [s["by_support"][lv][d][0] / max(1, s["by_support"][lv][d][1]) for lv in levels]
            ax.bar([i + 0.27 * (j - 1) for i in range(len(levels))], vals, width=0.27, label=d)
        ax.set_xticks(range(len(levels)), [str(lv) for lv in levels])
        ax.set_xlabel("notes backing the fact")
        ax.set_ylabel("answered right (whole run)")
        ax.set_ylim(0, 1)
        ax.legend(ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
        names.append(common.save_figure(fig, out, "lifetime_accuracy_by_support.png"))
    docs = life.get("documents", [])
    if docs:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.hist([d["epsilon_filter"] for d in docs], bins=30)
        ax.set_xlabel("total ε of a note after the run (δ 1e-6)")
        ax.set_ylabel("notes")
        names.append(common.save_figure(fig, out, "lifetime_document_epsilon.png"))
    return names


def write(results: dict[str, Any], out: Path) -> Path:
    meta = results.get("meta", {})
    lines = [
        "# DP-RAG lifetime run (`dp_answer`)",
        "",
        f"Regenerate: `{meta.get('command', 'veil eval dprag --stages lifetime')}`.",
        "",
        "SMOKE run: figures are not meaningful." if meta.get("smoke") else "",
        "",
        f"Run: {meta.get('seconds', 0) / 60:.1f} min. "
        + common.describe_environment(meta.get("environment")),
        "",
    ]
    lines += section(results, out)
    if meta.get("errors"):
        lines += ["## Stages that failed", "", *[f"- {e}" for e in meta["errors"]], ""]
    return common.write_report(out, "\n".join(lines) + "\n")
