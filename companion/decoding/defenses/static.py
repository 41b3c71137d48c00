"""``static``: static noise injection, the baseline the PAD paper beats.

Every token's logits are L2-clipped to ``clip`` and get Gaussian noise
``sigma``; the neighbouring-context sensitivity of the clipped logits is 2C.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from companion.decoding.base import (
    REPLACE_CONTEXT,
    BuildContext,
    Defense,
    Guarantee,
    Knob,
    TokenDefense,
    clip_l2,
    gaussian,
)
from companion.decoding.noise import NoiseSource
from py_core.accounting import DEFAULT_DELTA, GaussianEvent
from py_core.errors import InvalidParameterError
from py_core.validate import check_delta, check_positive


@dataclass(frozen=True, slots=True)
class StaticNoiseConfig:
    """Clip every token's logits to L2 norm ``clip`` and add N(0, sigma^2) to all of them."""

    clip: float = 100.0
    sigma: float = 0.02
    delta: float = DEFAULT_DELTA

    def __post_init__(self) -> None:
        check_positive(self.clip, "clip")
        check_positive(self.sigma, "sigma")
        if self.sigma**2 == 0.0:  # its square underflows: no accountant can compute the RDP
            raise InvalidParameterError(f"sigma must be at least 1e-150; got {self.sigma!r}")
        check_delta(self.delta)


class StaticNoiseProcessor(TokenDefense):
    """Static noise injection: clip every token's logits and add N(0, sigma^2) to all."""

    def __init__(
        self, config: StaticNoiseConfig, *, prompt_length: int, generator: NoiseSource
    ) -> None:
        super().__init__(prompt_length, generator, 2.0 * config.clip)
        self.config = config

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.FloatTensor:
        step = self._step(input_ids, scores)
        cfg = self.config
        self.ledger.record(step, cfg.sigma, ("static",))
        out = clip_l2(scores, cfg.clip) + cfg.sigma * gaussian(scores.shape, scores, self.generator)
        return out  # type: ignore[return-value]


def _calibrated(config: StaticNoiseConfig, max_tokens: int) -> list[GaussianEvent]:
    return [GaussianEvent(config.sigma, 2.0 * config.clip)] * max_tokens


def _build(config: StaticNoiseConfig, ctx: BuildContext) -> StaticNoiseProcessor:
    return StaticNoiseProcessor(config, prompt_length=ctx.prompt_length, generator=ctx.generator)


DEFENSE = Defense(
    name="static",
    label="Static noise (baseline)",
    summary="Clipped logits plus Gaussian noise on every token.",
    guarantee=Guarantee(
        formal=True,
        relation=REPLACE_CONTEXT,
        covers="every token",
        note="Gaussian noise of a fixed scale on the L2-clipped logits of every token "
        "(sensitivity 2C), so the noise does not depend on the documents; accounted by "
        "Rényi DP over the longest answer allowed. At the default scale the figure is "
        "far too large to be protection.",
    ),
    build=_build,
    calibrated=_calibrated,
    config_type=StaticNoiseConfig,
    knobs=(
        Knob("clip", 10.0, "L2 norm the logits are clipped to"),
        Knob("sigma", 0.01, "standard deviation of the noise on every logit"),
    ),
)
