"""Inside vLLM's sampler: each Veil request's defense, run by the in-process engine's code.

vLLM calls its batch-level logits processors once per step with the logits of every
running request (before its own penalties and temperature).  For each row that
carries a :class:`~companion.vllm.request.VeilRequest` this module does what the
in-process loop (:mod:`companion.decoding.generate`) does at one step, with the same
functions and in the same order:

1. the repetition penalty over the last ``repetition_window`` released tokens;
2. the defense's mechanism (built by the same registry ``build`` from the same
   inputs), which records the noise scale of this token on its ledger;
3. the token choice (greedy, or one inverse-CDF draw at the request's temperature);

with the noise and the draw from :class:`~companion.decoding.noise.KeyedNoise` (the
answer's own secret key, the same on every tensor-parallel rank).  The row's logits
are then replaced by a one-hot row (0 for the chosen token, -inf elsewhere), and the
request is sent to vLLM at temperature 0 with no penalties of its own, so vLLM's
sampler returns exactly the chosen token: the sigma a receipt states is the sigma
that was added, and vLLM's temperature scaling (which comes after custom processors) never
touches the noisy scores.  Each step's record -- its noise scale, reasons and chosen
token -- is appended to ``<ledger dir>/<request id>.jsonl`` before the token exists,
so the companion can release a token only once its record is there and matches.

Torch and Veil's own modules only: no vLLM import (tests drive it directly).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from companion.vllm.request import LEDGER_ENV, XARG, VeilRequest, tokenizer_fingerprint
from py_core.errors import InvalidParameterError


@dataclass
class _Row:
    request: VeilRequest | None  # None: a request the processor could not read
    prompt: list[int]
    output: list[int]  # vLLM's running list of this request's output tokens (a reference)
    mechanism: Any
    noise: Any
    ledger: IO[str] | None
    written: int = 0  # ledger records already written
    failed: str | None = None


def ledger_dir() -> Path | None:
    value = os.environ.get(LEDGER_ENV)
    return Path(value) if value else None


def _writes_ledger() -> bool:
    """Only one rank writes a ledger (all ranks compute the same records)."""
    dist = torch.distributed
    return not (dist.is_available() and dist.is_initialized() and dist.get_rank() != 0)


class VeilRows:
    """The Veil requests of one vLLM batch, by batch index.

    ``tokenizer`` loads the served model's tokenizer (copy_aware reads the context
    with it); it is called once, on the first request that needs it.
    """

    def __init__(self, tokenizer: Callable[[], Any], ledgers: Path | None = None) -> None:
        self._load_tokenizer = tokenizer
        self._tokenizer: Any = None
        self.ledgers = ledgers if ledgers is not None else ledger_dir()
        self.rows: dict[int, _Row] = {}
        self.write = _writes_ledger()

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = self._load_tokenizer()
        return self._tokenizer

    # -------------------------------------------------------------- batch updates

    def add(
        self,
        index: int,
        extra_args: dict[str, Any] | None,
        prompt: Sequence[int] | None,
        output: list[int],
    ) -> None:
        self.remove(index)
        if not extra_args or XARG not in extra_args:
            return  # not a Veil request: left alone
        try:
            request = VeilRequest.from_json(extra_args[XARG])
        except InvalidParameterError as exc:  # validate_params refused it already
            self.rows[index] = _Row(None, [], output, None, None, None, failed=str(exc))
            return
        row = _Row(request, list(prompt or ()), output, None, None, None)
        self.rows[index] = row
        try:
            self._build(row)
        except Exception as exc:  # fail closed: the row writes an error record, no token
            row.failed = f"{type(exc).__name__}: {exc}"
        if row.ledger is not None:
            sensitivity = row.mechanism.ledger.sensitivity if row.mechanism is not None else None
            self._line(row, {"id": request.id, "sensitivity": sensitivity, "error": row.failed})

    def _build(self, row: _Row) -> None:
        from companion.decoding.base import BuildContext
        from companion.decoding.config import DefenseConfig
        from companion.decoding.generate import build_mechanism
        from companion.decoding.noise import KeyedNoise

        request = row.request
        assert request is not None
        if self.write:
            if self.ledgers is None:
                raise InvalidParameterError(
                    f"this vLLM server has no {LEDGER_ENV}: it cannot report noise records"
                )
            row.ledger = (self.ledgers / f"{request.id}.jsonl").open("a", encoding="utf-8")
        config = DefenseConfig.from_options(request.defense, request.params)
        row.noise = KeyedNoise(bytes.fromhex(request.key))
        tokenizer = self.tokenizer if request.defense == "copy_aware" else None
        if tokenizer is not None and tokenizer_fingerprint(tokenizer) != request.tokenizer:
            raise InvalidParameterError(
                "the vLLM server's tokenizer differs from the companion's: the defense "
                "would read the documents with other tokens"
            )
        row.mechanism = build_mechanism(
            config,
            BuildContext(
                tokenizer=tokenizer,
                context_text=request.context_text,
                prompt_length=len(row.prompt),
                generator=row.noise,
                public_ids=tuple(request.public_ids),
                max_tokens=request.max_tokens,
            ),
        )

    def remove(self, index: int) -> None:
        row = self.rows.pop(index, None)
        if row is not None and row.ledger is not None:
            with contextlib.suppress(OSError):
                row.ledger.close()

    def close(self) -> None:
        for index in list(self.rows):
            self.remove(index)

    def move(self, a: int, b: int, swap: bool) -> None:
        first, second = self.rows.pop(a, None), self.rows.pop(b, None)
        if first is not None:
            self.rows[b] = first
        if swap and second is not None:
            self.rows[a] = second
        elif second is not None and second.ledger is not None:  # a one-way move replaces b
            with contextlib.suppress(OSError):
                second.ledger.close()

    # ---------------------------------------------------------------------- a step

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for index, row in self.rows.items():
            if index >= logits.shape[0]:
                continue
            try:
                token = self._step(row, logits[index : index + 1])
            except Exception as exc:  # fail closed: an error record, and a token nobody sees
                row.failed = row.failed or f"{type(exc).__name__}: {exc}"
                self._line(row, {"error": row.failed})
                token = 0
            logits[index].fill_(float("-inf"))
            logits[index, token] = 0.0
        return logits

    def _step(self, row: _Row, logits: torch.Tensor) -> int:
        from companion.decoding.generate import choose_token, penalise_repeats

        request = row.request
        if row.failed is not None or request is None:
            raise InvalidParameterError(row.failed or "unreadable request")
        scores = logits.float().clone()
        generated = row.output
        if request.repetition_penalty != 1.0:
            penalise_repeats(
                scores, generated[-request.repetition_window :], request.repetition_penalty
            )
        ids = torch.tensor([row.prompt + list(generated)], dtype=torch.long)
        step = len(generated)
        out = row.mechanism.step(ids, scores, None) if row.mechanism is not None else scores
        token = choose_token(out, request.temperature, row.noise)
        if row.mechanism is None:
            self._line(row, {"step": step, "sigma": None, "reasons": [], "token": token})
        else:
            records = row.mechanism.ledger.records
            for record in records[row.written :]:
                self._line(
                    row,
                    {
                        "step": record.step,
                        "sigma": record.sigma,
                        "reasons": list(record.reasons),
                        "token": token,
                    },
                )
            row.written = len(records)
        return token

    def _line(self, row: _Row, record: dict[str, Any]) -> None:
        if row.ledger is None:
            return
        row.ledger.write(json.dumps(record, separators=(",", ":")) + "\n")
        row.ledger.flush()
