"""How well does the auditor's setup order candidates? True-token ranks, before any search.

The inversion auditor's speed is the rank at which the true token comes in its candidate
order (``companion.audit.ranker``): a token in the first 8 costs one batch of forward
passes, one at rank 50,000 a screening of most of the vocabulary.  This benchmark builds
the quick setup for each configuration asked for (``--config`` takes ``SetupConfig``
overrides as JSON) and prints, for 10-token windows of the Lee news corpus and of
uniformly random tokens, the share of positions whose true token is in the first 1, 8, 64,
512 and 4,096 candidates, the mean and median rank, and the worst positions -- with the
setup's time.  No inversion is run: this is the order alone.  Each configuration is
built from nothing (``force``) in ``--home`` (default: a new temporary Veil home, which
joins and converts the model once; ``--home ~/.veil`` reuses that home's model copies and
replaces its setup for the model).

Run: ``python bench/audit_ranker_bench.py --model smollm2-135m-instruct --config '{}'
--config '{"random_fraction": 0.0, "sequences": 512}'`` (each setup 1-3 minutes on two
cores for SmolLM2, 3-4 for Qwen2.5-0.5B).  ``--out`` writes the JSON.  The figures quoted in
docs/methods/inversion.md (random_fraction 0 vs 0.5, first_rows) came from this
measurement.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _ranks(target: Any, artifacts: Any, windows: list[list[int]]) -> list[tuple[int, int]]:
    out = []
    for ids in windows:
        orders = artifacts.rank(target, target.hidden_states(ids))
        for position, (order, token) in enumerate(zip(orders, ids, strict=True)):
            out.append((position, int((order == token).nonzero()[0]) + 1))
    return out


def _summary(ranks: list[tuple[int, int]]) -> dict[str, Any]:
    import torch

    r = torch.tensor([x for _, x in ranks]).float()
    later = torch.tensor([x for p, x in ranks if p > 0]).float()
    return {
        **{f"top{k}": float((r <= k).float().mean()) for k in (1, 8, 64, 512, 4096)},
        "mean_rank": float(r.mean()),
        "median_rank": float(r.median()),
        "mean_rank_after_position_0": float(later.mean()) if later.numel() else None,
        "worst": sorted(ranks, key=lambda z: -z[1])[:8],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--config", action="append", default=None, help="SetupConfig JSON")
    parser.add_argument("--windows", type=int, default=20, help="windows of each kind (20)")
    parser.add_argument("--home", type=Path, default=None, help="VEIL_HOME for the setups")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import os
    import tempfile

    os.environ["VEIL_HOME"] = str(args.home or tempfile.mkdtemp(prefix="veil-ranker-bench-"))
    from companion.audit.ranker import SetupConfig, run_setup
    from companion.audit.service import open_target
    from evals.inversion.data import allowed_tokens, lee_text, windows_from

    target = open_target(args.model, threads=args.threads)
    results = []
    for text in args.config or ["{}"]:
        started = time.perf_counter()
        # force: each configuration is built from nothing (its table included) and timed
        artifacts = run_setup(target, SetupConfig(**json.loads(text)), force=True)
        setup_s = time.perf_counter() - started
        rng = random.Random(7)
        news = windows_from(target.encode(lee_text()), args.windows, 10, rng)
        allowed = allowed_tokens(target)
        rand = [[rng.choice(allowed) for _ in range(10)] for _ in range(args.windows)]
        row = {
            "model": args.model,
            "config": json.loads(text),
            "setup_s": setup_s,
            "timings": artifacts.meta.get("timings"),
            "news": _summary(_ranks(target, artifacts, news)),
            "random": _summary(_ranks(target, artifacts, rand)),
        }
        results.append(row)
        print(f"config {text}: setup {setup_s:.0f} s {row['timings']}")
        for kind in ("news", "random"):
            s = row[kind]
            print(
                f"  {kind:6} top1 {s['top1']:.2f} top8 {s['top8']:.2f} top64 {s['top64']:.2f} "
                f"top512 {s['top512']:.2f} top4096 {s['top4096']:.2f} mean {s['mean_rank']:.0f} "
                f"median {s['median_rank']:.0f}; worst {s['worst'][:4]}",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
