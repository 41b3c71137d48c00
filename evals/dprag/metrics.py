"""Scores of ``veil eval dprag`` that the runner and the report share."""

from __future__ import annotations

from collections.abc import Sequence


def auc(scores_pos: Sequence[float], scores_neg: Sequence[float]) -> float:
    """Mann-Whitney AUC: P(member scores higher) + half the ties."""
    if not scores_pos or not scores_neg:
        return float("nan")
    wins = 0.0
    for p in scores_pos:
        for n in scores_neg:
            wins += 1.0 if p > n else 0.5 if p == n else 0.0
    return wins / (len(scores_pos) * len(scores_neg))
