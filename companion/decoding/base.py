"""What every decoding defense shares: the registry entry's shape, the noise ledger, helpers.

A defense is one :class:`Defense` object (in its own module under
:mod:`companion.decoding.defenses`, listed once in
:mod:`companion.decoding.registry`): its validated configuration type, how it
builds its per-answer :class:`Mechanism` (a transformers-style
``LogitsProcessor`` for single-pass defenses), and the :class:`Guarantee` its
receipt states, including the neighbouring relation it covers.

Mechanisms write one :class:`StepRecord` per generated token into their
:class:`NoiseLedger`; the receipt turns the ledger's Gaussian events into
``(eps, delta)`` with :class:`py_core.accounting.RdpAccountant` -- the one
accountant interface every receipt in Veil uses.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import torch
from transformers import LogitsProcessor

from companion.decoding.noise import NoiseSource, check_source
from py_core.accounting import GaussianEvent, RdpAccountant
from py_core.errors import InvalidParameterError

# The neighbouring relation of the formal defenses: any change of the retrieved context
# (so also adding or removing one document).
REPLACE_CONTEXT = "replacing the whole retrieved context"

# Above this epsilon a receipt says in words that the figure is no protection.
MEANINGFUL_EPSILON = 10.0


# ----------------------------------------------------------------------------- ledger


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What the defense did at one generated token."""

    step: int
    sigma: float | None  # None: the token was not protected (no noise)
    reasons: tuple[str, ...] = ()


@dataclass(slots=True)
class NoiseLedger:
    """The realised noise schedule of one answer."""

    sensitivity: float
    records: list[StepRecord] = field(default_factory=list)

    def record(self, step: int, sigma: float | None, reasons: Sequence[str] = ()) -> None:
        self.records.append(StepRecord(step, sigma, tuple(reasons)))

    @property
    def sigmas(self) -> list[float]:
        return [r.sigma for r in self.records if r.sigma is not None]

    def events(self) -> list[GaussianEvent]:
        """One Gaussian event per protected token (noise sigma on sensitivity)."""
        return [GaussianEvent(s, self.sensitivity) for s in self.sigmas]

    def reason_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.records:
            for reason in r.reasons:
                counts[reason] = counts.get(reason, 0) + 1
        return counts


def receipt_epsilon(ledger: NoiseLedger, delta: float) -> tuple[float, float]:
    """(epsilon, best order) of the realised noise schedule, by the RDP accountant."""
    accountant = RdpAccountant().compose_all(ledger.events())
    eps, order = accountant.get_epsilon_and_order(delta)
    assert order is not None
    return eps, order


# ---------------------------------------------------------------------------- helpers


def clip_l2(x: torch.Tensor, bound: float) -> torch.Tensor:
    """``x * min(1, bound / ||x||_2)`` along the last dimension (a new tensor)."""
    norm = torch.linalg.vector_norm(x.float(), dim=-1, keepdim=True)
    factor = torch.clamp(bound / norm.clamp_min(1e-12), max=1.0)
    return x * factor.to(x.dtype)


def gaussian(shape: Sequence[int], like: torch.Tensor, generator: NoiseSource) -> torch.Tensor:
    """Standard normal noise of ``shape`` from ``generator``, on ``like``'s device and dtype."""
    return generator.normal(shape, like)


@functools.lru_cache(maxsize=256)
def calibrate_sigma(epsilon: float, sensitivity: float, delta: float, steps: int) -> float:
    """The smallest sigma for which ``steps`` Gaussian releases compose to <= epsilon.

    Cached: one answer asks for it several times (the mechanism, its receipt, the
    document and guest-key charges), and the bisection costs ~10 ms at 1,024 steps.
    """
    from py_core.accounting import gaussian_rdp_epsilon

    if steps < 1:
        raise InvalidParameterError(f"steps must be >= 1; got {steps!r}")
    lo, hi = 1e-6 * sensitivity, 1.0 * sensitivity
    while gaussian_rdp_epsilon([hi] * steps, sensitivity, delta)[0] > epsilon:
        hi *= 2.0
        if hi > 1e12 * sensitivity:
            raise InvalidParameterError(f"epsilon {epsilon!r} is too small to calibrate")
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if gaussian_rdp_epsilon([mid] * steps, sensitivity, delta)[0] > epsilon:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    return hi


