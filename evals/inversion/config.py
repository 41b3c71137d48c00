"""The inversion evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/inversion)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Config:
    smoke: bool
    tiny_model: bool = False  # a tiny random model made on the fly (smoke) instead of ``model``
    model: str | None = None  # model spec for the shared loader (None: SmolLM2-135M)
    # One-time setup sizes (companion.audit.ranker.SetupConfig fields); None: its defaults.
    setup: dict[str, int] | None = None
    windows: int = 100  # 10-token news windows
    window_length: int = 10
    long_windows: int = 5
    long_length: int = 32
    code_windows: int = 3  # 10-token Python code windows
    random_windows: int = 2  # 10 uniformly random tokens
    published_tokens: int = 3  # positions run with the published method
    published_steps: int = 1000  # K
    published_candidates: int = 2000  # C
    sigmas: tuple[float, ...] = (0.0, 1e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)
    sigma_windows: int = 5
    unscreened_windows: int = 30  # news windows also run without bfloat16 screening
    starved_candidates: int = 1  # C of the starved search
    seed: int = 2024  # window sampling and noise
    note: str | None = field(default=None, compare=False)  # printed at the top of the report


FULL = Config(smoke=False)

SMOKE = Config(
    smoke=True,
    tiny_model=True,
    setup={"sequences": 96, "length": 24, "generation_batch": 48, "epochs": 3, "hidden": 128},
    windows=6,
    long_windows=2,
    long_length=16,
    code_windows=2,
    random_windows=2,
    published_tokens=3,
    published_steps=60,
    published_candidates=64,
    sigmas=(0.0, 1e-2, 1.0),
    sigma_windows=2,
    unscreened_windows=2,
)
