"""Benchmark: the tight composed epsilon of a lifetime ledger (py_core.accounting).

Prints the median time per call of ``krr_composed_epsilon`` for n = 1,000 /
20,000 / 100,000 characters at epsilon 5 (k = 94, ASCII) and of
``KrrPldAccountant.get_epsilon`` for mixed ASCII + Hangul ledgers (the Hangul
slots' realised epsilons and alphabets from py_core.alphabets), each beside the
former implementation measured in the same process (tests/py_core/krr_pld_oracle.py: the
O(n sqrt(n)) sum for one group; min(basic, RDP) for mixed groups, which is what
the accountant answered before), with the values so the speed is not bought
with a looser bound.  The same ``measure()`` runs inside Pyodide under Node
(bench/krr_bench_pyodide.mjs).

    python bench/ledger_bench.py            # CPython
    node bench/krr_bench_pyodide.mjs        # Pyodide (also runs bench/krr_bench.py)
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from py_core import accounting, alphabets
from tests.py_core.krr_pld_oracle import reference_krr_composed_epsilon

DELTA = 1e-6


def _timed(fn: Callable[[], float], repeats: int, warm: bool = True) -> tuple[float, float, float]:
    """(median ms, fastest ms, value) over ``repeats`` calls (after one warm-up call)."""
    value = fn() if warm else 0.0
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), min(times), value


def _old_mixed(groups: dict[tuple[float, int], int]) -> float:
    """What KrrPldAccountant answered for several groups before: min(basic, RDP)."""
    basic = sum(n * e for (e, _k), n in groups.items())
    rdp = accounting.RdpAccountant()
    for (e, k), n in groups.items():
        rdp.compose(accounting.KRREvent(e, n, k))
    return min(basic, rdp.get_epsilon(DELTA))


def _new_mixed(groups: dict[tuple[float, int], int]) -> float:
    acc = accounting.KrrPldAccountant()
    for (e, k), n in groups.items():
        acc.compose(accounting.KRREvent(e, n, k))
    return acc.get_epsilon(DELTA)


def ledger(ascii_chars: int, hangul_syllables: int, epsilon: float) -> dict[tuple[float, int], int]:
    """The k-RR groups of a ledger: ASCII characters and Hangul syllables (3 slots each)."""
    impl = alphabets.slot_implementations(epsilon)
    groups = {(impl["ascii"].epsilon, impl["ascii"].k): ascii_chars}
    for slot in ("hangul-initial", "hangul-vowel", "hangul-final"):
        groups[(impl[slot].epsilon, impl[slot].k)] = hangul_syllables
    return groups


def measure(repeats: int = 21, epsilon: float = 5.0) -> dict[str, object]:
    rows = []
    for n in (1_000, 20_000, 100_000):
        new_ms, new_min, new = _timed(
            partial(accounting.krr_composed_epsilon, n, epsilon, DELTA), repeats
        )
        old_ms, _old_min, old = _timed(
            partial(reference_krr_composed_epsilon, n, epsilon, DELTA, 94),
            1 if n >= 100_000 else 3,
            warm=n < 100_000,
        )
        rows.append(
            {
                "n": n,
                "new_ms": new_ms,
                "new_min_ms": new_min,
                "old_ms": old_ms,
                "new_eps": new,
                "old_eps": old,
            }
        )
    mixed = []
    for ascii_chars, syllables in (
        (1_000, 100),
        (10_000, 1_000),
        (80_000, 20_000),
        (100_000, 100_000),
    ):
        groups = ledger(ascii_chars, syllables, epsilon)
        new_ms, new_min, new = _timed(partial(_new_mixed, groups), repeats)
        old_ms, _old_min, old = _timed(partial(_old_mixed, groups), 5)
        split = sum(
            accounting.krr_composed_epsilon(n, e, DELTA / len(groups), k)
            for (e, k), n in groups.items()
        )
        mixed.append(
            {
                "ascii": ascii_chars,
                "hangul": syllables,
                "new_ms": new_ms,
                "new_min_ms": new_min,
                "old_ms": old_ms,
                "new_eps": new,
                "old_eps": old,
                "split_eps": split,
                "basic_eps": sum(n * e for (e, _k), n in groups.items()),
            }
        )
    return {
        "interpreter": f"{platform.python_implementation()} {platform.python_version()} ({sys.platform})",
        "epsilon": epsilon,
        "delta": DELTA,
        "repeats": repeats,
        "rows": rows,
        "mixed": mixed,
    }


def render(result: dict[str, object]) -> str:
    lines = [
        f"tight composed epsilon of k-RR, eps={result['epsilon']} per character, "
        f"delta={result['delta']}, {result['interpreter']}; new: median (fastest) of "
        f"{result['repeats']} runs, former: median of 1-5",
        f"{'ASCII chars (k=94)':>20} {'new ms':>16} {'former ms':>10} {'speed-up':>9}"
        f" {'new eps':>14} {'former eps':>14}",
    ]
    for row in result["rows"]:  # type: ignore[attr-defined]
        new = f"{row['new_ms']:.3f} ({row['new_min_ms']:.3f})"
        lines.append(
            f"{row['n']:>20,} {new:>16} {row['old_ms']:>10.1f}"
            f" {row['old_ms'] / row['new_ms']:>8.0f}x {row['new_eps']:>14.4f} {row['old_eps']:>14.4f}"
        )
    lines.append(
        "ledger: ASCII chars + Hangul syllables (3 slot groups); former = min(basic, RDP), "
        "split = each group's tight eps at delta/4, added"
    )
    lines.append(
        f"{'ASCII + Hangul':>20} {'new ms':>16} {'former ms':>10}"
        f" {'new eps':>12} {'former eps':>12} {'split eps':>12} {'basic':>10}"
    )
    for row in result["mixed"]:  # type: ignore[attr-defined]
        label = f"{row['ascii']:,} + {row['hangul']:,}"
        new = f"{row['new_ms']:.3f} ({row['new_min_ms']:.3f})"
        lines.append(
            f"{label:>20} {new:>16} {row['old_ms']:>10.3f}"
            f" {row['new_eps']:>12.1f} {row['old_eps']:>12.1f} {row['split_eps']:>12.1f}"
            f" {row['basic_eps']:>10.0f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = measure()
    print(render(outcome))
    if "--json" in sys.argv:
        print(json.dumps(outcome))
