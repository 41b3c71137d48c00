"""Benchmark: k-RR perturbation speed, Veil's bulk implementation vs a naive loop.

Prints medians (ms) for 2,000 and 20,000 characters and the speed-up over a
naive per-character ``SystemRandom`` loop measured in the same process, then the
per-script alphabets (``py_core.alphabets``: Korean, French, Russian, Greek text
of 20,000 characters, and the everything-into-ASCII mode on the Korean text).
The same ``measure()`` runs inside Pyodide under Node
(bench/krr_bench_pyodide.mjs), so both interpreters are compared on equal terms.

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

from py_core import alphabets, krr, memo
from py_core.accounting import krr_composed_epsilon
from py_core.language import HEADERS
from py_core.sanitize import sanitize_prompt

SAMPLE = (
    "Patient Jane Roe (DOB 1970-03-14) reports chest pain since Tuesday; BP 142/91, "
    "HR 88. Call her at 555-0142 or jane.roe@example.com. Plan: ECG, troponin, follow up. "
)
SCRIPT_SAMPLES = {
    "Korean": (
        "환자 김민준 씨는 화요일부터 가슴 통증이 있다고 말했습니다. 혈압은 142/91이고 "
        "연락처는 010-2345-6789입니다. 다음 주에 다시 병원에 와서 검사를 받기로 했습니다. "
    ),
    "French": (
        "Le patient Jérôme Lefèvre se plaint de douleurs thoraciques depuis mardi ; tension "
        "142/91. On peut le joindre au 06 12 34 56 78. Prévoir un ECG à l'hôpital. "
    ),
    # Real Russian and Greek text without RUF001's look-alike letters in this file:
    # py_core's restoration headers in those languages.
    "Russian": HEADERS["ru"],
    "Greek": HEADERS["el"],
}


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
        # With the word memo (py_core.memo): the first send of the text (every unit
        # drawn and added) and a repeat (every unit found and reused).
        first = memo.WordMemo()
        sanitize_prompt(text, epsilon, compose=False, memo=first)
        stored: dict[str, list[dict[str, object]]] = {}
        for release in first.added:
            stored.setdefault(release["word"], []).append(release["variant"])
        memo_first = _median_ms(
            lambda t=text: sanitize_prompt(t, epsilon, compose=False, memo=memo.WordMemo()),
            repeats,
        )
        memo_repeat = _median_ms(
            lambda t=text, s=stored: sanitize_prompt(
                t, epsilon, compose=False, memo=memo.WordMemo(s)
            ),
            repeats,
        )
        rows.append(
            {
                "chars": n,
                "veil_ms": veil,
                "naive_ms": naive,
                "speedup": naive / veil,
                "sanitize_ms": send,
                "composed_ms": composed,
                "memo_first_ms": memo_first,
                "memo_repeat_ms": memo_repeat,
            }
        )
    scripts = []
    n = 20_000
    for name, sample in SCRIPT_SAMPLES.items():
        text = (sample * (n // len(sample) + 1))[:n]
        scripts.append(
            {
                "script": name,
                "chars": n,
                "veil_ms": _median_ms(lambda t=text: alphabets.perturb(t, epsilon), repeats),
                "sanitize_ms": _median_ms(
                    lambda t=text: sanitize_prompt(t, epsilon, compose=False), repeats
                ),
            }
        )
    korean = (SCRIPT_SAMPLES["Korean"] * (n // len(SCRIPT_SAMPLES["Korean"]) + 1))[:n]
    scripts.append(
        {
            "script": "Korean, into ASCII",
            "chars": n,
            "veil_ms": _median_ms(lambda: krr.perturb(korean, epsilon), repeats),
            "sanitize_ms": _median_ms(
                lambda: sanitize_prompt(korean, epsilon, compose=False, alphabets_mode="ascii"),
                repeats,
            ),
        }
    )
    return {
        "interpreter": f"{platform.python_implementation()} {platform.python_version()} ({sys.platform})",
        "epsilon": epsilon,
        "repeats": repeats,
        "rows": rows,
        "scripts": scripts,
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
    lines.append(
        f"{'chars':>8} {'sanitize + memo, first send ms':>31} {'x sanitize':>10}"
        f" {'repeat send ms':>15} {'x sanitize':>10}"
    )
    for row in result["rows"]:  # type: ignore[attr-defined]
        if "memo_first_ms" in row:
            lines.append(
                f"{row['chars']:>8} {row['memo_first_ms']:>31.3f}"
                f" {row['memo_first_ms'] / row['sanitize_ms']:>9.2f}x"
                f" {row['memo_repeat_ms']:>15.3f} {row['memo_repeat_ms'] / row['sanitize_ms']:>9.2f}x"
            )
    # Ratios against the ASCII text of the same length, measured in the same run (the
    # machine's load cancels out).
    base = next(r for r in result["rows"] if r["chars"] == 20_000)  # type: ignore[attr-defined]
    lines.append(
        f"{'per script (20,000 chars)':<26} {'veil ms':>10} {'x ASCII':>8} {'sanitize ms':>12} {'x ASCII':>8}"
    )
    for row in result.get("scripts", []):  # type: ignore[attr-defined]
        lines.append(
            f"{row['script']:<26} {row['veil_ms']:>10.3f} {row['veil_ms'] / base['veil_ms']:>7.1f}x"
            f" {row['sanitize_ms']:>12.3f} {row['sanitize_ms'] / base['sanitize_ms']:>7.1f}x"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = measure()
    print(render(outcome))
    if "--json" in sys.argv:
        print(json.dumps(outcome))
