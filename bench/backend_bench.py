"""torch vs llama.cpp on the same GGUF, in one process: time to the first token and tokens/s.

    .venv/bin/python bench/backend_bench.py [--models ID ...] [--prompt-tokens 400]
        [--new-tokens 32] [--threads 1 2] [--skip-torch] [--runtimes llama-cpp-python cyllama]

For each model: the companion's torch path (the GGUF dequantized, float32 or the cached
bfloat16 copy for large models) and its llama.cpp path (companion/llamacpp.py on the
file's own weights, on each llama.cpp build installed: the one compiled here and the
cyllama wheel, companion/llamacpp_runtime.py), each timed on the same prompt through the model call the generation
loop makes: a chunked prefill (the time to the first token) and greedy single-token
steps.  Prints a table and the llama.cpp/torch ratios; the load average is printed with
each row because on a shared 2-core machine it dominates absolute figures.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from pathlib import Path
from typing import Any

import torch

from companion import llamacpp, llamacpp_runtime, models
from companion.decoding.generate import prefill

TEXT = (Path(__file__).resolve().parents[1] / "docs" / "methods" / "decoding.md").read_text()


def _time(model: Any, ids: list[int], new: int) -> tuple[float, float]:
    with torch.inference_mode():
        start = time.perf_counter()
        cache, logits = prefill(model, ids, torch.device("cpu"))
        first = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(new):
            token = int(logits[0].argmax())
            out = model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True)
            cache, logits = out.cache, out.logits[:, -1, :].float()
        rate = new / (time.perf_counter() - start)
    return first, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=[models.DEFAULT_MODEL])
    parser.add_argument("--prompt-tokens", type=int, default=400)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--runtimes", nargs="+", default=llamacpp_runtime.installed())
    args = parser.parse_args()
    if not llamacpp.available():
        raise SystemExit("no llama.cpp build is installed")
    rows = []
    for name in args.models:
        results: dict[str, tuple[float, float]] = {}
        for runtime in args.runtimes:
            os.environ["VEIL_LLAMACPP"] = runtime
            for threads in args.threads:
                os.environ["VEIL_THREADS"] = str(threads)
                lm = models.load_causal_lm(name, device="cpu", backend="llama.cpp")
                ids = lm.tokenizer(TEXT).input_ids[: args.prompt_tokens]
                _time(lm.model, ids[:16], 2)  # warm up (first-call allocation)
                load = os.getloadavg()[0]
                key = f"{runtime} {threads}t"
                results[key] = _time(lm.model, ids, args.new_tokens)
                label = f"llama.cpp ({runtime}), {threads} thread(s)"
                rows.append((name, label, lm.dtype, load, *results[key]))
                del lm
                gc.collect()
        if not args.skip_torch:
            for threads in args.threads:
                torch.set_num_threads(threads)
                lm = models.load_causal_lm(name, device="cpu", dtype="auto", backend="torch")
                ids = lm.tokenizer(TEXT).input_ids[: args.prompt_tokens]
                _time(lm.model, ids[:16], 2)
                load = os.getloadavg()[0]
                results[f"torch {threads}t"] = _time(lm.model, ids, args.new_tokens)
                rows.append(
                    (
                        name,
                        f"torch, {threads} thread(s)",
                        lm.dtype,
                        load,
                        *results[f"torch {threads}t"],
                    )
                )
                del lm
                gc.collect()
        for threads in args.threads:
            for runtime in args.runtimes:
                a, b = results.get(f"{runtime} {threads}t"), results.get(f"torch {threads}t")
                if a and b:
                    print(
                        f"{name}, {threads} thread(s): llama.cpp ({runtime})/torch first token "
                        f"{a[0] / b[0]:.2f}x the time, {a[1] / b[1]:.2f}x the tokens/s",
                        flush=True,
                    )
            if len(args.runtimes) == 2:
                a, b = (results.get(f"{r} {threads}t") for r in args.runtimes)
                if a and b:
                    print(
                        f"{name}, {threads} thread(s): {args.runtimes[0]}/{args.runtimes[1]} "
                        f"first token {a[0] / b[0]:.2f}x the time, {a[1] / b[1]:.2f}x the tokens/s",
                        flush=True,
                    )
    print(f"\n{args.prompt_tokens}-token prompt, {args.new_tokens} greedy steps\n")
    print("| model | backend | weights | load average | first token s | tokens/s |")
    print("|---|---|---|---|---|---|")
    for name, backend, dtype, load, first, rate in rows:
        print(f"| {name} | {backend} | {dtype} | {load:.1f} | {first:.2f} | {rate:.2f} |")


if __name__ == "__main__":
    main()
