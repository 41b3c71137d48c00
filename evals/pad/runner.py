"""Run the PAD evaluation: every defense against the same attacks and benign prompts.

The corpus is ingested into a real RAG store (all-MiniLM-L6-v2 embeddings,
SQLite, exact cosine top-k) in a temporary folder; each prompt retrieves its
chunks once, and every defense answers the same prompt.  Noise comes from a
generator seeded per (prompt, configuration) so a run is reproducible.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FULL", "SMOKE", "configurations", "merge_shards", "run_evaluation"]

from evals import common
from evals.pad.config import FULL, SMOKE, Config
from evals.pad.corpus import CORPUS_SEED, build_prompts, generate_records
from evals.pad.metrics import answer_correct, leakage, pii_found


@dataclass(frozen=True)
class EvalConfig:
    label: str
    defense: str
    params: dict[str, Any] = field(default_factory=dict)
    group: str = "main"  # main, sweep:<knob>, ablation


def configurations(smoke: bool) -> list[EvalConfig]:
    """Every configuration; ordered so that sharded runs finish the main table first.

    A configuration's noise seed depends on its position, so new ones go at the end.
    The copy-penalty ablation flips whatever the default is (so it always tests the choice).
    """
    from companion.decoding.defenses.copy_aware import CopyAwareConfig

    main = [
        EvalConfig("none", "none"),
        EvalConfig("copy-aware (default)", "copy_aware", {}),
        EvalConfig("PAD (paper) lambda=1", "pad", {"lambda_amp": 1.0}),
        EvalConfig("bounded eps=8", "bounded", {"epsilon": 8.0}),
        EvalConfig("static sigma=0.02", "static", {"sigma": 0.02}),
        EvalConfig("PAD (paper) lambda=3", "pad", {"lambda_amp": 3.0}),
    ]
    if smoke:
        return main[:4]
    if CopyAwareConfig().copy_penalty > 0:
        penalty = EvalConfig("copy-aware w/o copy penalty", "copy_aware", {"copy_penalty": 0.0})
    else:
        penalty = EvalConfig("copy-aware with copy penalty 1", "copy_aware", {"copy_penalty": 1.0})
    return [
        *main,
        EvalConfig(penalty.label, penalty.defense, penalty.params, "ablation"),
        EvalConfig("copy-aware w/o PII screen", "copy_aware", {"screen_pii": False}, "ablation"),
        EvalConfig("copy-aware sigma=2", "copy_aware", {"sigma": 2.0}, "sweep:sigma"),
        EvalConfig("bounded eps=1", "bounded", {"epsilon": 1.0}, "sweep:epsilon"),
    ]


def _answer_nll(model: Any, prompt_ids: list[int], answer_ids: list[int]) -> tuple[float, int]:
    """Sum of the undefended model's negative log-likelihood of the answer, and its length."""
    import torch

    if not answer_ids:
        return 0.0, 0
    ids = torch.tensor([prompt_ids + answer_ids])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    target = torch.tensor(answer_ids)
    return float(-logp.gather(-1, target[:, None]).sum()), len(answer_ids)


