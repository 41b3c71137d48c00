"""Inverting hidden states back to tokens: the fast exact path and the published algorithm.

Both work left to right.  At position t the committed prefix's key/value cache is
kept, so each candidate token costs one single-token forward pass, and a candidate
is *proven* when its state reproduces the leaked state within ``tolerance``
(max-abs deviation).  The discrete loss of a position is the MSE between the
leaked state and the state of the committed token; the cumulative discrete loss
of an exact recovery sits at float precision, and any wrong commit shows as a
jump of many orders of magnitude — a self-diagnosis that needs no ground truth.

* :func:`invert_fast` ranks candidates (position-0 table, trained ranker),
  verifies the first few exactly, then *screens* the rest in growing chunks with
  a bfloat16 copy of the model (~3x cheaper per candidate) and verifies exactly
  the closest (up to :data:`CHECKS_PER_CHUNK` a chunk) of those whose screened state
  is close; it stops at the first proof.  If the
  whole vocabulary was screened without a proof, every remaining token is
  verified at full precision, in screened order — so a token is committed only
  when proven, or the position is reported unresolvable after an exhaustive
  full-precision search.  Screening only reorders the search; it never decides.
  With ``tolerance=None`` (noisy states) it commits the nearest of the first
  ``max_candidates`` and reports the runners-up.
* :func:`invert_gradient` is the published method (docs/methods/inversion.md): a continuous proxy
  optimised with Adam on the hidden-state MSE, no projection during the loop, then
  the C nearest embeddings verified, the first match committed or the nearest as
  a fallback.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from companion.audit import PUBLISHED
from companion.audit.hidden import Prefix, TargetModel
from companion.audit.ranker import SetupArtifacts
from py_core.errors import InvalidParameterError

DEFAULT_TOLERANCE = 1e-3
GROWING_BATCHES = (8, 64, 512)
# The head of the order is verified at full precision in these batches (8, then
# 64): a screened chunk plus the fp32 check of its winner costs as much as that
# (and the screening copy needs its own prefix cache), so screening starts where
# the search gets long.
FULL_PRECISION_HEAD = (8, 64)
SCREEN_CHUNKS = (512, 2048)  # then 2048 at a time
# A screened candidate is verified when its reduced-precision MSE is below this
# share of the leaked state's mean square.  On SmolLM2 the true token screens at
# 0.01-0.2%, near-synonyms (" April" for " March") at ~2% and other tokens at
# 10% or more from position 1 on (position 0, without context, has near-twins
# that bfloat16 cannot separate).  A wrong candidate under the line costs one
# fp32 check; a true one over it only time, since the exhaustive fp32 pass
# follows — so the line sits generously above the true token.
SCREEN_FRACTION = 0.05
# At most this many of a chunk's close candidates (the closest by screened MSE) are
# verified as the chunk is screened; the rest wait for the final pass, which verifies in
# screened order over the whole vocabulary.  Where a state is generic (random context),
# hundreds of a chunk's tokens can screen under the line, and verifying them all at each
# chunk cost more float32 passes than the whole final pass.
CHECKS_PER_CHUNK = 64

# progress(event) with event = {"position": t, "total": T, ...}
PositionCallback = Callable[[dict[str, Any]], None]


def _no_callback(event: dict[str, Any]) -> None:
    return None


@dataclass
class PositionResult:
    """The proof (or the lack of one) for one position."""

    position: int
    token_id: int
    token: str
    status: str  # proven | ambiguous | unresolved | nearest
    discrete_loss: float  # MSE between the committed token's state and the leaked state
    max_abs: float
    rank: int | None  # 1-based rank of the committed token in the candidate order
    candidates_checked: int  # candidates examined (full precision or screened)
    seconds: float
    screened: int = 0  # of those, examined only at reduced precision
    alternatives: list[int] = field(default_factory=list)  # same embedding: indistinguishable
    nearest: list[dict[str, Any]] = field(default_factory=list)  # runners-up (noisy mode)
    true_token_id: int | None = None
    true_rank_trace: list[tuple[int, int]] = field(default_factory=list)  # (step, rank)

    @property
    def flagged(self) -> bool:
        return self.status != "proven"


@dataclass
class InversionResult:
    """A recovered sequence with its per-position proofs and timings."""

    method: str
    model: str
    layer: int
    token_ids: list[int]
    text: str
    positions: list[PositionResult]
    seconds: float
    config: dict[str, Any]
    true_token_ids: list[int] | None = None

    @property
    def cumulative_loss(self) -> float:
        return float(sum(p.discrete_loss for p in self.positions))

    @property
    def flagged_positions(self) -> list[int]:
        return [p.position for p in self.positions if p.flagged]

    @property
    def proven(self) -> bool:
        return not self.flagged_positions

    @property
    def exact_match(self) -> bool | None:
        if self.true_token_ids is None:
            return None
        return self.token_ids == self.true_token_ids

    @property
    def token_accuracy(self) -> float | None:
        if self.true_token_ids is None or not self.true_token_ids:
            return None
        hits = sum(a == b for a, b in zip(self.token_ids, self.true_token_ids, strict=True))
        return hits / len(self.true_token_ids)

    @property
    def seconds_per_token(self) -> float:
        return self.seconds / max(1, len(self.positions))

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "model": self.model,
            "layer": self.layer,
            "text": self.text,
            "token_ids": self.token_ids,
            "positions": [asdict(p) for p in self.positions],
            "cumulative_discrete_loss": self.cumulative_loss,
            "flagged_positions": self.flagged_positions,
            "all_proven": self.proven,
            "seconds": self.seconds,
            "seconds_per_token": self.seconds_per_token,
            "config": self.config,
            "true_token_ids": self.true_token_ids,
            "exact_match": self.exact_match,
            "token_accuracy": self.token_accuracy,
        }


def _stop_if(should_stop: Callable[[], bool] | None) -> None:
    """Raise InterruptedError when the job was cancelled (checked between batches)."""
    if should_stop is not None and should_stop():
        raise InterruptedError("the inversion was cancelled")


def _check_states(target: TargetModel, states: torch.Tensor) -> torch.Tensor:
    if states.ndim != 2 or states.shape[1] != target.hidden_size or states.shape[0] < 1:
        raise InvalidParameterError(
            f"hidden states must have shape (T, {target.hidden_size}) for this model, "
            f"got {tuple(states.shape)}"
        )
    if not torch.isfinite(states).all():
        raise InvalidParameterError("hidden states contain NaN or infinite values")
    return states.float().to(target.device)


def _check_truth(states: torch.Tensor, truth: list[int] | None) -> None:
    if truth is not None and len(truth) != states.shape[0]:
        raise InvalidParameterError(
            f"true_token_ids has {len(truth)} tokens but there are {states.shape[0]} states"
        )


def invert_fast(
    target: TargetModel,
    states: torch.Tensor,
    setup: SetupArtifacts,
    *,
    tolerance: float | None = DEFAULT_TOLERANCE,
    max_candidates: int | None = None,
    true_token_ids: list[int] | None = None,
    callback: PositionCallback = _no_callback,
    should_stop: Callable[[], bool] | None = None,
    screen: bool | None = None,
) -> InversionResult:
    """Recover the tokens behind ``states`` (T, d): ranked candidates, verified exactly.

    ``tolerance`` is the max-abs deviation under which a candidate is proven;
    ``None`` means the states are noisy and no proof is possible: the nearest of
    the first ``max_candidates`` (default 64) is committed.  ``max_candidates``
    caps the search (``None``: the whole vocabulary, so every token is proven or
    shown to be unresolvable).  ``screen`` (default: when the device supports
    bfloat16) orders the long tail with the reduced-precision copy.
    """
    states = _check_states(target, states)
    _check_truth(states, true_token_ids)
    if tolerance is not None and not tolerance > 0:
        raise InvalidParameterError(f"tolerance must be positive, got {tolerance}")
    if max_candidates is not None and max_candidates < 1:
        raise InvalidParameterError(f"max_candidates must be at least 1, got {max_candidates}")
    limit = target.vocab_size if max_candidates is None else min(max_candidates, target.vocab_size)
    if tolerance is None and max_candidates is None:
        limit = min(64, target.vocab_size)
    use_screen = target.can_screen if screen is None else bool(screen)
    use_screen = use_screen and tolerance is not None
    started = time.perf_counter()
    orders = setup.rank(target, states)
    rank_seconds = time.perf_counter() - started
    prefix = Prefix()
    results: list[PositionResult] = []
    for t in range(states.shape[0]):
        _stop_if(should_stop)
        t0 = time.perf_counter()
        order = orders[t][:limit]
        if use_screen:
            assert tolerance is not None
            result, prefix = _search_screened(
                target, prefix, states[t], order, tolerance, t, setup, should_stop
            )
        else:
            result, prefix = _search_position(
                target, prefix, states[t], order, tolerance, t, setup, should_stop
            )
        result.seconds = time.perf_counter() - t0 + (rank_seconds if t == 0 else 0.0)
        if true_token_ids is not None:
            result.true_token_id = int(true_token_ids[t])
        results.append(result)
        callback(_event(result, states.shape[0]))
    return _result(
        "fast",
        target,
        results,
        started,
        {"tolerance": tolerance, "max_candidates": max_candidates, "screen": use_screen},
        true_token_ids,
    )


def _batches(total: int, prefix_len: int, target: TargetModel) -> list[tuple[int, int]]:
    cap = target.batch_size_for(prefix_len)
    spans = []
    start = 0
    for size in GROWING_BATCHES:
        if start >= total:
            break
        stop = min(total, start + min(size, cap))
        spans.append((start, stop))
        start = stop
    while start < total:
        stop = min(total, start + cap)
        spans.append((start, stop))
        start = stop
    return spans


def _search_position(
    target: TargetModel,
    prefix: Prefix,
    state: torch.Tensor,
    order: torch.Tensor,
    tolerance: float | None,
    position: int,
    setup: SetupArtifacts | None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[PositionResult, Prefix]:
    best: tuple[float, float, int, int, Any, int] | None = None  # mse, maxabs, id, rank, cache, row
    seen_mse: list[torch.Tensor] = []
    checked = 0
    for start, stop in _batches(int(order.numel()), len(prefix), target):
        _stop_if(should_stop)
        cand = order[start:stop]
        checked = stop
        if tolerance is not None:
            hit, max_abs, mse, cache = _proof(target, prefix, state, cand, tolerance)
            if hit is not None:
                return _proven(
                    target, prefix, setup, position, int(cand[hit]), (max_abs, mse, cache, hit),
                    start + hit + 1, checked, 0,
                )  # fmt: skip
        else:
            max_abs, mse, cache = target.verify(prefix, cand, state)
        row = int(torch.argmin(mse))
        if best is None or float(mse[row]) < best[0]:
            best = (
                float(mse[row]),
                float(max_abs[row]),
                int(cand[row]),
                start + row + 1,
                cache,
                row,
            )
        seen_mse.append(mse.cpu())
    assert best is not None
    mse_all = torch.cat(seen_mse)
    top = torch.argsort(mse_all)[:5]
    nearest = [
        {
            "token_id": int(order[i]),
            "token": target.token_text(int(order[i])),
            "discrete_loss": float(mse_all[i]),
            "rank": int(i) + 1,
        }
        for i in top
    ]
    status = "nearest" if tolerance is None else "unresolved"
    result = PositionResult(
        position=position,
        token_id=best[2],
        token=target.token_text(best[2]),
        status=status,
        discrete_loss=best[0],
        max_abs=best[1],
        rank=best[3],
        candidates_checked=checked,
        seconds=0.0,
        nearest=nearest,
    )
    return result, target.extend(prefix, best[2], best[4], best[5])


def _proof(
    target: TargetModel,
    prefix: Prefix,
    state: torch.Tensor,
    cand: torch.Tensor,
    tolerance: float,
) -> tuple[int | None, torch.Tensor, torch.Tensor, Any]:
    """Full-precision verification of ``cand``: (row of the proven token or None, max-abs, MSE, cache)."""
    max_abs, mse, cache = target.verify(prefix, cand, state)
    hits = torch.nonzero(max_abs <= tolerance).flatten()
    row = int(hits[torch.argmin(mse[hits])]) if hits.numel() else None
    return row, max_abs, mse, cache


def _proven(
    target: TargetModel,
    prefix: Prefix,
    setup: SetupArtifacts | None,
    position: int,
    token: int,
    found: tuple[torch.Tensor, torch.Tensor, Any, int],
    rank: int,
    checked: int,
    screened: int,
) -> tuple[PositionResult, Prefix]:
    max_abs, mse, cache, row = found
    alts = setup.duplicates.get(token, []) if setup is not None else []
    result = PositionResult(
        position=position,
        token_id=token,
        token=target.token_text(token),
        status="ambiguous" if alts else "proven",
        discrete_loss=float(mse[row]),
        max_abs=float(max_abs[row]),
        rank=rank,
        candidates_checked=checked,
        seconds=0.0,
        screened=screened,
        alternatives=alts,
    )
    return result, target.extend(prefix, token, cache, row)


def _search_screened(
    target: TargetModel,
    prefix: Prefix,
    state: torch.Tensor,
    order: torch.Tensor,
    tolerance: float,
    position: int,
    setup: SetupArtifacts | None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[PositionResult, Prefix]:
    """Verify the first few, screen the rest, verify what screens close; exhaustive at the end."""
    total = int(order.numel())
    head = sum(FULL_PRECISION_HEAD)
    if total <= head:
        return _search_position(
            target, prefix, state, order, tolerance, position, setup, should_stop
        )
    start = 0
    for size in FULL_PRECISION_HEAD:
        _stop_if(should_stop)
        cand = order[start : start + size]
        row, max_abs, mse, cache = _proof(target, prefix, state, cand, tolerance)
        if row is not None:
            return _proven(
                target, prefix, setup, position, int(cand[row]), (max_abs, mse, cache, row),
                start + row + 1, start + size, 0,
            )  # fmt: skip
        start += size
    verified = torch.zeros(total, dtype=torch.bool)
    verified[:head] = True
    screened_mse = torch.full((total,), math.inf)
    threshold = SCREEN_FRACTION * float(state.pow(2).mean())
    sizes = iter((*SCREEN_CHUNKS, *([SCREEN_CHUNKS[-1]] * total)))
    while start < total:
        _stop_if(should_stop)
        stop = min(total, start + next(sizes))
        screened_mse[start:stop] = target.screen(prefix, order[start:stop], state).cpu()
        close = torch.nonzero(screened_mse[start:stop] <= threshold).flatten() + start
        if close.numel():
            close = close[torch.argsort(screened_mse[close])][:CHECKS_PER_CHUNK]
            verified[close] = True
            row, max_abs, mse, cache = _proof(target, prefix, state, order[close], tolerance)
            if row is not None:
                at = int(close[row])
                return _proven(
                    target, prefix, setup, position, int(order[at]), (max_abs, mse, cache, row),
                    at + 1, stop, stop - int(verified[:stop].sum()),
                )  # fmt: skip
        start = stop
    # Nothing proven yet: prove or refute every token at full precision, most promising
    # first -- those already verified included (they screened closest, so they come first
    # and cost little), so that an unresolved position commits the nearest state of the
    # whole vocabulary, not the nearest of the tokens left (a true token just over the
    # tolerance was verified in its chunk and then left out of the nearest).
    rest = torch.argsort(screened_mse)  # the unscreened head (infinite) last
    result, new_prefix = _search_position(
        target, prefix, state, order[rest], tolerance, position, setup, should_stop
    )
    in_fp32 = verified.clone()  # verified while screening, or in the final pass
    in_fp32[rest[: result.candidates_checked]] = True
    if result.rank is not None:
        result.rank = int(rest[result.rank - 1]) + 1
    for near in result.nearest:
        near["rank"] = int(rest[near["rank"] - 1]) + 1
    result.candidates_checked = total
    result.screened = total - int(in_fp32.sum())
    return result, new_prefix


def _event(result: PositionResult, total: int) -> dict[str, Any]:
    return {
        "position": result.position,
        "total": total,
        "token_id": result.token_id,
        "token": result.token,
        "status": result.status,
        "discrete_loss": result.discrete_loss,
        "rank": result.rank,
        "candidates_checked": result.candidates_checked,
        "screened": result.screened,
        "seconds": result.seconds,
    }


@dataclass(frozen=True, slots=True)
class GradientConfig:
    """The published algorithm's knobs (defaults: the paper's K=1000, C=2000)."""

    steps: int = PUBLISHED.steps  # K, Adam steps per position
    candidates: int = PUBLISHED.candidates  # C, nearest embeddings verified at commit
    learning_rate: float = PUBLISHED.learning_rate
    tolerance: float = DEFAULT_TOLERANCE
    trace_every: int = 50  # record the true token's rank every this many steps
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise InvalidParameterError(f"steps (K) must be non-negative, got {self.steps}")
        if self.candidates < 1:
            raise InvalidParameterError(f"candidates (C) must be at least 1, got {self.candidates}")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise InvalidParameterError(f"learning_rate must be positive, got {self.learning_rate}")
        if not self.tolerance > 0:
            raise InvalidParameterError(f"tolerance must be positive, got {self.tolerance}")
        if self.trace_every < 1:
            raise InvalidParameterError(f"trace_every must be at least 1, got {self.trace_every}")


def invert_gradient(
    target: TargetModel,
    states: torch.Tensor,
    config: GradientConfig | None = None,
    *,
    true_token_ids: list[int] | None = None,
    callback: PositionCallback = _no_callback,
    should_stop: Callable[[], bool] | None = None,
) -> InversionResult:
    """The published per-position gradient inversion, with its diagnostics."""
    config = config or GradientConfig()
    states = _check_states(target, states)
    _check_truth(states, true_token_ids)
    gen = torch.Generator()
    if config.seed is None:
        gen.seed()
    else:
        gen.manual_seed(config.seed)
    embedding = target.embedding.float()
    for p in target.model.parameters():
        p.requires_grad_(False)
    started = time.perf_counter()
    prefix = Prefix()
    results: list[PositionResult] = []
    candidates = min(config.candidates, target.vocab_size)
    for t in range(states.shape[0]):
        t0 = time.perf_counter()
        start_token = int(torch.randint(target.vocab_size, (1,), generator=gen))
        proxy = embedding[start_token].clone().requires_grad_(True)
        optimiser = torch.optim.Adam([proxy], lr=config.learning_rate)
        truth = None if true_token_ids is None else int(true_token_ids[t])
        trace: list[tuple[int, int]] = []
        for step in range(config.steps + 1):
            if truth is not None and (step % config.trace_every == 0 or step == config.steps):
                trace.append((step, _rank_of(embedding, proxy.detach(), truth)))
            if step == config.steps:
                break
            _stop_if(should_stop)
            with torch.enable_grad():
                state = target.state_for_embedding(prefix, proxy)
                loss = (state - states[t]).pow(2).mean()
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
        with torch.no_grad():
            dist = (embedding - proxy.detach()).pow(2).sum(dim=-1)
            order = torch.argsort(dist)[:candidates].cpu()
        result, prefix = _search_position(
            target, prefix, states[t], order, config.tolerance, t, None, should_stop
        )
        if result.status == "unresolved":
            # The published fallback commits the nearest embedding, not the best-verified one.
            nearest = int(order[0])
            mx, mse, cache = target.verify(prefix_without_last(prefix), order[:1], states[t])
            result.token_id = nearest
            result.token = target.token_text(nearest)
            result.discrete_loss = float(mse[0])
            result.max_abs = float(mx[0])
            result.rank = 1
            prefix = target.extend(prefix_without_last(prefix), nearest, cache, 0)
        result.true_token_id = truth
        result.true_rank_trace = trace
        result.seconds = time.perf_counter() - t0
        results.append(result)
        callback(_event(result, states.shape[0]))
    return _result("gradient", target, results, started, asdict(config), true_token_ids)


def prefix_without_last(prefix: Prefix) -> Prefix:
    """The prefix with its last token removed (the cache is cut accordingly)."""
    if not prefix.ids:
        return prefix
    if len(prefix.ids) == 1 or prefix.kv is None:
        return Prefix()
    kv = [(k[:, :, :-1], v[:, :, :-1]) for k, v in prefix.kv]
    return Prefix(ids=prefix.ids[:-1], kv=kv)


def _rank_of(embedding: torch.Tensor, proxy: torch.Tensor, token: int) -> int:
    dist = (embedding - proxy).pow(2).sum(dim=-1)
    return int((dist < dist[token]).sum()) + 1


def _result(
    method: str,
    target: TargetModel,
    results: list[PositionResult],
    started: float,
    config: dict[str, Any],
    true_token_ids: Sequence[int] | None,
) -> InversionResult:
    ids = [r.token_id for r in results]
    return InversionResult(
        method=method,
        model=target.identity,
        layer=target.layer,
        token_ids=ids,
        text=target.decode(ids),
        positions=results,
        seconds=time.perf_counter() - started,
        config=config,
        true_token_ids=list(true_token_ids) if true_token_ids is not None else None,
    )
