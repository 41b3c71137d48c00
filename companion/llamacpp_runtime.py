"""The two llama.cpp builds the companion can run a GGUF on, behind one small interface.

- ``llama-cpp-python`` (the ``llama_cpp`` package) **compiled on this machine** by
  ``scripts/setup.sh`` for its own CPU (``GGML_NATIVE``: AVX-512 and VNNI where the CPU
  has them).  On the 2-core development machine it gives Qwen2.5-Coder-1.5B its first
  token for a 512-token prompt in 3.50 s against the prebuilt wheel's 8.43 s (2.4x; the
  0.5B: 2.25 vs 3.68 s, bench/backend_bench.py) -- the time to the first token dominates a
  RAG answer (docs/answers/models.md).  PyPI has no such build (its prebuilt llama.cpp
  wheels are generic AVX2 code), hence the compile (3-10 minutes on 2 cores).
- ``cyllama``: a prebuilt wheel (llama.cpp b9190, AVX2), installed everywhere, used when
  the native build is absent or ``VEIL_LLAMACPP=cyllama`` asks for it.

``VEIL_LLAMACPP`` = ``auto`` (the default: llama-cpp-python if it imports, else cyllama),
``llama-cpp-python`` or ``cyllama``.  Both give :class:`companion.llamacpp.LlamaCppLM` the
same operations -- load a model, open a context, decode a piece of a sequence returning the
logits asked for, copy and clear a sequence's KV state -- and nothing else: sampling, the
defenses' noise and the receipts stay in Veil's code whichever build computes the forward
pass.  Each context holds one sequence, so rows are never batched together in either.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from py_core.errors import InvalidParameterError

NAMES = ("llama-cpp-python", "cyllama")
BATCH = 256  # tokens decoded per llama_decode call (n_batch = n_ubatch)


def _imports(name: str) -> bool:
    try:
        if name == "cyllama":
            import cyllama.llama.llama_cpp  # noqa: F401
        else:
            import llama_cpp.llama_cpp  # noqa: F401
    except (ImportError, OSError):  # OSError: the compiled library failed to load
        return False
    return True


def installed() -> list[str]:
    """The builds that import here, preferred first."""
    return [name for name in NAMES if _imports(name)]


def chosen() -> str | None:
    """The build ``$VEIL_LLAMACPP`` selects (None: no llama.cpp build is installed)."""
    want = os.environ.get("VEIL_LLAMACPP", "auto").strip() or "auto"
    if want not in ("auto", *NAMES):
        raise InvalidParameterError(
            f"VEIL_LLAMACPP must be auto, {' or '.join(NAMES)}; got {want!r}"
        )
    have = installed()
    if want == "auto":
        return have[0] if have else None
    if want not in have:
        raise InvalidParameterError(
            f"VEIL_LLAMACPP={want} but {want} is not installed here "
            "(scripts/setup.sh builds llama-cpp-python; cyllama is a wheel in requirements)"
        )
    return want


@dataclass
class ModelInfo:
    n_vocab: int
    n_ctx_train: int
    n_params: int
    description: str  # e.g. "qwen2 1.5B Q4_K - Medium"
    eog: set[int]  # end-of-generation tokens (eos, eot)


def _one_sequence(params: Any, size: int, threads: int) -> Any:
    """Context parameters (either build's): ``size`` tokens of one sequence, ``threads``."""
    params.n_ctx = size
    params.n_batch = BATCH
    params.n_ubatch = BATCH
    params.n_seq_max = 1
    params.n_threads = threads
    params.n_threads_batch = threads
    return params


class _Cyllama:
    """cyllama 0.2.18's object API."""

    name = "cyllama"

    def __init__(self) -> None:
        import cyllama.llama.llama_cpp as cy

        self.cy = cy
        cy.disable_logging()
        cy.ggml_backend_load_all()

    def load(self, path: str) -> tuple[Any, ModelInfo]:
        cy = self.cy

        class _Model(cy.LlamaModel):  # type: ignore[name-defined]
            # cyllama 0.2.18's get_logits/get_logits_ith read ``model.n_vocab``, which its
            # LlamaModel lacks (AttributeError); the vocabulary has it.
            @property
            def n_vocab(self) -> int:
                return int(self.get_vocab().n_vocab)

        params = cy.LlamaModelParams()
        params.n_gpu_layers = 0
        model = _Model(path, params)
        vocab = model.get_vocab()
        eog = {int(t) for t in (vocab.token_eos(), vocab.token_eot()) if t is not None}
        info = ModelInfo(
            n_vocab=int(vocab.n_vocab),
            n_ctx_train=int(model.n_ctx_train),
            n_params=int(model.n_params),
            description=str(model.desc),
            eog={t for t in eog if t >= 0},
        )
        return model, info

    def context(self, model: Any, size: int, threads: int) -> Any:
        cy = self.cy
        params = _one_sequence(cy.LlamaContextParams(), size, threads)
        return cy.LlamaContext(model, params)

    def decode(
        self, ctx: Any, tokens: Sequence[int], n_past: int, keep: int, out: np.ndarray
    ) -> None:
        """Decode ``tokens`` at positions ``n_past…``; the last ``keep`` logits into ``out``."""
        batch = self.cy.LlamaBatch(n_tokens=len(tokens), embd=0, n_seq_max=1)
        try:
            first_kept = len(tokens) - keep
            for i, token in enumerate(tokens):
                batch.add(int(token), n_past + i, [0], i >= first_kept)
            ctx.decode(batch)
            for j in range(keep):
                out[j] = np.asarray(ctx.get_logits_ith(first_kept + j), dtype=np.float32)
        finally:
            batch.close()

    def clear(self, ctx: Any) -> None:
        ctx.kv_cache_clear()

    def get_state(self, ctx: Any) -> bytes:
        return bytes(ctx.get_state_seq_data(0))

    def set_state(self, ctx: Any, state: bytes) -> None:
        ctx.set_state_seq_data(state, 0)


_SILENT: Any = None  # the log callback handed to llama.cpp (kept alive here)


class _LlamaCppPython:
    """llama-cpp-python's ctypes bindings of the llama.h C API (the ``llama_cpp`` package)."""

    name = "llama-cpp-python"

    def __init__(self) -> None:
        global _SILENT
        import llama_cpp.llama_cpp as lc

        self.lc = lc
        if _SILENT is None:
            _SILENT = lc.llama_log_callback(lambda level, text, user: None)
        lc.llama_log_set(_SILENT, ctypes.c_void_p(0))
        lc.llama_backend_init()

    def load(self, path: str) -> tuple[Any, ModelInfo]:
        lc = self.lc
        params = lc.llama_model_default_params()
        params.n_gpu_layers = 0
        # No weight repacking (llama.cpp's "extra buffer types") unless VEIL_LLAMACPP_REPACK=1:
        # on this build it slows the prompt more than it speeds the steps -- Qwen2.5-Coder-1.5B,
        # 512-token prompt: first token 3.50 s without, 5.22 s with; 12.1 vs 15.6 tokens/s, so
        # a 48-token answer takes 7.5 s without and 8.3 s with (bench/backend_bench.py).
        params.use_extra_bufts = os.environ.get("VEIL_LLAMACPP_REPACK", "0") == "1"
        ptr = lc.llama_model_load_from_file(path.encode(), params)
        if not ptr:
            raise InvalidParameterError(f"llama.cpp could not load the GGUF file {path}")
        model = _Owned(lc.llama_model_free, ptr)
        vocab = lc.llama_model_get_vocab(ptr)
        buf = ctypes.create_string_buffer(256)
        lc.llama_model_desc(ptr, buf, len(buf))
        eog = {int(lc.llama_vocab_eos(vocab)), int(lc.llama_vocab_eot(vocab))}
        info = ModelInfo(
            n_vocab=int(lc.llama_vocab_n_tokens(vocab)),
            n_ctx_train=int(lc.llama_model_n_ctx_train(ptr)),
            n_params=int(lc.llama_model_n_params(ptr)),
            description=buf.value.decode("utf-8", "replace"),
            eog={t for t in eog if t >= 0},
        )
        return model, info

    def context(self, model: Any, size: int, threads: int) -> Any:
        lc = self.lc
        params = _one_sequence(lc.llama_context_default_params(), size, threads)
        ptr = lc.llama_init_from_model(model.ptr, params)
        if not ptr:
            raise InvalidParameterError(f"llama.cpp could not open a context of {size} tokens")
        return _Owned(lc.llama_free, ptr, keeps=model)

    def decode(
        self, ctx: Any, tokens: Sequence[int], n_past: int, keep: int, out: np.ndarray
    ) -> None:
        lc = self.lc
        n = len(tokens)
        batch = lc.llama_batch_init(n, 0, 1)
        try:
            first_kept = n - keep
            for i, token in enumerate(tokens):
                batch.token[i] = int(token)
                batch.pos[i] = n_past + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = i >= first_kept
            batch.n_tokens = n
            status = lc.llama_decode(ctx.ptr, batch)
            if status != 0:
                raise InvalidParameterError(f"llama.cpp could not decode ({status})")
            n_vocab = out.shape[1]
            for j in range(keep):
                row = lc.llama_get_logits_ith(ctx.ptr, first_kept + j)
                out[j] = np.ctypeslib.as_array(row, shape=(n_vocab,))
        finally:
            lc.llama_batch_free(batch)

    def clear(self, ctx: Any) -> None:
        self.lc.llama_memory_clear(self.lc.llama_get_memory(ctx.ptr), True)

    def get_state(self, ctx: Any) -> bytes:
        lc = self.lc
        size = int(lc.llama_state_seq_get_size(ctx.ptr, 0))
        buf = (ctypes.c_uint8 * size)()
        got = int(lc.llama_state_seq_get_data(ctx.ptr, buf, size, 0))
        return bytes(buf[:got])

    def set_state(self, ctx: Any, state: bytes) -> None:
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if int(self.lc.llama_state_seq_set_data(ctx.ptr, buf, len(state), 0)) == 0:
            raise InvalidParameterError("llama.cpp refused a sequence's saved state")


class _Owned:
    """A llama.cpp model or context pointer, freed (by ``free``) when this object is; a
    context keeps its model alive (``keeps``) so the model is freed after its contexts."""

    def __init__(self, free: Any, ptr: Any, keeps: Any = None) -> None:
        self.free = free
        self.ptr = ptr
        self.keeps = keeps

    def __del__(self) -> None:
        if self.ptr:
            self.free(self.ptr)
            self.ptr = None


_RUNTIMES: dict[str, Any] = {}


def runtime(name: str | None = None) -> Any:
    """The runtime object for ``name`` (default: :func:`chosen`), created once per process."""
    name = name or chosen()
    if name is None:
        raise ImportError("no llama.cpp build is installed (cyllama or llama-cpp-python)")
    if name not in _RUNTIMES:
        _RUNTIMES[name] = _LlamaCppPython() if name == "llama-cpp-python" else _Cyllama()
    return _RUNTIMES[name]


__all__ = ["NAMES", "ModelInfo", "chosen", "installed", "runtime"]
