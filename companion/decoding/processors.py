"""The decoding defenses as transformers ``LogitsProcessor`` objects.

Contract (the same as transformers' own processors): ``__call__(input_ids,
scores) -> scores``; ``scores`` is never modified in place; parameters are
validated when the configuration is built.  Each processor writes one
:class:`StepRecord` per generated token into its :class:`NoiseLedger`, from
which the receipt's accounting is computed.  Noise comes from the
``torch.Generator`` passed in: the caller seeds it from ``secrets`` (a fixed
seed is for tests and experiments only).

The processors work on a batch of one sequence (a chat answer); they can be
passed to ``model.generate(logits_processor=[...])`` or used by
:func:`companion.decoding.generate.generate_tokens`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessor

from companion.decoding.config import (
    BoundedConfig,
    CopyAwareConfig,
    PADConfig,
    StaticNoiseConfig,
)
from companion.decoding.screening import RunTracker
from py_core.accounting import gaussian_rdp_epsilon
from py_core.errors import InvalidParameterError


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

    def reason_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.records:
            for reason in r.reasons:
                counts[reason] = counts.get(reason, 0) + 1
        return counts


def clip_l2(x: torch.Tensor, bound: float) -> torch.Tensor:
    """``x * min(1, bound / ||x||_2)`` along the last dimension (a new tensor)."""
    norm = torch.linalg.vector_norm(x.float(), dim=-1, keepdim=True)
    factor = torch.clamp(bound / norm.clamp_min(1e-12), max=1.0)
    return x * factor.to(x.dtype)


def _gaussian(shape: Sequence[int], like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    noise = torch.randn(tuple(shape), generator=generator, device=generator.device)
    return noise.to(device=like.device, dtype=like.dtype)


class _Defense(LogitsProcessor):
    """Shared bookkeeping: the step index and the ledger."""

    def __init__(self, prompt_length: int, generator: torch.Generator, sensitivity: float) -> None:
        if prompt_length < 0:
            raise InvalidParameterError(f"prompt_length must be >= 0; got {prompt_length!r}")
        if not isinstance(generator, torch.Generator):
            raise InvalidParameterError(
                f"generator must be a torch.Generator; got {type(generator).__name__}"
            )
        self.prompt_length = prompt_length
        self.generator = generator
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


class StaticNoiseProcessor(_Defense):
    """Static noise injection: clip every token's logits and add N(0, sigma^2) to all."""

    def __init__(
        self, config: StaticNoiseConfig, *, prompt_length: int, generator: torch.Generator
    ) -> None:
        super().__init__(prompt_length, generator, 2.0 * config.clip)
        self.config = config

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.FloatTensor:
        step = self._step(input_ids, scores)
        cfg = self.config
        self.ledger.record(step, cfg.sigma, ("static",))
        out = clip_l2(scores, cfg.clip) + cfg.sigma * _gaussian(
            scores.shape, scores, self.generator
        )
        return out  # type: ignore[return-value]


class PADProcessor(_Defense):
    """PAD as published (screen on confidence and margin, adaptive sigma), made sound.

    Screening reads the raw logits/probabilities; noise is added to the clipped
    logits, whose neighbouring-context sensitivity is 2C.  Tokens that pass the
    screen are returned unchanged and are not covered by the guarantee (gamma).
    """

    def __init__(
        self, config: PADConfig, *, prompt_length: int, generator: torch.Generator
    ) -> None:
        super().__init__(prompt_length, generator, 2.0 * config.clip)
        self.config = config

    def sigma_for(self, scores: torch.Tensor, step: int) -> tuple[float | None, tuple[str, ...]]:
        """The noise scale for these raw scores at ``step``, or None when screened low-risk."""
        cfg = self.config
        row = scores[0].float()
        probs = torch.softmax(row, dim=-1)
        top = torch.topk(row, 2).values
        p_max = float(probs.max())
        margin = float(top[0] - top[1])
        reasons = []
        if p_max < cfg.tau_conf:
            reasons.append("low_confidence")
        if margin < cfg.tau_margin:
            reasons.append("small_margin")
        if not reasons:
            return None, ()
        if not cfg.adaptive:
            return cfg.sigma_base * cfg.lambda_amp, tuple(reasons)
        entropy = float(-(probs * torch.log(probs.clamp_min(1e-30))).sum())
        h_norm = entropy / math.log(row.shape[-1])
        calibrate = (
            (1.0 + cfg.entropy_gain * h_norm)
            * (1.0 + cfg.position_gain * math.exp(-step / cfg.position_scale))
            * (1.0 + cfg.confidence_gain * (1.0 - p_max))
        )
        r = 1.0 + (max(0.0, cfg.tau_margin - margin) / cfg.tau_margin if cfg.tau_margin else 0.0)
        return cfg.sigma_base * calibrate * r * cfg.lambda_amp, tuple(reasons)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.FloatTensor:
        step = self._step(input_ids, scores)
        sigma, reasons = self.sigma_for(scores, step)
        self.ledger.record(step, sigma, reasons)
        if sigma is None:
            return scores  # type: ignore[return-value]
        out = clip_l2(scores, self.config.clip) + sigma * _gaussian(
            scores.shape, scores, self.generator
        )
        return out  # type: ignore[return-value]


