"""Per-position certificates for noisy states: which tokens the noise cannot hide.

When noise ``n_t`` is added to a state ``s_t`` (a defense against inversion), the
nearest-state decoder -- commit the vocabulary entry whose state, after the true
prefix, is nearest the noisy one -- recovers the true token ``v*`` whenever

    ||n_t|| < gap_t / 2,   gap_t = min over v != v* of ||h_t(v) - s_t||

(the triangle inequality: the noisy state is then nearer ``s_t`` than any other
candidate's state).  This is SIPIT's separation condition read as a certificate of
*exposure*: a position with ``ratio = ||n_t|| / (gap_t / 2) < 1`` is recovered for
certain by an attacker who has the prefix, whatever the noise's direction.  A ratio of
1 or more is not a certificate of protection: the decoder may still succeed (the noise
points elsewhere), and an attacker with a prior over text does better -- so it is
reported as "not certified exposed", never as "protected".  The Gaussian figure per
position is :func:`sigma_threshold`, ``gap_t / (2 sqrt(d))``: below it, the expected noise norm
(``sigma sqrt(d)``) leaves the token certainly exposed.

``gap_t`` needs the state of every vocabulary entry at position ``t`` (one batched
forward pass per :data:`BATCH` entries after the true prefix's cached keys and values):
minutes per position for a 49 k-token vocabulary on two CPU cores, so it is computed
for the positions asked for, not for every audit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from companion.audit.hidden import Prefix, TargetModel
from py_core.errors import InvalidParameterError

BATCH = 1024


@dataclass(frozen=True, slots=True)
class Gap:
    """The separation of one position: how far the nearest other token's state is."""

    position: int
    token_id: int
    gap: float  # min over v != v* of ||h_t(v) - s_t||, L2
    nearest_id: int  # the v attaining it
    duplicates: int  # other tokens with the same state (gap 0: no decoder can tell)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@torch.no_grad()
def gaps(
    target: TargetModel,
    token_ids: Sequence[int],
    positions: Sequence[int] | None = None,
    *,
    should_stop: Callable[[], bool] | None = None,
) -> list[Gap]:
    """The gap of each position in ``positions`` (default: all) of ``token_ids``."""
    ids = [int(t) for t in token_ids]
    wanted = list(range(len(ids))) if positions is None else sorted(set(positions))
    if any(p < 0 or p >= len(ids) for p in wanted):
        raise InvalidParameterError(f"positions must lie in 0..{len(ids) - 1}")
    clean = target.hidden_states(ids)
    out: list[Gap] = []
    prefix = Prefix()
    for t in range(max(wanted) + 1 if wanted else 0):
        if t in wanted:
            out.append(_gap(target, prefix, clean[t], ids[t], t, should_stop))
        prefix = target.extend(prefix, ids[t])
    return out


def _gap(
    target: TargetModel,
    prefix: Prefix,
    state: torch.Tensor,
    true_id: int,
    position: int,
    should_stop: Callable[[], bool] | None,
) -> Gap:
    best = math.inf
    nearest = -1
    duplicates = 0
    for start in range(0, target.vocab_size, BATCH):
        if should_stop is not None and should_stop():
            raise InterruptedError("the certificate was cancelled")
        cand = torch.arange(start, min(target.vocab_size, start + BATCH))
        _, mse, _ = target.verify(prefix, cand, state)
        dist = (mse * target.hidden_size).clamp_min(0).sqrt().cpu()
        others = cand != true_id
        duplicates += int(((dist == 0) & others).sum())
        dist = torch.where(others, dist, torch.tensor(math.inf))
        row = int(torch.argmin(dist))
        if float(dist[row]) < best:
            best, nearest = float(dist[row]), int(cand[row])
    return Gap(position, true_id, best, nearest, duplicates)


def certify(gap: Gap, noise: torch.Tensor) -> dict[str, Any]:
    """The certificate of one position under the noise ``noise`` (d,) actually added."""
    norm = float(noise.float().norm())
    ratio = math.inf if gap.gap == 0 else norm / (gap.gap / 2.0)
    return {
        **gap.to_dict(),
        "noise_norm": norm,
        "ratio": ratio,
        "exposed": ratio < 1.0,  # certain: the nearest-state decoder recovers it
        "verdict": "exposed (certain)" if ratio < 1.0 else "not certified exposed",
    }


def sigma_threshold(gap: Gap, dim: int) -> float:
    """The Gaussian sigma at which the expected noise norm sigma*sqrt(d) reaches gap/2."""
    return gap.gap / (2.0 * math.sqrt(dim))