# ------------------------------------------------------------------ the per-answer step


class Mechanism(Protocol):
    """What a defense builds for one answer."""

    ledger: NoiseLedger

    def step(
        self, input_ids: torch.Tensor, scores: torch.Tensor, public_scores: torch.Tensor | None
    ) -> torch.Tensor:
        """The scores to choose the next token from (``public_scores``: two-pass defenses)."""
        ...


class TokenDefense(LogitsProcessor):
    """Base of the single-pass defenses: the transformers ``LogitsProcessor`` contract.

    ``__call__(input_ids, scores) -> scores``, ``scores`` never modified in
    place; one sequence at a time; a :class:`NoiseLedger` with one record per
    token.  :meth:`step` adapts it to the generation loop's :class:`Mechanism`.
    """

    def __init__(self, prompt_length: int, generator: NoiseSource, sensitivity: float) -> None:
        if prompt_length < 0:
            raise InvalidParameterError(f"prompt_length must be >= 0; got {prompt_length!r}")
        self.prompt_length = prompt_length
        self.generator = check_source(generator)
        self.ledger = NoiseLedger(sensitivity=sensitivity)

    def _step(self, input_ids: torch.Tensor, scores: torch.Tensor) -> int:
        if scores.dim() != 2 or scores.shape[0] != 1 or input_ids.shape[0] != 1:
            raise InvalidParameterError(
                f"decoding defenses work on one sequence at a time; got scores of shape "
                f"{tuple(scores.shape)}"
            )
        step = int(input_ids.shape[1]) - self.prompt_length
        if step < 0:
            raise InvalidParameterError(
                f"input_ids ({input_ids.shape[1]} tokens) is shorter than the prompt "
                f"({self.prompt_length}); pass the prompt length of this generation"
            )
        return step

    def step(
        self, input_ids: torch.Tensor, scores: torch.Tensor, public_scores: torch.Tensor | None
    ) -> torch.Tensor:
        return self(input_ids, scores)


# ---------------------------------------------------------------------- registry entry


@dataclass(frozen=True, slots=True)
class BuildContext:
    """What a defense may use to build its mechanism for one answer."""

    tokenizer: Any
    context_text: str
    prompt_length: int
    generator: NoiseSource
    public_ids: Sequence[int] = ()
    max_tokens: int = 256
    # For defenses that run their own forward passes (``dp_vote``): the model, the
    # retrieved documents as (document key, text) pairs best first, and the prompt
    # for a given context text (the conversation is the caller's).
    model: Any = None
    documents: Sequence[tuple[str, str]] = ()
    prompt_for: Callable[[str], list[int]] | None = None
    question: str = ""  # the last user message (dp_answer's groups are asked it)


@dataclass(frozen=True, slots=True)
class Guarantee:
    """The privacy statement a defense's receipts make, and on what it rests.

    ``relation`` is the neighbouring relation the bound is stated for (None: no
    bound); ``covers`` says which tokens it covers ("every token" or "screened
    tokens"); ``formal`` is whether the figure is a differential-privacy
    guarantee at all; ``note`` explains why, in plain words, on every receipt.
    """

    formal: bool
    relation: str | None
    covers: str
    note: str
    # The relation is one document *of the store* (not of the retrieved context): the
    # receipt's epsilon is then the store-level one (:meth:`Defense.calibrated_epsilon`).
    store_level: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Knob:
    """A parameter the chat page offers, with its input step and a one-line explanation."""

    name: str
    step: float
    help: str