class CopyAwareProcessor(_Defense):
    """Veil's default: noise where the answer would copy the context or its PII.

    A token is screened when the model's top candidate would extend a verbatim
    run of the context beyond ``max_copy_run`` words -- or by any word once the
    answer has copied ``copy_budget`` words in all -- unless the same run also
    occurs in the public prompt (the person's own words); when it would start or continue
    a PII-like span of the context, or is one of the first ``first_tokens``
    answer tokens.  A screened token's top-k logits are centred, clipped to L2
    norm ``clip``; candidates that would themselves copy or leak PII are lowered
    by ``copy_penalty * clip``; then N(0, sigma_t^2) noise is added and everything
    outside the top-k is set to -inf, so the long tail is never promoted.  sigma_t grows with the
    number of copy/PII screenings so far in the answer (``run_gain``).
    """

    def __init__(
        self,
        config: CopyAwareConfig,
        *,
        prompt_length: int,
        generator: torch.Generator,
        context_ids: Sequence[int] = (),
        pii_ids: Sequence[int] = (),
        pii_start_tokens: set[int] | frozenset[int] = frozenset(),
        public_ids: Sequence[int] = (),
        word_start_tokens: set[int] | frozenset[int] = frozenset(),
    ) -> None:
        super().__init__(prompt_length, generator, 2.0 * config.clip)
        self.config = config
        self.copy = RunTracker(list(context_ids))
        self.public = RunTracker(list(public_ids))
        self.pii = RunTracker(list(pii_ids))
        self.pii_start_tokens = set(pii_start_tokens)
        self._seen = 0
        self._risky_so_far = 0
        self._copied = 0  # words of the answer that continued a context run
        self._generated: list[int] = []
        self.word_starts = set(word_start_tokens)

    def _sync(self, input_ids: torch.Tensor, step: int) -> None:
        if step < self._seen:
            raise InvalidParameterError(
                "this processor already saw a longer answer; build a new one per generation"
            )
        if step > self._seen:
            new = input_ids[0, self.prompt_length + self._seen :].tolist()
            for tok in new:
                self.copy.advance(int(tok))
                self._generated.append(int(tok))
                if self.copy.length >= 2 and int(tok) in self.word_starts:
                    self._copied += 1
                self.public.advance(int(tok))
                self.pii.advance(int(tok))
            self._seen = step

    def run_words(self, run: int, candidate: int) -> int:
        """Words in the verbatim run that ``candidate`` would make ``run`` tokens long."""
        if run <= 0:
            return 0
        if not self.word_starts:  # no word boundaries known: count tokens
            return run
        tokens = [*self._generated[len(self._generated) - (run - 1) :], candidate][-run:]
        return max(1, sum(1 for t in tokens if t in self.word_starts))

    def screen(self, candidate: int, step: int) -> tuple[str, ...]:
        cfg = self.config
        reasons = []
        if step < cfg.first_tokens:
            reasons.append("first_tokens")
        reasons.extend(self.risks(candidate))
        return tuple(reasons)

    def risks(self, candidate: int) -> list[str]:
        """Why generating ``candidate`` next would leak: 'copy' and/or 'pii'."""
        cfg = self.config
        reasons = []
        if cfg.screen_copy:
            run = self.copy.extension_length(candidate)
            words = self.run_words(run, candidate)
            limit = cfg.max_copy_run if self._copied < cfg.copy_budget else 1
            # Repeating what the person wrote (the public prompt) is not a leak.
            if words > limit and self.public.extension_length(candidate) < run:
                reasons.append("copy")
        if cfg.screen_pii:
            ext = self.pii.extension_length(candidate)
            # Short digit/punctuation matches (a dose "100" inside a phone number) are not
            # PII; a distinctive token (two or more letters/digits) or a long match is.
            distinctive = candidate in self.pii_start_tokens
            if (ext >= 1 and distinctive) or ext >= 4:
                reasons.append("pii")
        return reasons

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.FloatTensor:
        step = self._step(input_ids, scores)
        self._sync(input_ids, step)
        cfg = self.config
        candidate = int(torch.argmax(scores[0]))
        reasons = self.screen(candidate, step)
        if not reasons:
            self.ledger.record(step, None)
            return scores  # type: ignore[return-value]
        risky = "copy" in reasons or "pii" in reasons
        sigma = cfg.sigma * (1.0 + cfg.run_gain * self._risky_so_far)
        if risky:
            self._risky_so_far += 1
        self.ledger.record(step, sigma, reasons)
        if cfg.restrict_top_k:
            k = min(cfg.top_k, scores.shape[-1])
            values, index = torch.topk(scores, k, dim=-1)
            centred = clip_l2(values - values.mean(dim=-1, keepdim=True), cfg.clip)
            if cfg.copy_penalty > 0:
                risky_mask = [bool(self.risks(int(c))) for c in index[0].tolist()]
                penalty = torch.tensor(risky_mask, dtype=values.dtype, device=values.device)
                centred = centred - cfg.copy_penalty * cfg.clip * penalty
            noisy = centred + sigma * _gaussian(values.shape, values, self.generator)
            out = torch.full_like(scores, float("-inf"))
            return out.scatter(-1, index, noisy)  # type: ignore[return-value]
        centred = scores - scores.mean(dim=-1, keepdim=True)
        noise = sigma * _gaussian(scores.shape, scores, self.generator)
        return clip_l2(centred, cfg.clip) + noise  # type: ignore[return-value]


