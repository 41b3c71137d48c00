"""A small generation loop with a KV cache, the defenses and streaming.

One loop serves every defense in :mod:`companion.decoding.registry`: it builds
the defense's per-answer mechanism and asks it for the scores of each step;
for a two-pass defense (``bounded``) it also runs the public pass (the prompt
without the retrieved context) on its own, so its logits never depend on the
private context.  The loop yields text deltas as they become printable, so the API can
stream them, and ends with a :class:`~companion.decoding.receipt.Receipt`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from companion.decoding.base import BuildContext, Mechanism
from companion.decoding.config import DefenseConfig
from companion.decoding.noise import NoiseSource
from companion.decoding.receipt import Receipt, build_receipt
from py_core.errors import InvalidParameterError


@dataclass
class GenerationResult:
    """Filled in as the generation runs; complete once the iterator is exhausted."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"
    receipt: Receipt | None = None
    prompt_tokens: int = 0
    details: dict[str, Any] = field(default_factory=dict)  # the mechanism's report(), if any


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return ids


def build_mechanism(config: DefenseConfig, ctx: BuildContext) -> Mechanism | None:
    """The per-answer mechanism of ``config``'s defense, from the registry (None: no defense)."""
    return config.defense.build(config.params, ctx)


PREFILL_CHUNK = 256  # prompt tokens per prefill forward pass (cancel is checked between)


class Cancelled(Exception):
    """The generation was cancelled during the prefill (the engine's timeout or the client)."""


def prefill(
    model: Any,
    prompt: Sequence[int],
    device: Any,
    *,
    chunk: int = PREFILL_CHUNK,
    cancel: threading.Event | None = None,
) -> tuple[Any, torch.Tensor]:
    """The prompt through the model in chunks of ``chunk`` tokens: (KV cache, last logits).

    ``cancel`` is checked before every chunk, so a long prompt stops within one
    chunk's time (raises :class:`Cancelled`).  The chunks depend only on this
    prompt, so a pass of public data stays a function of public data only.
    """
    if chunk < 1:
        raise InvalidParameterError(f"the prefill chunk must be >= 1 token; got {chunk!r}")
    tokens = list(prompt)
    if not tokens:
        raise InvalidParameterError("the prompt is empty")
    cache = None
    fwd: Any = None
    for start in range(0, len(tokens), chunk):
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled during the prefill")
        kwargs: dict[str, Any] = {
            "input_ids": torch.tensor(
                [tokens[start : start + chunk]], dtype=torch.long, device=device
            ),
            "use_cache": True,
            "logits_to_keep": 1,
        }
        if cache is not None:
            kwargs["cache"] = cache
        fwd = model(**kwargs)
        cache = fwd.cache
    return cache, fwd.logits[:, -1, :].float()


class _Pass:
    """One prompt decoded with its own KV cache, batch of one, never padded."""

    def __init__(
        self,
        model: Any,
        prompt: list[int],
        device: Any,
        *,
        chunk: int = PREFILL_CHUNK,
        cancel: threading.Event | None = None,
    ) -> None:
        self.model = model
        self.device = device
        self.cache, self.logits = prefill(model, prompt, device, chunk=chunk, cancel=cancel)

    def step(self, token: int) -> None:
        fwd = self.model(
            input_ids=torch.tensor([[token]], dtype=torch.long, device=self.device),
            cache=self.cache,
            use_cache=True,
        )
        self.cache = fwd.cache
        self.logits = fwd.logits[:, -1, :].float()


class _TwoPasses:
    """The private prompt and the public one (no retrieved context), decoded separately.

    The public pass must be a function of public data only, bit for bit: batching
    it with the private row would left-pad it to a width set by the retrieved
    context, and in bfloat16 that padding moved the public logits by up to 0.67
    and changed the public top-k.  So each pass runs alone at batch size one,
    with shapes that depend only on its own prompt.
    """

    def __init__(
        self,
        model: Any,
        private: list[int],
        public: list[int],
        device: Any,
        *,
        chunk: int = PREFILL_CHUNK,
        cancel: threading.Event | None = None,
        private_pass: bool = True,
    ) -> None:
        self.public = _Pass(model, public, device, chunk=chunk, cancel=cancel)
        # Without a private pass (a defense that runs its own) the public one stands in.
        self.private = (
            _Pass(model, private, device, chunk=chunk, cancel=cancel)
            if private_pass
            else self.public
        )

    @property
    def private_logits(self) -> torch.Tensor:
        return self.private.logits

    @property
    def public_logits(self) -> torch.Tensor:
        return self.public.logits

    def step(self, token: int) -> None:
        self.public.step(token)
        if self.private is not self.public:
            self.private.step(token)


def _choose(scores: torch.Tensor, temperature: float, generator: NoiseSource) -> int:
    """Greedy at temperature 0, else one inverse-CDF draw with the source's uniform."""
    if temperature <= 0:
        return int(torch.argmax(scores[0]))
    probs = torch.softmax(scores[0].double() / temperature, dim=-1).cpu()
    cumulative = torch.cumsum(probs, dim=0)
    u = generator.uniform() * float(cumulative[-1])
    index = int(torch.searchsorted(cumulative, torch.tensor([u], dtype=cumulative.dtype)))
    return min(index, probs.shape[0] - 1)


