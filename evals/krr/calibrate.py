"""Fit and check the preview calibration (py_core/preview_calibration.json)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from py_core.krr import implementation
from py_core.preview import THRESHOLD, PreviewModel

ZIPF_EDGES = (3.0, 4.0, 5.0, 6.0)
MAX_LENGTH = 13
PRIOR_STRENGTH = 4.0  # pseudo-words pulling a sparse cell toward its mean Pr[T0]


@dataclass(frozen=True, slots=True)
class WordOutcome:
    """What the calibration needs about one evaluated word."""

    epsilon: float
    length: int
    zipf: float | None
    restored: bool


def fit_cells(
    cells: Iterable[tuple[float, int, float | None, bool, float]],
    epsilons: Sequence[float],
    keep_probability: Callable[[float], float],
    restorer: str,
    **extra: Any,
) -> PreviewModel:
    """Restoration rate per (epsilon, Zipf bin, length), smoothed toward each cell's mean Pr[T0].

    ``cells`` are ``(epsilon, length, zipf, restored, pr_t0)`` per evaluated word;
    ``keep_probability(eps)`` gives an empty cell's prior (``p ** length``).  The
    English calibration and the per-script ones (``veil eval scripts``) both use this.
    """
    shape = PreviewModel(
        epsilons=tuple(epsilons),
        zipf_edges=ZIPF_EDGES,
        max_length=MAX_LENGTH,
        rates=tuple(
            tuple(tuple(0.0 for _ in range(MAX_LENGTH)) for _ in range(len(ZIPF_EDGES) + 2))
            for _ in epsilons
        ),
        restorer=restorer,
        **extra,
    )
    cells = list(cells)
    n_bins = len(ZIPF_EDGES) + 2
    tables: list[list[tuple[float, ...]]] = []
    for eps in sorted(epsilons):
        p = keep_probability(eps)
        hits = [[0.0] * MAX_LENGTH for _ in range(n_bins)]
        count = [[0] * MAX_LENGTH for _ in range(n_bins)]
        prior = [[0.0] * MAX_LENGTH for _ in range(n_bins)]
        for cell_eps, length, zipf, restored, pr_t0 in cells:
            if cell_eps != eps:
                continue
            z, col = shape.zipf_bin(zipf), min(length, MAX_LENGTH) - 1
            hits[z][col] += restored
            count[z][col] += 1
            prior[z][col] += pr_t0
        table = []
        for z in range(n_bins):
            row = []
            for col in range(MAX_LENGTH):
                n = count[z][col]
                base = prior[z][col] / n if n else p ** (col + 1)
                row.append((hits[z][col] + PRIOR_STRENGTH * base) / (n + PRIOR_STRENGTH))
            table.append(tuple(row))
        tables.append(table)
    # Restoration can only get easier as epsilon grows (every character is more
    # likely kept): enforce that on the noisy estimates with a running maximum.
    for i in range(1, len(tables)):
        tables[i] = [
            tuple(max(a, b) for a, b in zip(prev, cur, strict=True))
            for prev, cur in zip(tables[i - 1], tables[i], strict=True)
        ]
    return PreviewModel(
        epsilons=tuple(float(e) for e in sorted(epsilons)),
        zipf_edges=ZIPF_EDGES,
        max_length=MAX_LENGTH,
        rates=tuple(tuple(t) for t in tables),
        restorer=restorer,
        **extra,
    )


def fit(outcomes: Sequence[WordOutcome], epsilons: Sequence[float], restorer: str) -> PreviewModel:
    """Restoration rate per (epsilon, Zipf bin, length), smoothed toward Pr[T0]."""

    def keep(eps: float) -> float:
        return implementation(eps).keep_probability

    cells = (
        (o.epsilon, o.length, o.zipf, o.restored, keep(o.epsilon) ** o.length) for o in outcomes
    )
    return fit_cells(cells, epsilons, keep, restorer)


def check(model: PreviewModel, outcomes: Sequence[WordOutcome]) -> dict[str, object]:
    """Accuracy of the label, Brier score and a reliability table on held-out words."""
    if not outcomes:
        return {"n": 0}
    correct, brier = 0, 0.0
    bins = [[0, 0.0, 0] for _ in range(10)]  # n, sum predicted, hits
    base_correct = 0
    for o in outcomes:
        p_keep = implementation(o.epsilon).keep_probability
        predicted = max(p_keep**o.length, model.rate(o.epsilon, o.zipf, o.length))
        correct += (predicted >= THRESHOLD) == o.restored
        base_correct += (p_keep**o.length >= THRESHOLD) == o.restored
        brier += (predicted - o.restored) ** 2
        b = bins[min(int(predicted * 10), 9)]
        b[0] += 1
        b[1] += predicted
        b[2] += o.restored
    n = len(outcomes)
    return {
        "n": n,
        "accuracy": correct / n,
        "accuracy_pr_t0_only": base_correct / n,
        "brier": brier / n,
        "reliability": [
            {
                "bin": f"{i / 10:.1f}-{(i + 1) / 10:.1f}",
                "n": b[0],
                "mean_predicted": b[1] / b[0],
                "observed": b[2] / b[0],
            }
            for i, b in enumerate(bins)
            if b[0]
        ],
    }
