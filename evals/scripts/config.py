"""The per-script k-RR evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/scripts)."""

from __future__ import annotations

from dataclasses import dataclass

EPSILONS = (2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
LANGUAGES = ("ko", "fr")
MODES = ("scripts", "ascii")


@dataclass(frozen=True, slots=True)
class Config:
    n_documents: int  # per language
    seed: int
    epsilons: tuple[float, ...]
    languages: tuple[str, ...]
    korean_stems: int  # stems combined with particles/endings in the Korean restorer
    french_words: int  # French restorer vocabulary
    calibration_fraction: float  # documents used to fit the forecast; the rest check it
    smoke: bool


FULL = Config(
    n_documents=120,
    seed=0,
    epsilons=EPSILONS,
    languages=LANGUAGES,
    korean_stems=3000,
    french_words=60_000,
    calibration_fraction=2 / 3,
    smoke=False,
)

SMOKE = Config(
    n_documents=6,
    seed=0,
    epsilons=(4.0, 6.0),
    languages=LANGUAGES,
    korean_stems=300,
    french_words=5_000,
    calibration_fraction=2 / 3,
    smoke=True,
)
