"""``pad``: PAD as published (docs/methods/decoding.md), without its implementation mistakes.

L2 clipping with sensitivity 2C, screening on the *raw* probabilities
(confidence and margin), adaptive sigma_t, RDP of the realised schedule with the
true gamma.  Not a DP guarantee: the screening and sigma_t read the private
logits (the registry entry's ``Guarantee`` says so on every receipt).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from companion.decoding.base import (
    BuildContext,
    Defense,
    Guarantee,
    Knob,
    TokenDefense,
    clip_l2,
    gaussian,
)
from companion.decoding.noise import NoiseSource
from py_core.accounting import DEFAULT_DELTA
from py_core.errors import InvalidParameterError
from py_core.validate import check_delta, check_positive


@dataclass(frozen=True, slots=True)
class PADConfig:
    """PAD as published, with sound sensitivity 2*clip and screening on raw probabilities.

    sigma_t = sigma_base * calibrate(p_t, t) * r_t * lambda_amp, where
    calibrate = (1 + entropy_gain * H(p_t)/log V) * (1 + position_gain * exp(-t/position_scale))
                * (1 + confidence_gain * (1 - max p_t))
    and r_t = 1 + (tau_margin - margin_t)_+ / tau_margin.
    """

    clip: float = 100.0
    sigma_base: float = 0.01
    lambda_amp: float = 1.0
    tau_conf: float = 0.6
    tau_margin: float = 1.0  # raw logit units
    entropy_gain: float = 1.0
    position_gain: float = 1.0
    position_scale: float = 8.0
    confidence_gain: float = 1.0
    adaptive: bool = True
    delta: float = DEFAULT_DELTA

    def __post_init__(self) -> None:
        for name in ("clip", "sigma_base", "lambda_amp", "position_scale"):
            check_positive(getattr(self, name), name)
        for name in ("tau_margin", "entropy_gain", "position_gain", "confidence_gain"):
            check_positive(getattr(self, name), name, allow_zero=True)
        if not 0.0 <= self.tau_conf <= 1.0:
            raise InvalidParameterError(f"tau_conf must be in [0, 1]; got {self.tau_conf!r}")
        check_delta(self.delta)


class PADProcessor(TokenDefense):
    """PAD as published (screen on confidence and margin, adaptive sigma), made sound.

    Screening reads the raw logits/probabilities; noise is added to the clipped
    logits, whose neighbouring-context sensitivity is 2C.  Tokens that pass the
    screen are returned unchanged and are not covered by the guarantee (gamma).
    """

    def __init__(self, config: PADConfig, *, prompt_length: int, generator: NoiseSource) -> None:
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
        out = clip_l2(scores, self.config.clip) + sigma * gaussian(
            scores.shape, scores, self.generator
        )
        return out  # type: ignore[return-value]


def _build(config: PADConfig, ctx: BuildContext) -> PADProcessor:
    return PADProcessor(config, prompt_length=ctx.prompt_length, generator=ctx.generator)


DEFENSE = Defense(
    name="pad",
    label="PAD as published",
    summary="Noise on tokens screened as risky (low confidence or small margin), adaptive sigma.",
    guarantee=Guarantee(
        formal=False,
        relation=None,
        covers="screened tokens",
        note="PAD as published is not differential privacy: which tokens are screened, and "
        "each token's noise scale sigma_t, are computed from the private logits, so two "
        "contexts (one screened, one not) can differ without bound. The epsilon of the "
        "realised noise schedule is shown as a nominal figure for comparison only.",
    ),
    build=_build,
    config_type=PADConfig,
    knobs=(
        Knob("lambda_amp", 0.5, "multiplies every noise scale"),
        Knob("sigma_base", 0.01, "base noise scale before calibration"),
        Knob("tau_conf", 0.05, "tokens less confident than this are screened as risky"),
        Knob("clip", 10.0, "L2 norm the logits are clipped to"),
    ),
)