def calibrate_sigma(epsilon: float, sensitivity: float, delta: float, steps: int) -> float:
    """The smallest sigma for which ``steps`` Gaussian releases compose to <= epsilon."""
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


class BoundedFusion:
    """Two-pass mechanism: noise on the clipped private shift over the public top-k.

    Per token: K = top-k of the public scores (no retrieved context), d =
    clip_C(s_priv[K] - s_pub[K]), released as y = d + N(0, sigma^2 I).  For two
    retrieval contexts the clipped shifts differ by at most 2C in L2, so each
    token is a Gaussian mechanism with sensitivity 2C; sigma is calibrated so
    that ``max_tokens`` tokens compose to the configured epsilon.  The output
    scores are s_pub[K] + (noise_logits / sigma) * y on K and -inf elsewhere:
    post-processing of y and of public data.
    """

    def __init__(
        self, config: BoundedConfig, *, max_tokens: int, generator: torch.Generator
    ) -> None:
        if not isinstance(generator, torch.Generator):
            raise InvalidParameterError(
                f"generator must be a torch.Generator; got {type(generator).__name__}"
            )
        self.config = config
        self.generator = generator
        self.sigma = calibrate_sigma(config.epsilon, 2.0 * config.clip, config.delta, max_tokens)
        self.ledger = NoiseLedger(sensitivity=2.0 * config.clip)
        self._step = 0

    def __call__(self, private_scores: torch.Tensor, public_scores: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        k = min(cfg.top_k, public_scores.shape[-1])
        pub_values, index = torch.topk(public_scores, k, dim=-1)
        shift = private_scores.gather(-1, index) - pub_values
        released = clip_l2(shift, cfg.clip) + self.sigma * _gaussian(
            shift.shape, shift, self.generator
        )
        self.ledger.record(self._step, self.sigma, ("all_tokens",))
        self._step += 1
        scale = cfg.noise_logits / self.sigma
        out = torch.full_like(public_scores, float("-inf"))
        return out.scatter(-1, index, pub_values + scale * released)


def secure_generator(device: str = "cpu", seed: int | None = None) -> torch.Generator:
    """A torch.Generator seeded from ``secrets`` (or from ``seed``, for tests only)."""
    import secrets

    gen = torch.Generator(device=device)
    gen.manual_seed(secrets.randbits(63) if seed is None else int(seed))
    return gen


def receipt_epsilon(ledger: NoiseLedger, delta: float) -> tuple[float, float]:
    """(epsilon, best order) of the realised noise schedule."""
    return gaussian_rdp_epsilon(ledger.sigmas, ledger.sensitivity, delta)