def generate_tokens(
    model: Any,
    tokenizer: Any,
    prompt_ids: Sequence[int],
    *,
    defense: DefenseConfig,
    generator: NoiseSource,
    context_text: str = "",
    public_prompt_ids: Sequence[int] | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    stop: Sequence[str] = (),
    cancel: threading.Event | None = None,
    result: GenerationResult | None = None,
    ignore_eos: bool = False,
    build: Callable[[DefenseConfig, BuildContext], Mechanism | None] | None = None,
    prefill_chunk: int = PREFILL_CHUNK,
    documents: Sequence[tuple[str, str]] = (),
    prompt_for: Callable[[str], list[int]] | None = None,
) -> Iterator[str]:
    """Generate an answer, yielding printable text deltas; ``result`` gets the rest.

    ``build`` replaces :func:`build_mechanism` (the benchmark wraps it to time the
    defense's own step).  ``cancel`` is checked between prefill chunks of
    ``prefill_chunk`` tokens and before every decoding step; a cancelled answer
    ends with ``finish_reason`` "cancelled".
    """
    if max_new_tokens < 1:
        raise InvalidParameterError(f"max_tokens must be >= 1; got {max_new_tokens!r}")
    if temperature < 0:
        raise InvalidParameterError(f"temperature must be >= 0; got {temperature!r}")
    out = result if result is not None else GenerationResult()
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    out.prompt_tokens = ids.shape[1]
    defense_entry = defense.defense
    mechanism = (build or build_mechanism)(
        defense,
        BuildContext(
            tokenizer=tokenizer,
            context_text=context_text,
            prompt_length=ids.shape[1],
            generator=generator,
            public_ids=public_prompt_ids or (),
            max_tokens=max_new_tokens,
            model=model,
            documents=tuple(documents),
            prompt_for=prompt_for,
        ),
    )
    pair: _TwoPasses | None = None
    with torch.inference_mode():
        try:
            if defense_entry.two_pass:
                if public_prompt_ids is None:
                    raise InvalidParameterError(
                        f"the {defense.name} defense needs the public prompt"
                    )
                pair = _TwoPasses(
                    model,
                    list(prompt_ids),
                    list(public_prompt_ids),
                    device,
                    chunk=prefill_chunk,
                    cancel=cancel,
                    private_pass=defense_entry.private_pass,
                )
                past, logits = None, pair.private_logits
            else:
                past, logits = prefill(
                    model, list(prompt_ids), device, chunk=prefill_chunk, cancel=cancel
                )
        except Cancelled:
            out.finish_reason = "cancelled"
            return
        stops = set() if ignore_eos else eos_ids(model, tokenizer)
        emitted = 0
        generated: list[int] = []
        for _ in range(max_new_tokens):
            if cancel is not None and cancel.is_set():
                out.finish_reason = "cancelled"
                break
            if mechanism is not None:
                public = pair.public_logits if pair is not None else None
                scores = mechanism.step(ids, logits, public)
            else:
                scores = logits
            token = _choose(scores, temperature, generator)
            if token in stops:
                out.finish_reason = "stop"
                break
            generated.append(token)
            out.token_ids = generated
            text = tokenizer.decode(generated, skip_special_tokens=True)
            hit = next((s for s in stop if s and s in text), None)
            if hit is not None:
                text = text[: text.index(hit)]
                out.finish_reason = "stop"
            if not text.endswith("\ufffd") and len(text) > emitted:
                delta, emitted = text[emitted:], len(text)
                out.text = text
                yield delta
            if hit is not None:
                break
            step = torch.tensor([[token]], dtype=torch.long, device=device)
            ids = torch.cat([ids, step], dim=1)
            if pair is not None:
                pair.step(token)
                logits = pair.private_logits
            else:
                fwd = model(input_ids=step, cache=past, use_cache=True)
                past, logits = fwd.cache, fwd.logits[:, -1, :].float()
    final = tokenizer.decode(generated, skip_special_tokens=True)
    if out.finish_reason == "stop":
        hit = next((s for s in stop if s and s in final), None)
        if hit is not None:
            final = final[: final.index(hit)]
    if len(final) > emitted:
        yield final[emitted:]
    out.text = final
    out.token_ids = generated
    ledger = mechanism.ledger if mechanism is not None else None
    steps = len(ledger.records) if ledger is not None else len(generated)
    out.receipt = build_receipt(defense, ledger, steps, max_new_tokens)
    report = getattr(mechanism, "report", None)
    if callable(report):
        out.details = report()


def generate_text(
    model: Any, tokenizer: Any, prompt_ids: Sequence[int], **kwargs: Any
) -> GenerationResult:
    """Run :func:`generate_tokens` to the end and return its result."""
    result = GenerationResult()
    for _ in generate_tokens(model, tokenizer, prompt_ids, result=result, **kwargs):
        pass
    return result
