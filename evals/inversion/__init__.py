"""Hidden-state inversion: exact recovery, speed against the published method, noise, self-diagnosis.

Full run (SmolLM2-135M-Instruct, CPU; the committed report is docs/inversion/report.md)::

    veil eval inversion --threads 1 --out docs/inversion

Smoke run (``SMOKE``: a tiny random model, seconds; CI)::

    veil eval inversion --smoke --out DIR

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

The package follows the contract of :mod:`evals.common`: :mod:`.config` holds
``SMOKE`` and ``FULL``, :mod:`.data` the windows, :mod:`.run` the measurements,
:mod:`.report` the speed ratios, goals, plots and report.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evals.inversion.config import FULL, SMOKE, Config

__all__ = ["FULL", "SMOKE", "add_arguments", "evaluate", "render"]

# Options that override a field of the chosen configuration (None: keep it).
OVERRIDES = (
    "model",
    "windows",
    "window_length",
    "long_windows",
    "long_length",
    "code_windows",
    "random_windows",
    "published_tokens",
    "published_steps",
    "published_candidates",
    "sigmas",
    "sigma_windows",
    "unscreened_windows",
    "starved_candidates",
    "seed",
    "note",
)


def _sigmas(text: str) -> tuple[float, ...]:
    return tuple(float(s) for s in text.split(",") if s.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    f = FULL
    parser.add_argument("--model", default=None, help="model spec (default SmolLM2-135M)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--windows", type=int, help=f"10-token news windows ({f.windows})")
    parser.add_argument("--window-length", type=int, help=f"({f.window_length})")
    parser.add_argument(
        "--long-windows", type=int, help=f"windows of --long-length ({f.long_windows})"
    )
    parser.add_argument("--long-length", type=int, help=f"({f.long_length})")
    parser.add_argument(
        "--code-windows", type=int, help=f"10-token Python code windows ({f.code_windows})"
    )
    parser.add_argument(
        "--random-windows", type=int, help=f"10 uniformly random tokens ({f.random_windows})"
    )
    parser.add_argument(
        "--published-tokens",
        type=int,
        help=f"positions run with the published method ({f.published_tokens})",
    )
    parser.add_argument("--published-steps", type=int, help=f"K ({f.published_steps})")
    parser.add_argument("--published-candidates", type=int, help=f"C ({f.published_candidates})")
    parser.add_argument(
        "--sigmas",
        type=_sigmas,
        help="comma-separated noise levels for the sigma curve ("
        + ",".join(f"{s:g}" for s in f.sigmas)
        + ")",
    )
    parser.add_argument("--sigma-windows", type=int, help=f"({f.sigma_windows})")
    parser.add_argument(
        "--unscreened-windows",
        type=int,
        help=f"news windows also run without bfloat16 screening ({f.unscreened_windows})",
    )
    parser.add_argument(
        "--starved-candidates", type=int, help=f"C of the starved search ({f.starved_candidates})"
    )
    parser.add_argument("--seed", type=int, help=f"window sampling and noise seed ({f.seed})")
    parser.add_argument("--note", default=None, help="a note printed at the top of the report")


def evaluate(args: argparse.Namespace, config: Config) -> Path:
    import torch

    from evals.common import config_for
    from evals.inversion import report, run

    threads = max(1, args.threads)
    torch.set_num_threads(threads)
    config = config_for(args, config, OVERRIDES)
    results = run.evaluate(config, Path(args.out), threads=threads)
    path = report.write(results, Path(args.out))
    for line in report.goals(results):
        print(line)
    return path


def render(out: Path) -> Path:
    from evals.common import read_results
    from evals.inversion import report

    results = read_results(out)
    path = report.render(results, out)
    for line in report.goals(results):
        print(line)
    return path
