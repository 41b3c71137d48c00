"""A GGUF model run by llama.cpp (a native build or the ``cyllama`` wheel), called like a transformers causal LM.

Why: on a laptop's CPU a GGUF read by transformers is dequantized to float32 and every
decoding step reads all of it (Qwen2.5-Coder-1.5B: 6 GB per token), while llama.cpp
computes on the 4-bit weights themselves (1.1 GB).  The companion's generation loop and
every defense (:mod:`companion.decoding`) work on the per-step logits, so this module
gives them exactly that: :class:`LlamaCppLM` is called as the loop calls a transformers
model -- ``model(input_ids=…, attention_mask=…, cache=…, use_cache=True,
logits_to_keep=1)`` -- and returns the next-token logits (float32, shape ``[rows, kept,
vocab]``) and a cache to pass back.  Sampling, the repetition penalty, the defenses'
noise (from the CSPRNG) and the receipts stay in Veil's code; llama.cpp only computes the
model's forward pass.

**Rows are never batched together.**  Each row of a call (dp_vote's groups arrive as one
left-padded batch) runs in a llama.cpp context of its own, on its own tokens only (the
padding the attention mask marks is dropped), so each row's logits are a function of that
row's tokens alone, bit for bit -- the property dp_vote's sensitivity argument needs (one
document changes at most two groups) -- with no dependence on other rows' lengths, on
padding, or on where another sequence's cells sit in a shared KV cache.  The price is one
llama.cpp decode per row per step instead of one batched call.

Contexts (a KV cache each) are pooled and reused; a row's context goes back to the pool
when the cache holding it is dropped, and is cleared before it is handed out again.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from companion import llamacpp_runtime
from py_core.errors import InvalidParameterError

CONTEXT_STEP = 1024  # contexts are sized in steps of this many tokens (pooled by size)
ANSWER_ROOM = 1024  # tokens a context keeps free after its prompt (the answer)
MAX_POOLED = 48  # idle contexts kept per size (dp_vote's groups + the two passes)


def available() -> bool:
    """Whether llama.cpp can be used here (llama-cpp-python or the ``cyllama`` wheel imports)."""
    return bool(llamacpp_runtime.installed())


def default_threads() -> int:
    """``$VEIL_THREADS``, else half the CPUs this process may run on (at least one).

    Half, not all: llama.cpp's threads wait for each other at every layer, so when
    another program takes a core they stall.  On this 2-core machine with other work
    running (load average 10), one decoding step of SmolLM2 took 0.12 s on one thread
    and 2.1-4.2 s on two (whatever the thread pool's polling); an idle machine gains
    less than 2x from the second thread.  ``veil serve --threads N`` sets it.
    """
    value = os.environ.get("VEIL_THREADS", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise InvalidParameterError(f"VEIL_THREADS must be a whole number >= 1; got {value!r}")
        return int(value)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // 2)


@dataclass
class _Row:
    """One sequence's KV cache: a llama.cpp context and how many tokens it holds."""

    ctx: Any
    size: int
    n_past: int = 0


class LlamaCppCache:
    """The caches of one call's rows (what the generation loop passes back as ``cache``)."""

    def __init__(self, lm: LlamaCppLM, rows: list[_Row]) -> None:
        self.lm = lm
        self.rows = rows
        for row in rows:
            weakref.finalize(self, lm._release, row.ctx, row.size)

    def __deepcopy__(self, memo: dict[int, Any]) -> LlamaCppCache:
        """A copy with contexts of its own (dp_vote clones one prefill for several answers)."""
        rows = [self.lm._copy_row(row, self.lm._rt.get_state(row.ctx)) for row in self.rows]
        return LlamaCppCache(self.lm, rows)

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Each row repeated ``repeats`` times in place (a shared prefix computed once, then
        continued per row), as transformers' caches do: the copies get the row's KV state
        itself (llama.cpp's sequence state), not a recomputation."""
        if repeats < 1:
            raise InvalidParameterError(f"repeats must be >= 1; got {repeats!r}")
        rows: list[_Row] = []
        for row in self.rows:
            rows.append(row)
            state = self.lm._rt.get_state(row.ctx) if repeats > 1 else b""
            for _ in range(repeats - 1):
                other = self.lm._copy_row(row, state)
                weakref.finalize(self, self.lm._release, other.ctx, other.size)
                rows.append(other)
        self.rows = rows

    def get_seq_length(self) -> int:
        return max((row.n_past for row in self.rows), default=0)


class LlamaCppLM:
    """A GGUF file loaded by llama.cpp, with the call interface of a transformers causal LM.

    Only what the companion's generation loop and defenses use is offered: the forward
    call (logits of the last ``logits_to_keep`` positions, or all), ``parameters()`` (for
    the device: CPU), ``generation_config.eos_token_id`` and ``config.vocab_size``.
    Hidden states are not exposed: the inversion auditor loads the model with
    transformers.
    """

    backend = "llama.cpp"

    def __init__(self, path: Path, *, threads: int | None = None, eos: Sequence[int] = ()) -> None:
        self._rt = llamacpp_runtime.runtime()
        self.runtime = self._rt.name  # which llama.cpp build computes the forward pass
        self.path = Path(path)
        self._model, info = self._rt.load(str(self.path))
        self.n_vocab = info.n_vocab
        self.n_ctx_train = info.n_ctx_train
        self.n_params = info.n_params  # the GGUF's weights, counted by llama.cpp
        self.threads = threads or default_threads()
        self.description = info.description  # e.g. "qwen2 1.5B Q4_K - Medium"
        # The GGUF's weight type ("Q4_K - Medium"): what /healthz reports as the dtype.
        self.weight_type = self.description.split(" ", 2)[-1]
        eos_ids = sorted({int(t) for t in eos} | info.eog)
        self.generation_config = SimpleNamespace(eos_token_id=eos_ids)
        self.config = SimpleNamespace(vocab_size=self.n_vocab, model_type="gguf")
        self._device_probe = torch.zeros(0)
        self._pool: dict[int, list[Any]] = {}
        self._pool_lock = threading.Lock()

    # -- the parts of torch.nn.Module the loop touches ------------------------------
    def parameters(self) -> Iterator[torch.Tensor]:
        yield self._device_probe

    def eval(self) -> LlamaCppLM:
        return self

    def to(self, *_args: Any, **_kwargs: Any) -> LlamaCppLM:
        return self

    # -- contexts -------------------------------------------------------------------
    def _size_for(self, tokens: int) -> int:
        need = tokens + ANSWER_ROOM
        size = -(-need // CONTEXT_STEP) * CONTEXT_STEP
        limit = self.n_ctx_train if self.n_ctx_train > 0 else size
        if tokens >= limit:
            raise InvalidParameterError(
                f"the prompt is {tokens} tokens; this model reads at most {limit}"
            )
        return min(size, limit)

    def _acquire(self, size: int) -> Any:
        with self._pool_lock:
            free = self._pool.get(size)
            if free:
                return free.pop()
        return self._rt.context(self._model, size, self.threads)

    def _release(self, ctx: Any, size: int) -> None:
        self._rt.clear(ctx)
        with self._pool_lock:
            free = self._pool.setdefault(size, [])
            if len(free) < MAX_POOLED:
                free.append(ctx)

    def _copy_row(self, row: _Row, state: bytes) -> _Row:
        """A new row holding ``state`` (``row``'s KV cache, from llama.cpp), not recomputed."""
        other = _Row(self._acquire(row.size), row.size, row.n_past)
        self._rt.set_state(other.ctx, state)
        return other

    def _feed(self, row: _Row, tokens: list[int], *, keep: int) -> np.ndarray:
        """Decode ``tokens`` after what ``row`` holds; logits of the last ``keep`` (0: none)."""
        if row.n_past + len(tokens) > row.size:
            raise InvalidParameterError(
                f"this answer needs more than {row.size} tokens of context; ask a shorter "
                "question or a smaller max_tokens"
            )
        out = np.zeros((keep, self.n_vocab), dtype=np.float32)
        first_kept = len(tokens) - keep
        step = llamacpp_runtime.BATCH
        for start in range(0, len(tokens), step):
            piece = tokens[start : start + step]
            # the kept positions that fall in this piece, and where they go in ``out``
            lo = max(first_kept, start)
            kept = max(0, start + len(piece) - lo)
            self._rt.decode(
                row.ctx,
                piece,
                row.n_past + start,
                kept,
                out[lo - first_kept : lo - first_kept + kept],
            )
        row.n_past += len(tokens)
        return out

    # -- the forward call -----------------------------------------------------------
    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,  # implied by each row's own tokens
        cache: LlamaCppCache | None = None,
        use_cache: bool = True,
        logits_to_keep: int | None = None,
        **_ignored: Any,
    ) -> SimpleNamespace:
        ids = input_ids.tolist()
        mask = attention_mask.tolist() if attention_mask is not None else None
        if cache is not None and len(cache.rows) != len(ids):
            raise InvalidParameterError("the cache holds a different number of rows")
        width = len(ids[0]) if ids else 0
        keep = width if not logits_to_keep else min(int(logits_to_keep), width)
        rows: list[_Row] = []
        logits = torch.zeros((len(ids), keep, self.n_vocab), dtype=torch.float32)
        for r, row_ids in enumerate(ids):
            # The mask's last ``width`` columns belong to these tokens (left padding: 0).
            real = (
                [t for t, m in zip(row_ids, mask[r][-width:], strict=True) if m]
                if mask is not None
                else list(row_ids)
            )
            if cache is not None:
                row = cache.rows[r]
            else:
                size = self._size_for(len(real))
                row = _Row(self._acquire(size), size)
            rows.append(row)
            if not real:
                continue
            got = self._feed(row, real, keep=min(keep, len(real)))
            logits[r, keep - got.shape[0] :] = torch.from_numpy(got)
        new_cache = cache if cache is not None else LlamaCppCache(self, rows)
        return SimpleNamespace(logits=logits, cache=new_cache)


def load(path: Path, *, threads: int | None = None, eos: Sequence[int] = ()) -> LlamaCppLM:
    """A GGUF file as a :class:`LlamaCppLM` (raises ImportError without ``cyllama``)."""
    if not path.is_file():
        raise InvalidParameterError(f"no GGUF file at {path}")
    return LlamaCppLM(path, threads=threads, eos=eos)


__all__ = ["LlamaCppCache", "LlamaCppLM", "available", "default_threads", "load"]
