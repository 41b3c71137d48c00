"""Benchmark of RootGuard's facade: what finding and replacing values costs per prompt.

Prints a Markdown table: median wall time of ``api.protect_text`` (cached state:
find + replace + state check/serialisation) on prompts of about 2,000 and
20,000 characters, against ``krr.perturb`` on the same text in the same process
(the baseline the extension already pays), and of ``api.init_state`` against
one ``krr.perturb`` of 2,000 characters.  Also the exact discrete Laplace
sampler's draws per second against ``random.random()`` calls.

    python bench/rootguard_bench.py            # ~20 s
    python bench/rootguard_bench.py --repeat 5 # quicker, noisier

Figures depend on the machine and its load; they are measured, not asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from fractions import Fraction

from py_core import krr
from py_core.rootguard import api
from py_core.rootguard.mechanism import discrete_laplace

TRUE = {
    "age": 52,
    "height_cm": 180.3,
    "weight_kg": 81.0,
    "sbp": 128,
    "dbp": 82,
    "glucose": 97,
    "ast": 40,
    "alt": 35,
    "platelets": 230,
}
PARAGRAPH = (
    "I'm 52 and weigh 81 kg (179 lb); I'm 5'11\" tall. My last labs: AST 40 U/L, ALT 35, "
    "platelets 230 x10^9/L, fasting glucose 5.4 mmol/L, BP 128/82 mmHg. My doctor's office "
    "is at 555-128-8200 and my next visit is on 2026-05-12 at 10:30; she wants my weight "
    "in the 70-80 kg range. Could you explain what these numbers mean for my liver? "
)


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    state = api.init_state(api.DEFAULT_PROFILE, TRUE)
    rows = []
    for target in (2_000, 20_000):
        text = (PARAGRAPH * (target // len(PARAGRAPH) + 1))[:target]
        rg = _median_ms(
            lambda t=text: api.protect_text(t, api.DEFAULT_PROFILE, TRUE, state), args.repeat
        )
        base = _median_ms(lambda t=text: krr.perturb(t, 2.0), args.repeat)
        found = len(api.protect_text(text, api.DEFAULT_PROFILE, TRUE, state)["replacements"])
        rows.append((f"protect_text, {len(text):,} chars ({found} values)", rg, base))
    init = _median_ms(lambda: api.init_state(api.DEFAULT_PROFILE, TRUE), args.repeat)
    base = _median_ms(lambda: krr.perturb(PARAGRAPH * 5, 2.0), args.repeat)
    rows.append(("init_state (14 roots)", init, base))
    print("| operation | RootGuard ms (median) | k-RR perturb, same text ms | ratio |")
    print("|---|---|---|---|")
    for name, ours, baseline in rows:
        print(f"| {name} | {ours:.2f} | {baseline:.2f} | {ours / baseline:.1f}x |")

    rng = random.SystemRandom()
    n = 20_000
    start = time.perf_counter()
    for _ in range(n):
        discrete_laplace(Fraction(100), rng)
    exact = n / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(n):
        rng.random()
    floats = n / (time.perf_counter() - start)
    print()
    print("| sampler (SystemRandom) | draws/s | ratio to random() |")
    print("|---|---|---|")
    print(f"| exact discrete Laplace, scale 100 | {exact:,.0f} | {exact / floats:.3f} |")
    print(f"| random.random() (baseline) | {floats:,.0f} | 1 |")


if __name__ == "__main__":
    main()
