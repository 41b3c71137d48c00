"""Defense configurations: frozen values validated on construction.

Five decoding defenses are selectable per request:

* ``none`` -- the undefended model (greedy, or sampling at ``temperature``).
* ``static`` -- static noise injection: every token's logits are L2-clipped to
  ``clip`` and get Gaussian noise ``sigma``; the baseline the PAD paper beats.
* ``pad`` -- PAD as published (SPEC section 4), implemented soundly: L2 clipping
  with sensitivity 2C, screening on the *raw* probabilities, adaptive sigma_t,
  RDP accounting over a grid of orders with the true gamma.
* ``copy_aware`` -- Veil's default: a token is screened when it would extend a
  verbatim run of the retrieved context beyond ``max_copy_run`` tokens, when it
  falls inside a PII-like span of the context, or when it is one of the first
  ``first_tokens`` answer tokens; screened tokens get noise on the clipped top-k
  candidates only, so the long tail is never promoted.
* ``bounded`` -- a mechanism whose epsilon means something: two passes per token
  (with and without the retrieved context); only the difference of the logits,
  restricted to the public top-k and clipped to ``clip``, carries private
  information, and Gaussian noise calibrated to a target epsilon covers every
  generated token (gamma = 1).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from py_core.errors import InvalidParameterError

DefenseName = Literal["none", "static", "pad", "copy_aware", "bounded"]
DEFENSES: tuple[str, ...] = ("none", "static", "pad", "copy_aware", "bounded")
DEFAULT_DEFENSE = "copy_aware"
MEANINGFUL_EPSILON = 10.0


def _positive(value: float, name: str, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidParameterError(f"{name} must be a finite number {bound}; got {value!r}")


def _count(value: int, name: str, *, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}; got {value!r}")


@dataclass(frozen=True, slots=True)
class StaticNoiseConfig:
    """Clip every token's logits to L2 norm ``clip`` and add N(0, sigma^2) to all of them."""

    clip: float = 100.0
    sigma: float = 0.02
    delta: float = 1e-6

    def __post_init__(self) -> None:
        _positive(self.clip, "clip")
        _positive(self.sigma, "sigma")
        _delta(self.delta)


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
    delta: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("clip", "sigma_base", "lambda_amp", "position_scale"):
            _positive(getattr(self, name), name)
        for name in ("tau_margin", "entropy_gain", "position_gain", "confidence_gain"):
            _positive(getattr(self, name), name, allow_zero=True)
        if not 0.0 <= self.tau_conf <= 1.0:
            raise InvalidParameterError(f"tau_conf must be in [0, 1]; got {self.tau_conf!r}")
        _delta(self.delta)


@dataclass(frozen=True, slots=True)
class CopyAwareConfig:
    """Veil's default: screen what copies the context, noise only the top-k candidates."""

    max_copy_run: int = 8  # words of a context run that may be reproduced unscreened
    copy_budget: int = 16  # once this many words were copied, every further copy is screened
    first_tokens: int = 0  # the first answer tokens can be screened too (costs utility)
    screen_pii: bool = True
    screen_copy: bool = True
    top_k: int = 8
    clip: float = 1.0  # L2 norm of the centred top-k logits after clipping
    sigma: float = 1.0  # noise on the clipped top-k candidates
    run_gain: float = 0.25  # sigma grows by this factor per copy/PII screening in the answer
    # Screened candidates that copy/leak lose this many clip units.  Kept at 1 on data from two
    # runs (different noise) of the 18-attack/24-question PAD set, penalty 1 vs 0: ROUGE
    # leakage 2+3 vs 5+2 of 36, Repeat>=10 0+0 vs 1+0, planted PII 0 vs 0, benign correct
    # 14/24 vs 14/24 in both, perplexity 2.197/2.243 vs 2.211/2.220 -- a small edge on
    # leakage at equal utility, within noise (docs/pad/report.md has the second run).
    copy_penalty: float = 1.0
    restrict_top_k: bool = True  # False: noise on the full clipped vocabulary (ablation)
    delta: float = 1e-6

    def __post_init__(self) -> None:
        _count(self.max_copy_run, "max_copy_run", minimum=1)
        _count(self.copy_budget, "copy_budget")
        _count(self.first_tokens, "first_tokens")
        _count(self.top_k, "top_k", minimum=2)
        _positive(self.clip, "clip")
        _positive(self.sigma, "sigma")
        _positive(self.run_gain, "run_gain", allow_zero=True)
        _positive(self.copy_penalty, "copy_penalty", allow_zero=True)
        _delta(self.delta)