def run_evaluation(
    config: Config,
    out: Path,
    threads: int = 1,
    log: Any = print,
    shard: tuple[int, int] | None = None,
    configs: list[EvalConfig] | None = None,
    dtype: str = "auto",
) -> dict[str, Any]:
    """Run the evaluation; with ``shard=(i, n)`` only every n-th configuration from i.

    ``configs`` replaces :func:`configurations` (e.g. to compare two settings on the full set).

    A sharded run writes ``shards/shard-i-of-n.json`` under ``out``; :func:`merge_shards`
    combines them into the report (shards can run as parallel processes).
    """
    import torch

    from companion.answer import AnswerPlan, answer_now, chunks_context, generation_config
    from companion.decoding.config import DefenseConfig
    from companion.models import embedder_path, load_causal_lm, load_embedder
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore

    torch.set_num_threads(threads)
    sizes = config
    started = time.time()
    env = common.environment()
    lm = load_causal_lm(dtype=dtype)
    models = {
        "chat": common.model_identity(lm.source),
        "embedder": common.model_identity(embedder_path(), name="all-MiniLM-L6-v2"),
    }
    records = generate_records(sizes.records)
    prompts = build_prompts(records, sizes.attacks, sizes.targeted, sizes.benign)
    with tempfile.TemporaryDirectory() as tmp:
        rag = RagService(DocumentStore(Path(tmp) / "rag.sqlite3"), load_embedder("cpu"))
        for r in records:
            rag.ingest(f"dialogue-{r.id:03d}.txt", r.text.encode(), "clinic")
        retrieved = [[h.text for h in rag.search(p.text, "clinic", sizes.top_k)] for p in prompts]
        rag.store.close()
    results: dict[str, Any] = {"configs": [], "prompts": []}
    for p, chunks in zip(prompts, retrieved, strict=True):
        results["prompts"].append(
            {
                "kind": p.kind,
                "record": p.record_id,
                "text": p.text,
                "retrieved": chunks,
                "question": p.question,
                "accepted": list(p.answer) if p.answer else None,
            }
        )
    all_configs = configurations(config.smoke) if configs is None else configs
    for ci, cfg in enumerate(all_configs):
        if shard is not None and ci % shard[1] != shard[0]:
            continue
        defense = DefenseConfig.from_options(cfg.defense, cfg.params)
        t0 = time.time()
        rows = []
        for pi, (p, chunks) in enumerate(zip(prompts, retrieved, strict=True)):
            max_tokens = sizes.benign_tokens if p.kind == "benign" else sizes.attack_tokens
            plan = AnswerPlan.for_question(
                p.text, defense, max_tokens, seed=CORPUS_SEED + 1000 * ci + pi
            )
            # the evaluation's measured prompt and decoding: no stop strings
            context = chunks_context(chunks)
            res = answer_now(plan, context, lm, stop=())
            row: dict[str, Any] = {
                "kind": p.kind,
                "answer": res.text,
                "tokens": len(res.token_ids),
                **leakage(res.text, chunks),
            }
            # PII planted in every retrieved record counts, not only the targeted one.
            planted = [
                v for r in records if r.pii["mrn"] in " ".join(chunks) for v in r.pii.values()
            ]
            row["pii_available"] = len(planted)
            row["pii_found"] = pii_found(res.text, planted)
            if p.kind == "benign":
                assert p.answer is not None
                row["question"] = p.question
                row["correct"] = answer_correct(res.text, p.answer)
                prompt_ids = generation_config(plan, context, lm).prompt_ids
                nll, n = _answer_nll(lm.model, list(prompt_ids), res.token_ids)
                row["nll"], row["nll_tokens"] = nll, n
            receipt = res.receipt.to_dict() if res.receipt else {}
            # epsilon: the guarantee (formal defenses only, calibrated for max tokens);
            # nominal_epsilon: the figure of a defense that is not DP, for comparison only.
            row["epsilon"] = receipt.get("epsilon")
            row["formal"] = bool(receipt.get("formal"))
            row["nominal_epsilon"] = receipt.get("nominal_epsilon")
            row["gamma"] = receipt.get("gamma")
            row["protected"] = receipt.get("protected_tokens")
            rows.append(row)
        elapsed = time.time() - t0
        summary = summarise(rows)
        summary.update(label=cfg.label, defense=cfg.defense, params=cfg.params, group=cfg.group)
        summary["seconds"] = elapsed
        summary["index"] = ci
        results["configs"].append({"summary": summary, "rows": rows})
        if shard is not None:  # keep what is done: a shard can be merged while others run
            results["meta"] = _meta(sizes, models, env, threads, started, lm.dtype)
            _write_shard(results, out, shard)
        log(
            f"[{ci + 1}/{len(all_configs)}] {cfg.label}: repeat20={summary['repeat20']} "
            f"rouge={summary['rouge_leak']} pii={summary['pii_found']}/{summary['pii_available']} "
            f"ppl={summary['benign_ppl']:.3f} correct={summary['correct']}/{summary['benign']} "
            f"({elapsed:.0f} s)"
        )
    results["meta"] = _meta(sizes, models, env, threads, started, lm.dtype)
    out.mkdir(parents=True, exist_ok=True)
    if shard is not None:
        return results
    return finish(results, out)


def _meta(
    config: Config,
    models: dict[str, Any],
    env: dict[str, Any],
    threads: int,
    started: float,
    dtype: str,
) -> dict[str, Any]:
    return {
        "smoke": config.smoke,
        "sizes": config.sizes(),
        "models": models,
        "environment": env,
        "threads": threads,
        "dtype": dtype,
        "seconds": time.time() - started,
        "corpus_seed": CORPUS_SEED,
    }


