"""How fast is each chat model here, in each precision? First token and tokens/s, same run.

For every model (the bundled SmolLM2-135M-Instruct is the baseline; the others are
ids from ``GET /v1/models``) it loads the weights through
:func:`companion.models.load_causal_lm` (float32), then measures the same RAG-sized
prompt (a system message of retrieved records and a question, ~500 tokens with the
SmolLM2 tokenizer) with the companion's own prefill (chunks of 256 tokens) and a
greedy decode of ``--tokens`` tokens, in three forms of the weights:

* ``float32``: what the dequantised GGUF gives;
* ``int8``: ``torch.ao.quantization.quantize_dynamic`` on every ``nn.Linear`` (int8
  weights, activations quantised per batch);
* ``bfloat16``: the companion's ``--dtype auto`` on CPUs with AVX512-BF16/AMX.

It prints one line per (model, form) with the prefill time (what the first token
waits for), tokens/s, the ratio of each to the baseline's float32 in the same run,
the process's peak RSS, and the first words decoded (int8 can change them).  Run:
``python bench/model_bench.py [--models ID ...] [--tokens 16] [--out FILE.json]``.
Speed on a shared machine depends on its load: compare the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RECORD = (
    "bash (5.2.15-2) unstable; urgency=medium\n\n  * Remove one more pdf file without source. "
    "Closes: #1024598.\n\n -- Matthias Klose <doko@debian.org>  Mon, 02 Jan 2023 13:06:21 +0100\n"
)
QUESTION = "Who made the upload of bash version 5.2.15-2?"


def _peak_rss_gb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)


def measure(model: Any, tokenizer: Any, ids: list[int], tokens: int) -> dict[str, Any]:
    import torch

    from companion.decoding.generate import prefill

    with torch.inference_mode():
        t0 = time.perf_counter()
        cache, logits = prefill(model, ids, "cpu", chunk=256)
        first = time.perf_counter() - t0
        token = int(logits.argmax())
        out = [token]
        t0 = time.perf_counter()
        for _ in range(tokens):
            fwd = model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True)
            cache, token = fwd.cache, int(fwd.logits[0, -1].argmax())
            out.append(token)
        decode = time.perf_counter() - t0
    return {
        "first_token_s": round(first, 2),
        "tokens_per_s": round(tokens / decode, 2),
        "text": tokenizer.decode(out, skip_special_tokens=True)[:60],
        "load_average": round(os.getloadavg()[0], 1),
    }


def bench_model(spec: str, tokens: int, forms: list[str]) -> list[dict[str, Any]]:
    import copy

    import torch

    from companion.models import load_causal_lm

    t0 = time.perf_counter()
    loaded = load_causal_lm(spec, dtype="float32")
    load_s = round(time.perf_counter() - t0, 1)
    tokenizer = loaded.tokenizer
    messages = [
        {"role": "system", "content": "Answer from these records.\n\n" + RECORD * 6},
        {"role": "user", "content": QUESTION},
    ]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    params = sum(p.numel() for p in loaded.model.parameters())
    rows = []
    for form in forms:
        model = loaded.model
        if form == "int8":
            model = torch.ao.quantization.quantize_dynamic(
                copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8
            )
        elif form == "bfloat16":
            model = model.to(torch.bfloat16)
        row = {
            "model": spec,
            "form": form,
            "parameters": params,
            "load_s": load_s,
            "prompt_tokens": len(ids),
            **measure(model, tokenizer, list(ids), tokens),
            "peak_rss_gb": _peak_rss_gb(),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
        del model
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-instruct"])
    parser.add_argument("--forms", nargs="+", default=["float32", "int8", "bfloat16"])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from companion.models import DEFAULT_MODEL

    rows: list[dict[str, Any]] = []
    for spec in dict.fromkeys([DEFAULT_MODEL, *args.models]):
        rows += bench_model(spec, args.tokens, args.forms)
    base = next(r for r in rows if r["model"] == DEFAULT_MODEL and r["form"] == args.forms[0])
    for r in rows:
        r["first_token_ratio"] = round(r["first_token_s"] / base["first_token_s"], 2)
        r["tokens_per_s_ratio"] = round(r["tokens_per_s"] / base["tokens_per_s"], 2)
        print(
            f"{r['model']:32} {r['form']:9} first token {r['first_token_s']:6.2f} s "
            f"(x{r['first_token_ratio']}), {r['tokens_per_s']:5.2f} tokens/s "
            f"(x{r['tokens_per_s_ratio']}), peak RSS {r['peak_rss_gb']} GB, {r['text']!r}"
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
