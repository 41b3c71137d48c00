"""Does a guest's time to the first token tell whether anything was retrieved?

Under a formal defense a guest must not learn from the response whether a document is in
the store; the time to the first token is part of the response.  The answer service pads a
guest's private prefill to the longest context it could have had
(``AnswerPlan.pad_context_to``; ``generate.pad_prefill``), and dp_vote runs its group
passes at one public width even when no document was retrieved.  This benchmark measures,
with the bundled chat model, the time to the first token of the same question with three
retrieved chunks and with none, each defense, padded (what guests get) and not padded
(what the owner gets), and prints the ratio full / empty: 1.00 means the timing says
nothing; what remains is the attention over a longer real cache in the decoding steps and
noise.

Run: ``python bench/guest_timing_bench.py [--repeats 5] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHUNKS = [
    "Consultation note, 3 March. Mrs Ada Quispe, 61, presents with gout of the left "
    "first toe. Started allopurinol 100 mg daily; colchicine 500 micrograms for flares. "
    "Review in six weeks with urate levels. " * 3,
    "Referral letter. Dr Imogen Hart, rheumatology, 0161 496 0732. Please see this "
    "patient with recurrent gout despite allopurinol; eGFR 58. " * 3,
    "Discharge summary. Admitted with a hot swollen knee; aspirate showed urate "
    "crystals. Discharged on naproxen and omeprazole. " * 3,
]
QUESTION = "Which medicine was started for the gout?"


def first_token_seconds(lm: Any, plan: Any, context: Any) -> float:
    from companion.answer import start

    run = start(plan, context, lm)
    t0 = time.perf_counter()
    for _ in run:
        break
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import torch

    from companion.answer import AnswerContext, AnswerPlan, chunks_context, fit
    from companion.models import load_causal_lm
    from companion.settings import Settings

    torch.set_num_threads(args.threads)
    settings = Settings()
    lm = load_causal_lm()
    full = chunks_context(CHUNKS)
    fit(full, lm.tokenizer, settings)
    empty = AnswerContext(retrieved=True)
    defenses = {"bounded": "bounded", "static": "static", "dp_vote": "dp_vote"}
    print(
        f"# guest timing: time to the first token, median of {args.repeats}, "
        f"{torch.get_num_threads()} thread(s), {lm.dtype}; context budget "
        f"{settings.context_token_budget} tokens\n"
    )
    print("| defense | prefill | 3 chunks (s) | nothing retrieved (s) | ratio |")
    print("|---|---|---|---|---|")
    for name, defense in defenses.items():
        for padded in (True,) if name == "dp_vote" else (False, True):
            pad = settings.context_token_budget if padded and name != "dp_vote" else None
            plan = AnswerPlan.for_question(QUESTION, defense, 8, pad_context_to=pad)
            first_token_seconds(lm, plan, empty)  # warm-up
            times: dict[str, list[float]] = {"full": [], "empty": []}
            for _ in range(args.repeats):  # interleaved, so load drifts hit both alike
                times["full"].append(first_token_seconds(lm, plan, full))
                times["empty"].append(first_token_seconds(lm, plan, empty))
            a, b = statistics.median(times["full"]), statistics.median(times["empty"])
            label = "padded (guest)" if padded else "as is (owner)"
            if name == "dp_vote":
                label = "groups at one public width"
            print(f"| {name} | {label} | {a:.3f} | {b:.3f} | {a / b:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