def _write_shard(results: dict[str, Any], out: Path, shard: tuple[int, int]) -> None:
    folder = out / "shards"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"shard-{shard[0]}-of-{shard[1]}.json"
    tmp = path.with_suffix(".partial")
    tmp.write_text(json.dumps(results))
    tmp.replace(path)


def finish(results: dict[str, Any], out: Path) -> dict[str, Any]:
    """Order the configurations, add the changes relative to ``none``, run the guest path,
    write results and report."""
    from evals.pad.config import FULL, SMOKE
    from evals.pad.guest import run_guest_check
    from evals.pad.report import write_report

    results["configs"].sort(key=lambda c: c["summary"]["index"])
    _relative(results)
    config = SMOKE if results.get("meta", {}).get("smoke") else FULL
    # The same attacks, sent through the API with the owner's token and with a guest key:
    # what the response's citations and receipt give away (the default defense).
    results["guest"] = run_guest_check(config, defense="copy_aware")
    common.write_results(out, results)
    write_report(results, out)
    return results


def merge_shards(out: Path) -> dict[str, Any]:
    """Combine ``out/shards/*.json`` into one results file and report."""
    from py_core.errors import InvalidParameterError

    paths = sorted((out / "shards").glob("shard-*.json"))
    if not paths:
        raise InvalidParameterError(f"no shard results under {out / 'shards'}")
    parts = [json.loads(p.read_text()) for p in paths]
    merged = parts[0]
    for part in parts[1:]:
        merged["configs"].extend(part["configs"])
    merged["meta"]["seconds"] = max(p["meta"]["seconds"] for p in parts)
    merged["meta"]["shards"] = len(parts)
    if not any(c["summary"]["defense"] == "none" for c in merged["configs"]):
        raise InvalidParameterError("the shards do not include the 'none' baseline")
    return finish(merged, out)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    attacks = [r for r in rows if r["kind"] in ("attack", "targeted")]
    benign = [r for r in rows if r["kind"] == "benign"]
    nll = sum(r["nll"] for r in benign)
    n = sum(r["nll_tokens"] for r in benign)
    eps = [r["epsilon"] for r in rows if r["epsilon"] is not None]
    nominal = [r["nominal_epsilon"] for r in rows if r.get("nominal_epsilon") is not None]
    return {
        "attacks": len(attacks),
        "repeat20": int(sum(r["repeat20"] for r in attacks)),
        "repeat10": int(sum(r["repeat10"] for r in attacks)),
        "rouge_leak": int(sum(r["rouge_leak"] for r in attacks)),
        "pii_found": sum(len(r["pii_found"]) for r in attacks),
        "pii_available": sum(r["pii_available"] for r in attacks),
        "benign": len(benign),
        "correct": sum(bool(r["correct"]) for r in benign),
        "benign_ppl": math.exp(nll / n) if n else float("nan"),
        "median_epsilon": statistics.median(eps) if eps else None,
        "formal": bool(rows) and all(r.get("formal") for r in rows),
        "median_nominal_epsilon": statistics.median(nominal) if nominal else None,
        "answers_without_noise": sum(1 for r in rows if not r.get("protected")),
        "mean_gamma": statistics.fmean(r["gamma"] or 0.0 for r in rows),
    }


def _relative(results: dict[str, Any]) -> None:
    base = results["configs"][0]
    b = base["summary"]
    base_correct = [r.get("correct") for r in base["rows"] if r["kind"] == "benign"]
    for entry in results["configs"]:
        s = entry["summary"]

        def change(key: str, s: dict[str, Any] = s) -> float | None:
            return (s[key] - b[key]) / b[key] if b[key] else None

        s["repeat20_change"] = change("repeat20")
        s["repeat10_change"] = change("repeat10")
        s["rouge_change"] = change("rouge_leak")
        s["pii_change"] = change("pii_found")
        s["ppl_change"] = change("benign_ppl")
        mine = [r.get("correct") for r in entry["rows"] if r["kind"] == "benign"]
        kept = sum(1 for a, m in zip(base_correct, mine, strict=True) if a and m)
        s["still_correct"] = kept / sum(1 for a in base_correct if a) if any(base_correct) else None
