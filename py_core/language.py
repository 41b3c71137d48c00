"""The prompt's dominant language, for the restoration header and the forecast.

:func:`detect` looks at the script of each character (:mod:`py_core.alphabets`)
and, for Latin text, at its accented letters and most frequent short words.  It
is a heuristic over a handful of languages -- the ones Veil has a header for
(:data:`HEADERS`) -- and answers ``"en"`` when nothing points elsewhere.

Privacy: the header is public text sent before the perturbed prompt, so an
automatically chosen header language tells the site which language was
detected -- a function of the prompt as typed, beyond the per-character
guarantee (like the script of each character, which ``"scripts"`` mode shows
anyway).  A site's header language can be fixed in its settings to avoid that.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from py_core import alphabets
from py_core.errors import InvalidParameterError, StateError

__all__ = ["AUTO", "HEADERS", "HEADERS_PATH", "LANGUAGES", "detect", "header_for"]

AUTO = "auto"

#: The restoration header in each language: restore the typos silently, then answer.
HEADERS_PATH = Path(__file__).with_name("headers.json")


def _headers(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != "veil.headers" or data.get("version") != 1:
            raise StateError(f"{path.name} is not version 1 of veil.headers")
        headers = {str(k): str(v) for k, v in data["headers"].items()}
    except StateError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StateError(f"py_core's {path.name} is missing or malformed: {exc}") from exc
    if "en" not in headers or not all(h.endswith("\n\n") for h in headers.values()):
        raise StateError(f"{path.name}: needs an English header; each ends with a blank line")
    return headers


#: The restoration header in each language (``headers.json``): restore the typos, then answer.
HEADERS: dict[str, str] = _headers(HEADERS_PATH)
#: The languages a site's header may be fixed to (besides "auto").
LANGUAGES: tuple[str, ...] = tuple(HEADERS)

_SCRIPT_LANGUAGE = {"hangul": "ko", "hangul-jamo": "ko", "cyrillic": "ru", "greek": "el"}
# Letters and short words that mark each Latin language (lower case).
_LETTERS = {
    "fr": "éèêàçùûôîœëï",
    "de": "äöüß",
    "es": "ñáíóú¿¡",
}
_WORDS = {
    "en": "the and is of to in that it you for with not this are be",
    "fr": "le la les et est une des du que pour dans pas je vous il sur au avec ce qui",
    "de": "der die das und ist nicht ein eine zu mit ich sie es den auf für von sich",
    "es": "el los las y es una que por para con no del se lo su al como más pero",
}
_WORD_SETS = {lang: frozenset(words.split()) for lang, words in _WORDS.items()}
_TOKEN = re.compile(r"[^\W\d_]+")


def detect(text: str) -> str:
    """The prompt's dominant language among :data:`LANGUAGES` (``"en"`` if unsure)."""
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    cls = alphabets.classify(text)
    counts: dict[str, int] = {}
    for code, name in enumerate(alphabets.CLASS_NAMES):
        counts[_SCRIPT_LANGUAGE.get(name, "latin")] = counts.get(
            _SCRIPT_LANGUAGE.get(name, "latin"), 0
        ) + (cls.count(bytes([code])) if name not in ("space", "other") else 0)
    best = max(counts, key=lambda lang: counts[lang])
    if counts[best] == 0:
        return "en"
    if best != "latin":
        return best
    lower = text.lower()
    scores = dict.fromkeys(_WORDS, 0.0)
    for token in _TOKEN.findall(lower):
        for lang, words in _WORD_SETS.items():
            if token in words:
                scores[lang] += 1.0
    for lang, letters in _LETTERS.items():
        scores[lang] += 2.0 * sum(lower.count(ch) for ch in letters)
    top = max(scores, key=lambda lang: scores[lang])
    return top if scores[top] > 0 else "en"


def header_for(language: str) -> str:
    """The restoration header in ``language`` (one of :data:`LANGUAGES`)."""
    if language not in HEADERS:
        raise InvalidParameterError(
            f"header language must be one of {(AUTO, *LANGUAGES)}; got {language!r}"
        )
    return HEADERS[language]