@dataclass(frozen=True, slots=True)
class Defense:
    """One decoding defense: config, how to build it, what its receipt may claim."""

    name: str
    label: str
    summary: str
    guarantee: Guarantee
    build: Callable[[Any, BuildContext], Mechanism | None]
    config_type: type[Any] | None = None
    two_pass: bool = False  # needs the public (no-context) logits at every token
    private_pass: bool = True  # False: the loop runs no full-context pass (two_pass only)
    knobs: tuple[Knob, ...] = ()
    # For a formal defense: the privacy events of the worst case it is calibrated for
    # (an answer of ``max_tokens`` tokens), known before generation.  This is the
    # guarantee; it is also what a document's lifetime budget is charged.
    calibrated: Callable[[Any, int], list[GaussianEvent]] | None = None
    # The same worst case for adding or removing one document *of the store* (not only of
    # the retrieved context), where that differs: what the lifetime filter is charged.
    # None: the calibrated events already cover it (a defense whose relation is any
    # change of the retrieved context).
    store_calibrated: Callable[[Any, int], list[GaussianEvent]] | None = None
    # The top-k documents an answer reads, where the defense sets it (dp_answer: by epsilon);
    # None: the request's or the settings' retrieval_top_k.
    context_size: Callable[[Any], int] | None = None
    # RDP added to each lifetime charge, at the filter's order, for a mechanism whose
    # guarantee has a delta of its own (dp_answer's threshold): (config, charge, budget,
    # order, delta) -> RDP; None: nothing added.
    surcharge: Callable[[Any, float, float, float, float], float] | None = None

    def store_events(self, config: Any, max_tokens: int) -> list[GaussianEvent]:
        """The events of one answer for adding or removing one document of the store."""
        if not self.guarantee.formal:
            return []
        if self.store_calibrated is not None:
            return self.store_calibrated(config, max_tokens)
        return self.calibrated_events(config, max_tokens)

    def calibrated_events(self, config: Any, max_tokens: int) -> list[GaussianEvent]:
        """The events an answer of up to ``max_tokens`` tokens may cost ([] if not formal)."""
        if not self.guarantee.formal or self.calibrated is None:
            return []
        return self.calibrated(config, max_tokens)

    def calibrated_epsilon(self, config: Any, max_tokens: int) -> float | None:
        """The epsilon at the config's delta for the relation the guarantee states -- the
        receipt's, and what a guest key is charged -- or None if not formal.

        For a guarantee stated for one document of the store (``store_level``: dp_answer,
        whose worst case moves two groups) that is :meth:`store_events`' epsilon (5 at
        epsilon 5), never the one-group figure (2.32), which would state less loss than
        the relation allows; otherwise :meth:`calibrated_events`' (dp_vote's relation is
        one retrieved document)."""
        events = (
            self.store_events(config, max_tokens)
            if self.guarantee.store_level
            else self.calibrated_events(config, max_tokens)
        )
        if not events:
            return None
        return RdpAccountant().compose_all(events).get_epsilon(config.delta)

    def config(self, options: dict[str, Any] | None = None) -> Any:
        """The validated configuration from a flat dict of knobs (unknown knobs are named)."""
        options = dict(options or {})
        if self.config_type is None:
            if options:
                raise InvalidParameterError(
                    f"the defense {self.name!r} takes no parameters; got {sorted(options)}"
                )
            return None
        known = set(self.config_type.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidParameterError(
                f"unknown parameter(s) {unknown} for defense {self.name!r}; known: {sorted(known)}"
            )
        return self.config_type(**options)

    def defaults(self) -> dict[str, Any]:
        if self.config_type is None:
            return {}
        default = self.config_type()
        return {f.name: getattr(default, f.name) for f in fields(default)}

    def describe(self) -> dict[str, Any]:
        """The entry as JSON, for the API and the chat page's menu."""
        defaults = self.defaults()
        return {
            "name": self.name,
            "label": self.label,
            "summary": self.summary,
            "two_pass": self.two_pass,
            "guarantee": self.guarantee.to_dict(),
            "defaults": defaults,
            "knobs": [
                {"name": k.name, "default": defaults[k.name], "step": k.step, "help": k.help}
                for k in self.knobs
            ],
        }
