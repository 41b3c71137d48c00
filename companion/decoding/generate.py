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
    public_prompt_tokens: int = 0  # the prompt without the retrieved context
    looped: bool = False  # ended because it repeated itself (GenerationConfig.stop_loops)
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


def choose_token(scores: torch.Tensor, temperature: float, generator: NoiseSource) -> int:
    """Greedy at temperature 0, else one inverse-CDF draw with the source's uniform."""
    if temperature <= 0:
        return int(torch.argmax(scores[0]))
    probs = torch.softmax(scores[0].double() / temperature, dim=-1).cpu()
    cumulative = torch.cumsum(probs, dim=0)
    u = generator.uniform() * float(cumulative[-1])
    index = int(torch.searchsorted(cumulative, torch.tensor([u], dtype=cumulative.dtype)))
    return min(index, probs.shape[0] - 1)


@dataclass(frozen=True)
class GenerationConfig:
    """Everything one answer's generation needs besides the model: one value, validated.

    ``prompt_ids`` is what the model reads (for a defense without a private pass,
    dp_vote, the public prompt); ``public_prompt_ids`` the prompt without the retrieved
    context (a two-pass defense's public pass).  ``documents`` and ``prompt_for`` are
    dp_vote's inputs (the retrieved chunks with their document, and the prompt of one
    group's context).  ``build`` replaces :func:`build_mechanism` (a benchmark wraps it
    to time the defense's own step).  ``repetition_penalty`` divides (or multiplies, for
    negative logits) the scores of tokens already generated, before the defense: a
    function of the public output so far, it is post-processing of what the defense
    released (docs/methods/decoding.md).
    """

    prompt_ids: Sequence[int]
    defense: DefenseConfig
    generator: NoiseSource
    context_text: str = ""
    public_prompt_ids: Sequence[int] | None = None
    max_new_tokens: int = 256
    temperature: float = 0.0
    stop: Sequence[str] = ()
    ignore_eos: bool = False
    build: Callable[[DefenseConfig, BuildContext], Mechanism | None] | None = None
    prefill_chunk: int = PREFILL_CHUNK
    documents: Sequence[tuple[str, str]] = ()
    prompt_for: Callable[[str], list[int]] | None = None
    question: str = ""  # the last user message (a defense that asks its groups: dp_answer)
    repetition_penalty: float = 1.0
    repetition_window: int = 64  # the last tokens the penalty looks at (Ollama's repeat_last_n)
    # A guest's formal answer: after the private prefill, as many more prompt tokens of
    # throwaway work as make it this long, so the time to the first token does not depend
    # on how much context was retrieved (None: no padding).
    pad_prefill_to: int | None = None
    # End the answer once its last tokens are one block repeated this many times in a row
    # (a loop that would run to max_tokens; 0: never).  Computed from released tokens only.
    stop_loops: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise InvalidParameterError(f"max_tokens must be >= 1; got {self.max_new_tokens!r}")
        if self.temperature < 0:
            raise InvalidParameterError(f"temperature must be >= 0; got {self.temperature!r}")
        if self.repetition_window < 1:
            raise InvalidParameterError(
                f"repetition_window must be >= 1 token; got {self.repetition_window!r}"
            )
        if not self.repetition_penalty >= 1.0:
            raise InvalidParameterError(
                f"repetition_penalty must be >= 1 (1 is none); got {self.repetition_penalty!r}"
            )


def pad_prefill(
    model: Any,
    done: int,
    target: int | None,
    device: Any,
    *,
    chunk: int = PREFILL_CHUNK,
    cancel: threading.Event | None = None,
) -> None:
    """Throwaway forward passes over ``target - done`` prompt tokens (nothing is kept).

    Run after a real prefill of ``done`` tokens, in chunks of ``chunk`` like it, so that
    a prefill of any length up to ``target`` costs about what one of ``target`` tokens
    does (the filler attends to its own cache, not the real one: on CPU a prefill's time
    is mostly its linear layers, linear in the tokens; bench/guest_timing_bench.py
    measures what remains).
    """
    if target is None or target <= done:
        return
    cache = None
    for start in range(0, target - done, chunk):
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled during the prefill")
        n = min(chunk, target - done - start)
        kwargs: dict[str, Any] = {
            "input_ids": torch.zeros((1, n), dtype=torch.long, device=device),
            "use_cache": True,
            "logits_to_keep": 1,
        }
        if cache is not None:
            kwargs["cache"] = cache
        cache = model(**kwargs).cache


