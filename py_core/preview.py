"""Preview of what k-RR hides: mark each word "likely restored" or "likely hidden".

A remote model that receives a k-RR-perturbed prompt restores common words from
context and spelling, while rare words (names, IDs, numbers) come back only when
no character of them was changed -- probability ``Pr[T0] = p^L``.  This module
predicts, per word, the probability that a restorer recovers it exactly, from
the word's length (as k-RR sees it, punctuation included), its Zipf frequency
(:mod:`py_core.wordfreq`) and epsilon.

The numbers come from ``veil eval krr`` (docs/krr/report.md): restoration rates of
the offline noisy-channel restorer (symspellpy's dictionary + bigram context)
binned by Zipf frequency and length at each evaluated epsilon, smoothed toward
``Pr[T0]``, saved in ``preview_calibration.json`` beside this module.  Between
evaluated epsilons the rate is interpolated linearly; outside them it is taken at
the nearest one.  A prediction is never below ``Pr[T0]`` of the word at the
requested epsilon (a restorer that returns what it sees achieves that).

Limits, stated in the UI: the calibration is for the offline restorer; a large
LLM restores more of the *common* words (so "likely hidden" on a common word
is optimistic), while for rare words the bound ``p^L`` is what any restorer
gets when the word is a random string to it.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from py_core import alphabets, krr, language
from py_core.errors import InvalidParameterError, StateError
from py_core.krr import validate_epsilon
from py_core.wordfreq import LANGUAGES as TABLE_LANGUAGES
from py_core.wordfreq import zipf_frequency

__all__ = [
    "CALIBRATION_PATH",
    "LIKELY_HIDDEN",
    "LIKELY_RESTORED",
    "THRESHOLD",
    "PreviewModel",
    "WordPreview",
    "calibration_path",
    "default_model",
    "language_model",
    "preview",
]

CALIBRATION_PATH = Path(__file__).with_name("preview_calibration.json")
THRESHOLD = 0.5  # "likely restored" at or above this predicted probability
LIKELY_RESTORED = "likely restored"
LIKELY_HIDDEN = "likely hidden"
_WORD = krr.WORD


@dataclass(frozen=True, slots=True)
class WordPreview:
    """One word of the prompt with its predicted restoration probability."""

    start: int
    end: int
    text: str
    probability: float  # predicted P(the restorer recovers this word exactly)
    survival_probability: float  # Pr[T0] = p^L: no character changed
    zipf: float | None  # None: not in the frequency table
    label: str  # LIKELY_RESTORED or LIKELY_HIDDEN
    language: str = "en"  # whose frequency table and calibration forecast it
    calibrated: bool = True  # False: no calibration for its language, only Pr[T0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "text": self.text,
            "probability": self.probability,
            "survival_probability": self.survival_probability,
            "zipf": self.zipf,
            "label": self.label,
            "language": self.language,
            "calibrated": self.calibrated,
        }


@dataclass(frozen=True, slots=True)
class PreviewModel:
    """Restoration rates per requested epsilon, Zipf bin and word length."""

    epsilons: tuple[float, ...]
    # Zipf bins: 0 = not in the table, 1 = below edges[0], i + 1 = [edges[i-1], edges[i]),
    # the last = at or above edges[-1].
    zipf_edges: tuple[float, ...]
    max_length: int  # lengths above share the last bin
    rates: tuple[tuple[tuple[float, ...], ...], ...]  # [eps][zipf_bin][length-1]
    restorer: str
    language: str = "en"  # the frequency table its Zipf bins read (py_core.wordfreq)

    def __post_init__(self) -> None:
        if len(self.epsilons) < 1 or list(self.epsilons) != sorted(set(self.epsilons)):
            raise StateError(
                f"calibration epsilons must be increasing and distinct; got {self.epsilons}"
            )
        if len(self.rates) != len(self.epsilons):
            raise StateError("calibration has one rate table per epsilon; the counts differ")
        for table in self.rates:
            if len(table) != len(self.zipf_edges) + 2 or any(
                len(row) != self.max_length for row in table
            ):
                raise StateError("calibration rate table has the wrong shape")
            if any(not 0.0 <= r <= 1.0 for row in table for r in row):
                raise StateError("calibration rates must lie in [0, 1]")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PreviewModel:
        try:
            return cls(
                epsilons=tuple(float(e) for e in data["epsilons"]),
                zipf_edges=tuple(float(z) for z in data["zipf_edges"]),
                max_length=int(data["max_length"]),
                rates=tuple(
                    tuple(tuple(float(r) for r in row) for row in table) for table in data["rates"]
                ),
                restorer=str(data["restorer"]),
                language=str(data.get("language", "en")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"the preview calibration is malformed: {exc!r}") from exc

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilons": list(self.epsilons),
            "zipf_edges": list(self.zipf_edges),
            "max_length": self.max_length,
            "rates": [[list(row) for row in table] for table in self.rates],
            "restorer": self.restorer,
            "language": self.language,
        }

    def zipf_bin(self, zipf: float | None) -> int:
        if zipf is None:
            return 0
        return 1 + bisect.bisect_right(self.zipf_edges, zipf)

    def rate(self, epsilon: float, zipf: float | None, length: int) -> float:
        """Interpolated restoration rate for a word of ``length`` characters."""
        z = self.zipf_bin(zipf)
        col = min(max(length, 1), self.max_length) - 1
        eps = self.epsilons
        if epsilon <= eps[0]:
            return self.rates[0][z][col]
        if epsilon >= eps[-1]:
            return self.rates[-1][z][col]
        hi = bisect.bisect_right(eps, epsilon)
        lo = hi - 1
        weight = (epsilon - eps[lo]) / (eps[hi] - eps[lo])
        return (1 - weight) * self.rates[lo][z][col] + weight * self.rates[hi][z][col]

    def predict(
        self, text: str, epsilon: float, *, alphabets_mode: str = alphabets.SCRIPTS
    ) -> list[WordPreview]:
        """Every word forecast with this model (its language's table)."""
        eps = validate_epsilon(epsilon)
        return [
            _word(match, survival, eps, self, self.language)
            for match, survival in _survivals(text, eps, alphabets_mode)
        ]


def _survivals(text: str, epsilon: float, mode: str) -> list[tuple[re.Match[str], float]]:
    """Each word with its Pr[T0]: the product of its characters' keep probabilities."""
    from py_core.sanitize import word_survival  # sanitize imports nothing of this module

    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    survival = {w.start: w.survival_probability for w in word_survival(text, epsilon, mode)}
    return [(m, survival.get(m.start(), 1.0)) for m in _WORD.finditer(text)]


def _word(
    match: re.Match[str],
    survival: float,
    epsilon: float,
    model: PreviewModel | None,
    lang: str,
) -> WordPreview:
    word = match.group()
    zipf = zipf_frequency(word, lang) if lang in TABLE_LANGUAGES else None
    rate = model.rate(epsilon, zipf, len(word)) if model is not None else 0.0
    probability = max(survival, rate)
    return WordPreview(
        start=match.start(),
        end=match.end(),
        text=word,
        probability=probability,
        survival_probability=survival,
        zipf=zipf,
        label=LIKELY_RESTORED if probability >= THRESHOLD else LIKELY_HIDDEN,
        language=lang,
        calibrated=model is not None,
    )


def calibration_path(lang: str = "en") -> Path:
    """Where the calibration of ``lang`` lives (English: :data:`CALIBRATION_PATH`)."""
    if lang == "en":
        return CALIBRATION_PATH
    return CALIBRATION_PATH.with_name(f"preview_calibration_{lang}.json")


@lru_cache(maxsize=1)
def default_model() -> PreviewModel:
    """The English calibration shipped beside this module."""
    try:
        data = json.loads(CALIBRATION_PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StateError(
            f"the preview calibration {CALIBRATION_PATH} is missing or unreadable ({exc}); "
            "regenerate it with: python -m companion eval krr --out docs/krr --write-calibration"
        ) from exc
    return PreviewModel.from_dict(data)


@lru_cache(maxsize=8)
def language_model(lang: str) -> PreviewModel | None:
    """The calibration of ``lang`` (``veil eval scripts --write-calibration``), None if none ships."""
    if lang == "en":
        return default_model()
    path = calibration_path(lang)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StateError(f"the preview calibration {path.name} is unreadable ({exc})") from exc
    return PreviewModel.from_dict(data)


_SCRIPT_LANGUAGE = {"hangul": "ko", "hangul-jamo": "ko", "cyrillic": "ru", "greek": "el"}


def preview(
    text: str,
    epsilon: float,
    model: PreviewModel | None = None,
    *,
    alphabets: str = alphabets.SCRIPTS,
) -> list[WordPreview]:
    """Per-word restoration forecast for ``text`` perturbed with ``epsilon`` per character.

    ``model`` given: every word is forecast with it.  Otherwise each word by its
    language: Hangul words with the Korean calibration, Cyrillic and Greek ones
    with none yet (Pr[T0] only, ``calibrated=False``), Latin words with the
    prompt's Latin language (:func:`py_core.language.detect`: English, French;
    German and Spanish have no table yet).  ``alphabets`` is the site's setting
    (survival differs: with ``"ascii"`` a non-ASCII character never survives).
    """
    if model is not None:
        return model.predict(text, epsilon, alphabets_mode=alphabets)
    eps = validate_epsilon(epsilon)
    pairs = _survivals(text, eps, alphabets)
    if not pairs:
        return []
    latin = language.detect(text)
    latin = latin if latin in ("en", "fr", "de", "es") else "en"
    cls = _classes_of(text)
    out = []
    for match, survival in pairs:
        codes = set(cls[match.start() : match.end()])
        lang = latin
        for code in codes:
            found = _SCRIPT_LANGUAGE.get(_CLASS_NAMES[code])
            if found:
                lang = found
                break
        out.append(_word(match, survival, eps, language_model(lang), lang))
    return out


_CLASS_NAMES = alphabets.CLASS_NAMES


def _classes_of(text: str) -> bytes:
    return alphabets.classify(text)
