"""Summaries of a set of inversions, and the AUROC of the self-diagnosis."""

from __future__ import annotations

import statistics
from typing import Any


def auroc(scores_pos: list[float], scores_neg: list[float]) -> float:
    """P(score of a positive > score of a negative), ties counted half."""
    if not scores_pos or not scores_neg:
        return float("nan")
    wins = 0.0
    for p in scores_pos:
        for n in scores_neg:
            wins += 1.0 if p > n else 0.5 if p == n else 0.0
    return wins / (len(scores_pos) * len(scores_neg))


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarise(results: list[Any]) -> dict[str, Any]:
    """Exact match, proof status, speed and search effort over inversion ``results``."""
    tokens = [p for r in results for p in r.positions]
    times = [p.seconds for p in tokens]
    ranks = [p.rank for p in tokens if p.status == "proven" and p.rank is not None]
    return {
        "windows": len(results),
        "tokens": len(tokens),
        "exact_match": sum(bool(r.exact_match) for r in results) / max(1, len(results)),
        "token_accuracy": sum(p.token_id == p.true_token_id for p in tokens) / max(1, len(tokens)),
        "all_proven": sum(r.proven for r in results) / max(1, len(results)),
        "tokens_proven": sum(p.status == "proven" for p in tokens) / max(1, len(tokens)),
        "flagged_tokens": sum(p.flagged for p in tokens),
        "mean_s_per_token": statistics.fmean(times) if times else float("nan"),
        "median_s_per_token": statistics.median(times) if times else float("nan"),
        "worst_s_per_token": max(times) if times else float("nan"),
        "total_s": sum(r.seconds for r in results),
        "found_in_first_batch": sum(1 for r in ranks if r <= 8) / max(1, len(ranks)),
        "found_in_top512": sum(1 for r in ranks if r <= 512) / max(1, len(ranks)),
        "exhaustive_positions": sum(1 for p in tokens if p.candidates_checked > 512),
        "p95_s_per_token": quantile(times, 0.95),
        "mean_candidates_examined": statistics.fmean(p.candidates_checked for p in tokens)
        if tokens
        else float("nan"),
        "mean_full_precision_checks": statistics.fmean(
            p.candidates_checked - p.screened for p in tokens
        )
        if tokens
        else float("nan"),
        "max_cumulative_loss": max((r.cumulative_loss for r in results), default=float("nan")),
    }
