"""Veil's logits processor for vLLM's V1 engine (loaded with ``--logits-processors``).

``vllm serve MODEL --logits-processors companion.vllm.processor:VeilLogitsProcessor``
with this repository on ``PYTHONPATH`` and ``VEIL_LEDGER_DIR`` set (the companion
starts it so: :mod:`companion.vllm.server`).  Requests without ``vllm_xargs["veil"]``
pass through untouched; the work is :class:`companion.vllm.rows.VeilRows`.

Imported only inside vLLM's environment (it imports vllm).
"""

from __future__ import annotations

from typing import Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from companion.vllm.request import XARG, VeilRequest
from companion.vllm.rows import VeilRows, ledger_dir
from py_core.errors import InvalidParameterError


def check_sampling(params: SamplingParams) -> str | None:
    """Why vLLM's own sampling settings would change the token Veil chose (None: they don't).

    The processor hands vLLM a one-hot row; greedy sampling returns its token only when
    nothing after the processor can move it (a temperature, min_tokens masking the end
    of text, a logit bias, several samples, vLLM's own penalties)."""
    if params.temperature != 0.0:
        return "temperature must be 0 on the vLLM side (Veil chooses the token itself)"
    if params.n != 1:
        return "n must be 1"
    if params.min_tokens:
        return "min_tokens is not supported (it could mask the chosen token)"
    if params.logit_bias:
        return "logit_bias is not supported"
    if (
        params.repetition_penalty != 1.0
        or params.presence_penalty != 0.0
        or params.frequency_penalty != 0.0
    ):
        return "vLLM's penalties must be off (Veil applies the repetition penalty itself)"
    return None


class VeilLogitsProcessor(LogitsProcessor):
    """Runs each Veil request's defense and chooses its token (:mod:`companion.vllm.rows`)."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        extra = sampling_params.extra_args or {}
        if XARG not in extra:
            return
        try:
            VeilRequest.from_json(extra[XARG])
        except InvalidParameterError as exc:
            raise ValueError(str(exc)) from None
        why = check_sampling(sampling_params)
        if why is not None:
            raise ValueError(f"a Veil request's sampling settings: {why}")
        if ledger_dir() is None:
            raise ValueError(
                "this vLLM server was started without VEIL_LEDGER_DIR: it cannot report "
                "the noise of Veil requests (start it with `veil serve --engine vllm`)"
            )

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        model_config = vllm_config.model_config
        source = model_config.tokenizer or model_config.model

        def tokenizer() -> Any:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(source)

        self.rows = VeilRows(tokenizer)

    def is_argmax_invariant(self) -> bool:
        return False  # it chooses the token

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.rows.remove(index)
        for index, params, prompt, output in batch_update.added:
            self.rows.add(index, params.extra_args if params else None, prompt, output)
        for a, b, direction in batch_update.moved:
            self.rows.move(a, b, direction == MoveDirectionality.SWAP)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows.rows:
            return logits
        return self.rows.apply(logits)
