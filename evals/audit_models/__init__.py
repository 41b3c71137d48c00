"""The inversion auditor on the models the companion serves: per model, per layer, the KV cache.

Full run (the committed report is docs/audit-models/report.md)::

    veil eval audit-models --threads 2 --out docs/audit-models

Smoke run (``SMOKE``: two tiny random models, one with the served default model's tokenizer; a minute; CI)::

    veil eval audit-models --smoke --out DIR

Per model (SmolLM2-135M and Qwen2.5-Coder-0.5B by default): the quick setup's time (real
text, no generation; ``companion.audit.ranker.SetupConfig``), exact match and proof of
10-token windows of the Lee news corpus (gensim's wheel; text the ranker never saw) and of
random tokens, s/token, and the published method (K Adam steps, C candidates) on the first
positions in the same run for the ratio.  For the first model: exact recovery by layer
(block outputs: what a split deployment sends), from each block's cached keys and values,
and per-position certificates (companion.audit.certify) under Gaussian noise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evals.audit_models.config import FULL, SMOKE, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "render"]

OVERRIDES = ("windows", "random_windows", "published_tokens", "kv_windows", "seed", "note")


def _specs(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.split(",") if s.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    f = FULL
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument(
        "--models", type=_specs, help="comma-separated model specs (" + ",".join(f.models) + ")"
    )
    parser.add_argument("--layers", type=_ints, help="blocks of the first model to sweep")
    parser.add_argument("--kv-layers", type=_ints, help="blocks whose KV cache is inverted")
    parser.add_argument("--windows", type=int, help=f"news windows per model/layer ({f.windows})")
    parser.add_argument("--random-windows", type=int, help=f"({f.random_windows})")
    parser.add_argument("--published-tokens", type=int, help=f"({f.published_tokens})")
    parser.add_argument("--kv-windows", type=int, help=f"({f.kv_windows})")
    parser.add_argument("--seed", type=int, help=f"({f.seed})")
    parser.add_argument("--note", default=None, help="a note printed at the top of the report")


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    import torch

    from evals.audit_models import report, run
    from evals.common import config_for

    threads = max(1, args.threads)
    torch.set_num_threads(threads)
    config = config_for(args, config, (*OVERRIDES, "models", "layers", "kv_layers"))
    results = run.evaluate(config, Path(args.out), threads=threads)
    return report.write(results, Path(args.out))


def render(out: Path) -> Path:
    from evals.audit_models import report
    from evals.common import read_results

    return report.render(read_results(out), out)
