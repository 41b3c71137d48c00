"""Benchmark of the decoding defenses: tokens/s against plain greedy, and time to first token.

Run: ``python bench/pad_bench.py [--tokens 48] [--repeats 3] [--threads 1] [--dtype auto]``.

Every defense generates the same number of tokens (EOS ignored) from the same
RAG prompt, interleaved round-robin ``--repeats`` times so that load from other
processes hits all of them alike; the figures are the fastest of the repeats
(the least disturbed by other processes on a shared machine), and ratios are
against plain greedy decoding measured in the same run (the same loop with no
defense, and transformers' own ``generate`` for reference).  Time to first
token covers what a chat request does before its first token: embedding the
question, exact top-k search over the store, building the prompt, prefill and
the first defended decoding step.  The last column is the time spent inside
the defense itself (the logits processor or the fusion step) per token, measured
directly, which is what the defense adds on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from companion.settings import DTYPES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=DTYPES,
        help="the chat model's precision (auto, the companion's default: bfloat16 where fast)",
    )
    parser.add_argument("--records", type=int, default=60)
    args = parser.parse_args(argv)

    import torch

    from companion.answer import AnswerPlan, chunks_context, generation_config, start
    from companion.decoding.generate import build_mechanism
    from companion.decoding.registry import DEFENSES
    from companion.models import load_causal_lm, load_embedder
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore
    from evals.pad.corpus import build_prompts, generate_records

    torch.set_num_threads(args.threads)
    inside: dict[str, float] = {}
    calls: dict[str, int] = {}

    class Timed:
        """The defense's mechanism, with the time spent in its own step recorded."""

        def __init__(self, name: str, inner: Any) -> None:
            self.name, self.inner, self.ledger = name, inner, inner.ledger

        def step(self, *a: Any) -> Any:
            t0 = time.perf_counter()
            out = self.inner.step(*a)
            inside[self.name] = inside.get(self.name, 0.0) + time.perf_counter() - t0
            calls[self.name] = calls.get(self.name, 0) + 1
            return out

    def build_timed(config: Any, ctx: Any) -> Any:
        mechanism = build_mechanism(config, ctx)
        return None if mechanism is None else Timed(config.name, mechanism)

    lm = load_causal_lm(dtype=args.dtype)
    records = generate_records(args.records)
    question = build_prompts(records, 0, 0, 1)[0].text
    with tempfile.TemporaryDirectory() as tmp:
        rag = RagService(DocumentStore(Path(tmp) / "bench.sqlite3"), load_embedder("cpu"))
        for r in records:
            rag.ingest(f"d{r.id}.txt", r.text.encode(), "bench")
        rag.search("warm up", "bench", 2)

        context = chunks_context([h.text for h in rag.search(question, "bench", 2)])

        def run(defense: str, n: int, first_only: bool = False) -> float:
            plan = AnswerPlan.for_question(question, defense, n)
            stream = start(plan, context, lm, ignore_eos=True, build=build_timed, stop=())
            t0 = time.perf_counter()
            for _ in stream:
                if first_only:
                    break
            return time.perf_counter() - t0

        plan_none = AnswerPlan.for_question(question, "none", 1)

        def hf_generate(n: int) -> float:
            ids = torch.tensor([generation_config(plan_none, context, lm).prompt_ids])
            t0 = time.perf_counter()
            with torch.inference_mode():
                lm.model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=n,
                    min_new_tokens=n,
                    do_sample=False,
                )
            return time.perf_counter() - t0

        run("none", 4)  # warm-up
        times: dict[str, list[float]] = {d: [] for d in (*DEFENSES, "hf-generate")}
        prefill: dict[str, list[float]] = {d: [] for d in DEFENSES}
        for _ in range(args.repeats):
            for d in DEFENSES:
                times[d].append(run(d, args.tokens))
                prefill[d].append(run(d, 1))
            times["hf-generate"].append(hf_generate(args.tokens))
        ttft: dict[str, list[float]] = {d: [] for d in DEFENSES}
        for _ in range(args.repeats):
            for d in DEFENSES:
                t0 = time.perf_counter()
                fresh = chunks_context([h.text for h in rag.search(question, "bench", 2)])
                assert fresh.texts == context.texts
                run(d, args.tokens, first_only=True)
                ttft[d].append(time.perf_counter() - t0)
        rag.store.close()

    best = min
    prompt_tokens = len(generation_config(plan_none, context, lm).prompt_ids)
    base = best(times["none"])
    base_step = (base - best(prefill["none"])) / (args.tokens - 1)
    print(
        f"# PAD benchmark: {args.tokens} tokens x {args.repeats} repeats, "
        f"{torch.get_num_threads()} thread(s), {lm.dtype}, prompt {prompt_tokens} "
        "tokens\n"
    )
    print(
        "| decoding | tokens/s | time vs greedy | per-token vs greedy | time to first token "
        "(median / best) | inside the defense per token |"
    )
    print("|---|---|---|---|---|---|")
    for d in (*DEFENSES, "hf-generate"):
        total = best(times[d])
        tps = args.tokens / total
        if d in prefill:
            step = (total - best(prefill[d])) / (args.tokens - 1)
            per_token = f"{step / base_step:.3f}x"
            first = f"{statistics.median(ttft[d]) * 1000:.0f} / {best(ttft[d]) * 1000:.0f} ms"
        else:
            per_token, first = "-", "-"
        if d in calls:
            cost = inside[d] / calls[d]
            own = f"{cost * 1000:.3f} ms ({cost / base_step * 100:.2f}% of a greedy step)"
        else:
            own = "-"
        label = "greedy (no defense)" if d == "none" else d
        print(f"| {label} | {tps:.1f} | {total / base:.3f}x | {per_token} | {first} | {own} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
