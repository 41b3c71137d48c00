"""The accents evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/accents)."""

from __future__ import annotations

from dataclasses import dataclass

LANGUAGES = ("fr", "de", "es", "pt", "it")
#: ε per Latin letter compared; "scripts" spends it as two slots of ε/2 (base + mark).
LETTER_EPSILONS = (4.0, 6.0, 8.0)
MODES = ("scripts", "ascii", "fold")


@dataclass(frozen=True, slots=True)
class Config:
    languages: tuple[str, ...]
    letter_epsilons: tuple[float, ...]
    common_words: int  # per language: words of real sentences
    pii_per_document: int  # Faker values planted in each document
    document_words: int  # about this many sentence words per document
    restorer_words: int  # the restorer's vocabulary (wordfreq's most frequent)
    seed: int
    smoke: bool


FULL = Config(
    languages=LANGUAGES,
    letter_epsilons=LETTER_EPSILONS,
    common_words=2500,
    pii_per_document=3,
    document_words=45,
    restorer_words=60_000,
    seed=0,
    smoke=False,
)

SMOKE = Config(
    languages=("fr", "de"),
    letter_epsilons=(6.0,),
    common_words=150,
    pii_per_document=3,
    document_words=45,
    restorer_words=5_000,
    seed=0,
    smoke=True,
)