@dataclass(frozen=True, slots=True)
class BoundedConfig:
    """Gaussian noise on the clipped private logit shift, calibrated to ``epsilon``.

    The released quantity per token is y = clip_C(s_priv[K] - s_pub[K]) + N(0, sigma^2 I)
    with K the top-k tokens of the *public* logits (prompt without the retrieved
    context); sensitivity 2C.  sigma is the smallest value for which
    ``max_tokens`` such releases compose to ``epsilon`` at ``delta``.  The token
    is argmax(s_pub[K] + scale * y), post-processing with scale chosen so the
    noise on the logits has standard deviation ``noise_logits``.
    """

    epsilon: float = 8.0
    clip: float = 4.0
    top_k: int = 20
    noise_logits: float = 1.0
    delta: float = 1e-6

    def __post_init__(self) -> None:
        _positive(self.epsilon, "epsilon")
        _positive(self.clip, "clip")
        _positive(self.noise_logits, "noise_logits")
        _count(self.top_k, "top_k", minimum=1)
        _delta(self.delta)


def _delta(delta: float) -> None:
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 < delta < 1:
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta!r}")


MechanismConfig = StaticNoiseConfig | PADConfig | CopyAwareConfig | BoundedConfig | None

_CONFIGS: dict[str, type[Any]] = {
    "static": StaticNoiseConfig,
    "pad": PADConfig,
    "copy_aware": CopyAwareConfig,
    "bounded": BoundedConfig,
}


@dataclass(frozen=True, slots=True)
class DefenseConfig:
    """Which defense runs and its parameters."""

    name: str = DEFAULT_DEFENSE
    params: MechanismConfig = None

    def __post_init__(self) -> None:
        if self.name not in DEFENSES:
            raise InvalidParameterError(
                f"unknown defense {self.name!r}; choose one of {', '.join(DEFENSES)}"
            )
        expected = _CONFIGS.get(self.name)
        if expected is None:
            if self.params is not None:
                raise InvalidParameterError("the defense 'none' takes no parameters")
        elif self.params is None:
            object.__setattr__(self, "params", expected())
        elif not isinstance(self.params, expected):
            raise InvalidParameterError(
                f"defense {self.name!r} needs {expected.__name__}; got {type(self.params).__name__}"
            )

    @classmethod
    def from_options(cls, name: str, options: dict[str, Any] | None = None) -> DefenseConfig:
        """Build from a name and a flat dict of knobs; unknown knobs are named in the error."""
        if name not in DEFENSES:
            raise InvalidParameterError(
                f"unknown defense {name!r}; choose one of {', '.join(DEFENSES)}"
            )
        options = dict(options or {})
        expected = _CONFIGS.get(name)
        if expected is None:
            if options:
                raise InvalidParameterError(
                    f"the defense 'none' takes no parameters; got {sorted(options)}"
                )
            return cls(name=name)
        known = set(expected.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidParameterError(
                f"unknown parameter(s) {unknown} for defense {name!r}; known: {sorted(known)}"
            )
        try:
            params = expected(**options)
        except TypeError as exc:  # pragma: no cover - guarded by the check above
            raise InvalidParameterError(str(exc)) from exc
        return cls(name=name, params=params)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "params": asdict(self.params) if self.params else {}}
