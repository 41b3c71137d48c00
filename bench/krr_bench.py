"""Benchmark: k-RR perturbation speed, Veil's bulk implementation vs a naive loop.

Prints medians (ms) for 2,000 and 20,000 characters and the speed-up over a
naive per-character ``SystemRandom`` loop measured in the same process.  The
same ``measure()`` runs inside Pyodide under Node (bench/krr_bench_pyodide.mjs),
so both interpreters are compared on equal terms.

    python bench/krr_bench.py            # CPython
    node bench/krr_bench_pyodide.mjs     # Pyodide 314 under Node
"""

from __future__ import annotations

import json
import math
import platform
import random
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from py_core import krr
from py_core.accounting import krr_composed_epsilon
from py_core.sanitize import sanitize_prompt

SAMPLE = (
    "Patient Jane Roe (DOB 1970-03-14) reports chest pain since Tuesday; BP 142/91, "
    "HR 88. Call her at 555-0142 or jane.roe@example.com. Plan: ECG, troponin, follow up. "
)


def naive_perturb(text: str, epsilon: float, rng: random.SystemRandom) -> str:
    """The obvious per-character loop (the baseline)."""
    p = math.exp(epsilon) / (math.exp(epsilon) + krr.K - 1)
    out = []
    for ch in text:
        if ch.isspace() or (ch in krr.ALPHABET and rng.random() < p):
            out.append(ch)
        elif ch in krr.ALPHABET:
            index = rng.randrange(krr.K - 1)
            own = krr.ALPHABET.index(ch)
            out.append(krr.ALPHABET[index + (index >= own)])
        else:
            out.append(krr.ALPHABET[rng.randrange(krr.K)])
    return "".join(out)


def _median_ms(fn: object, repeats: int) -> float:
    assert callable(fn)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(repeats: int = 31, epsilon: float = 4.0) -> dict[str, object]:
    rng = random.SystemRandom()
    rows = []
    for n in (2_000, 20_000):
        text = (SAMPLE * (n // len(SAMPLE) + 1))[:n]
        veil = _median_ms(lambda t=text: krr.perturb(t, epsilon), repeats)
        naive = _median_ms(lambda t=text: naive_perturb(t, epsilon, rng), max(5, repeats // 3))
        # The whole send path: perturbation + receipt (per-word survival), and the
        # tight composed bound, which the extension computes after the send.
        send = _median_ms(lambda t=text: sanitize_prompt(t, epsilon, compose=False), repeats)
        chars = sum(not c.isspace() for c in text)
        composed = _median_ms(lambda c=chars: krr_composed_epsilon(c, epsilon, 1e-6), 5)
        rows.append(
            {
                "chars": n,
                "veil_ms": veil,
                "naive_ms": naive,
                "speedup": naive / veil,
                "sanitize_ms": send,
                "composed_ms": composed,
            }
        )
    return {
        "interpreter": f"{platform.python_implementation()} {platform.python_version()} ({sys.platform})",
        "epsilon": epsilon,
        "repeats": repeats,
        "rows": rows,
    }


def render(result: dict[str, object]) -> str:
    lines = [
        f"k-RR perturbation, eps={result['epsilon']}, {result['interpreter']}, "
        f"median of {result['repeats']} runs",
        f"{'chars':>8} {'veil ms':>10} {'naive ms':>10} {'speed-up':>9}"
        f" {'sanitize ms':>12} {'composed-ε ms':>14}",
    ]
    for row in result["rows"]:  # type: ignore[attr-defined]
        lines.append(
            f"{row['chars']:>8} {row['veil_ms']:>10.3f} {row['naive_ms']:>10.3f} {row['speedup']:>8.1f}x"
            f" {row['sanitize_ms']:>12.3f} {row['composed_ms']:>14.3f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = measure()
    print(render(outcome))
    if "--json" in sys.argv:
        print(json.dumps(outcome))