LOOP_MAX_PERIOD = 48  # the longest repeated block (tokens) a loop is looked for in
LOOP_MIN_TOKENS = 16  # a loop is at least this many tokens (not "ha ha ha")


def looping(generated: Sequence[int], cycles: int) -> bool:
    """Whether the last tokens are one block of 1..48 tokens repeated ``cycles`` times in a
    row, and at least 16 tokens in all (more repeats of a short block)."""
    if cycles < 2:
        return False
    n = len(generated)
    for period in range(1, LOOP_MAX_PERIOD + 1):
        repeats = max(cycles, -(-LOOP_MIN_TOKENS // period))
        span = period * repeats
        if span > n:
            continue
        tail = list(generated[n - span :])
        block = tail[:period]
        if all(tail[i : i + period] == block for i in range(period, span, period)):
            return True
    return False


def penalise_repeats(scores: torch.Tensor, generated: Sequence[int], penalty: float) -> None:
    """CTRL's repetition penalty (as in Ollama and transformers), in place, on ``scores``.

    Each token already generated has its score divided by ``penalty`` when positive and
    multiplied by it when negative.  It reads only the released tokens, so applied to
    the logits before a defense it changes what the defense is given as a function of
    public data only.
    """
    if penalty == 1.0 or not generated:
        return
    index = torch.tensor(sorted(set(generated)), dtype=torch.long, device=scores.device)
    picked = scores[0, index]
    scores[0, index] = torch.where(picked > 0, picked / penalty, picked * penalty)


class Release:
    """What an answer shows of its tokens as they come, the same for every engine: the text
    up to a stop string, in printable deltas (never half a character), ending at a stop
    string or a loop (:func:`looping`).  Fills ``out``'s token ids, text and finish reason.
    """

    def __init__(
        self, tokenizer: Any, stop: Sequence[str], stop_loops: int, out: GenerationResult
    ) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.stop_loops = stop_loops
        self.out = out
        self.generated: list[int] = []
        self.emitted = 0

    def _cut(self, text: str) -> tuple[str, bool]:
        hit = next((s for s in self.stop if s and s in text), None)
        return (text, False) if hit is None else (text[: text.index(hit)], True)

    def add(self, token: int) -> tuple[str, bool]:
        """Release ``token``: (the new printable text, whether the answer ends here)."""
        out = self.out
        self.generated.append(token)
        out.token_ids = self.generated
        text, hit = self._cut(self.tokenizer.decode(self.generated, skip_special_tokens=True))
        if hit:
            out.finish_reason = "stop"
        delta = ""
        if not text.endswith("\ufffd") and len(text) > self.emitted:
            delta, self.emitted = text[self.emitted :], len(text)
            out.text = text
        if hit:
            return delta, True
        if looping(self.generated, self.stop_loops):
            out.finish_reason = "stop"
            out.looped = True
            return delta, True
        return delta, False

    def finish(self) -> str:
        """The answer's last text not yet released; ``out`` holds the whole answer."""
        final = self.tokenizer.decode(self.generated, skip_special_tokens=True)
        if self.out.finish_reason == "stop":
            final, _ = self._cut(final)
        rest = final[self.emitted :] if len(final) > self.emitted else ""
        self.out.text = final
        self.out.token_ids = self.generated
        return rest


class Generation:
    """One answer's generation: iterate it for printable text deltas, then read ``result``.

    ``cancel`` is checked between prefill chunks of ``config.prefill_chunk`` tokens and
    before every decoding step; a cancelled answer ends with ``finish_reason``
    "cancelled".
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        config: GenerationConfig,
        cancel: threading.Event | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.cancel = cancel
        self.result = GenerationResult()

    def __iter__(self) -> Iterator[str]:
        return _generate(self.model, self.tokenizer, self.config, self.cancel, self.result)


def _generate(
    model: Any,
    tokenizer: Any,
    config: GenerationConfig,
    cancel: threading.Event | None,
    out: GenerationResult,
) -> Iterator[str]:
    defense = config.defense
    stop = config.stop
    device = next(model.parameters()).device
    ids = torch.tensor([list(config.prompt_ids)], dtype=torch.long, device=device)
    out.prompt_tokens = ids.shape[1]
    public_ids = config.public_prompt_ids
    out.public_prompt_tokens = len(public_ids) if public_ids is not None else ids.shape[1]
    defense_entry = defense.defense
    mechanism = (config.build or build_mechanism)(
        defense,
        BuildContext(
            tokenizer=tokenizer,
            context_text=config.context_text,
            prompt_length=ids.shape[1],
            generator=config.generator,
            public_ids=config.public_prompt_ids or (),
            max_tokens=config.max_new_tokens,
            model=model,
            documents=tuple(config.documents),
            prompt_for=config.prompt_for,
            question=config.question,
        ),
    )
    pair: _TwoPasses | None = None
    with torch.inference_mode():
        try:
            if defense_entry.two_pass:
                if config.public_prompt_ids is None:
                    raise InvalidParameterError(
                        f"the {defense.name} defense needs the public prompt"
                    )
                pair = _TwoPasses(
                    model,
                    list(config.prompt_ids),
                    list(config.public_prompt_ids),
                    device,
                    chunk=config.prefill_chunk,
                    cancel=cancel,
                    private_pass=defense_entry.private_pass,
                )
                past, logits = None, pair.private_logits
            else:
                past, logits = prefill(
                    model,
                    list(config.prompt_ids),
                    device,
                    chunk=config.prefill_chunk,
                    cancel=cancel,
                )
            if defense_entry.private_pass:  # dp_vote's groups run at one public width
                pad_prefill(
                    model,
                    len(config.prompt_ids),
                    config.pad_prefill_to,
                    device,
                    chunk=config.prefill_chunk,
                    cancel=cancel,
                )
        except Cancelled:
            out.finish_reason = "cancelled"
            return
        stops = set() if config.ignore_eos else eos_ids(model, tokenizer)
        release = Release(tokenizer, stop, config.stop_loops, out)
        generated = release.generated
        for _ in range(config.max_new_tokens):
            if cancel is not None and cancel.is_set():
                out.finish_reason = "cancelled"
                break
            public = pair.public_logits if pair is not None else None
            if config.repetition_penalty != 1.0:
                logits = logits.clone()
                recent = generated[-config.repetition_window :]
                penalise_repeats(logits, recent, config.repetition_penalty)
                if public is not None:
                    public = public.clone()
                    penalise_repeats(public, recent, config.repetition_penalty)
            scores = mechanism.step(ids, logits, public) if mechanism is not None else logits
            token = choose_token(scores, config.temperature, config.generator)
            if token in stops:
                out.finish_reason = "stop"
                break
            delta, done = release.add(token)
            if delta:
                yield delta
            if done:
                break
            step = torch.tensor([[token]], dtype=torch.long, device=device)
            ids = torch.cat([ids, step], dim=1)
            if pair is not None:
                pair.step(token)
                logits = pair.private_logits
            else:
                fwd = model(input_ids=step, cache=past, use_cache=True)
                past, logits = fwd.cache, fwd.logits[:, -1, :].float()
    rest = release.finish()
    if rest:
        yield rest
    ledger = mechanism.ledger if mechanism is not None else None
    steps = len(ledger.records) if ledger is not None else len(generated)
    out.receipt = build_receipt(defense, ledger, steps, config.max_new_tokens)
    report = getattr(mechanism, "report", None)
    if callable(report):
        out.details = report()


def generate_text(
    model: Any,
    tokenizer: Any,
    config: GenerationConfig,
    cancel: threading.Event | None = None,
) -> GenerationResult:
    """Run a :class:`Generation` to the end and return its result."""
    run = Generation(model, tokenizer, config, cancel)
    for _ in run:
        pass
    return run.result
