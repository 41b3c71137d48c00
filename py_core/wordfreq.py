"""Word frequencies for the k-RR preview (pure Python, runs in Pyodide).

The table ``wordfreq_en.tsv.gz`` beside this module holds the 50,000 most frequent
words of symspellpy's English dictionary (MIT licence, see
``wordfreq_en.LICENSE.txt``; rebuild with ``python -m evals.krr.build_wordfreq``)
with their Zipf frequency: log10 of occurrences per billion words (``the`` is
7.63, a word seen once per million words is 3.0).  ``wordfreq_ko.tsv.gz`` and
``wordfreq_fr.tsv.gz`` hold Korean and French from the ``wordfreq`` package's
data (CC BY-SA 4.0, see ``wordfreq_multi.LICENSE.txt``; rebuild with
``python -m evals.scripts.build_wordfreq``).  Korean's list is of morphemes
(MeCab's segmentation), so a Korean word (an eojeol such as 병원에서) is looked up
whole and else as its stem once a common particle or ending is split off
(:data:`KO_SUFFIXES`); French elisions (``l'``, ``d'``, ...) are split off the
same way.  Tables are read on first use through a path relative to this file,
which also works when the extension unpacks ``py_core`` into Pyodide's file system.
"""

from __future__ import annotations

import gzip
import string
from functools import lru_cache
from pathlib import Path

from py_core.errors import InvalidParameterError

__all__ = [
    "KO_SUFFIXES",
    "LANGUAGES",
    "TABLE_PATH",
    "normalize",
    "table",
    "table_path",
    "zipf_frequency",
]

TABLE_PATH = Path(__file__).with_name("wordfreq_en.tsv.gz")
#: The languages with a table.
LANGUAGES = ("en", "ko", "fr")
_STRIP = string.punctuation + "\u00ab\u00bb\u201c\u201d\u2018\u2019\u2026\u00bf\u00a1\u00b7"
#: Korean particles and endings split off a word to look its stem up (longest first).
KO_SUFFIXES = tuple(
    sorted(
        [
            "이",
            "가",
            "은",
            "는",
            "을",
            "를",
            "의",
            "에",
            "에서",
            "에게",
            "께",
            "로",
            "으로",
            "와",
            "과",
            "도",
            "만",
            "까지",
            "부터",
            "보다",
            "처럼",
            "이나",
            "나",
            "이랑",
            "랑",
            "하고",
            "에는",
            "에서는",
            "으로는",
            "로는",
            "에도",
            "이다",
            "입니다",
            "이에요",
            "예요",
            "이고",
            "이며",
            "께서",
            "한테",
            "마다",
            "조차",
            "밖에",
            "하다",
            "합니다",
            "했다",
            "했습니다",
            "해요",
            "해서",
            "하는",
            "한",
            "할",
            "된",
            "되는",
            "됩니다",
            "했어요",
            "하세요",
            "적",
            "적인",
            "들",
            "들이",
            "들은",
            "들을",
            "들의",
            "습니다",
            "었다",
            "었습니다",
            "았다",
            "았습니다",
            "겠습니다",
            "어요",
            "아요",
            "고",
            "지만",
            "는데",
            "면",
            "어서",
            "아서",
        ],
        key=lambda suffix: (-len(suffix), suffix),
    )
)
_FR_ELISIONS = ("l'", "d'", "j'", "m'", "n'", "s'", "t'", "c'", "qu'", "jusqu'", "lorsqu'")


def table_path(language: str = "en") -> Path:
    """The table file of ``language`` (one of :data:`LANGUAGES`)."""
    if language not in LANGUAGES:
        raise InvalidParameterError(f"language must be one of {LANGUAGES}; got {language!r}")
    return TABLE_PATH if language == "en" else TABLE_PATH.with_name(f"wordfreq_{language}.tsv.gz")


@lru_cache(maxsize=4)
def table(language: str = "en") -> dict[str, float]:
    """The whole table of ``language``, word (lower case) -> Zipf frequency."""
    path = table_path(language)
    try:
        raw = gzip.decompress(path.read_bytes()).decode("utf-8")
    except OSError as exc:
        build = "evals.krr.build_wordfreq" if language == "en" else "evals.scripts.build_wordfreq"
        raise InvalidParameterError(
            f"the word-frequency table {path.name} is missing or unreadable ({exc}); "
            f"rebuild it with: python -m {build}"
        ) from exc
    out: dict[str, float] = {}
    for line in raw.splitlines():
        if not line or line.startswith("#"):
            continue
        word, _, zipf = line.partition("\t")
        out[word] = float(zipf)
    return out


def normalize(word: str) -> str:
    """The lookup key of a word as typed: surrounding punctuation stripped, lower case."""
    if not isinstance(word, str):
        raise InvalidParameterError(f"word must be a str; got {type(word).__name__}")
    return word.strip(_STRIP).lower().replace("\u2019", "'")


def zipf_frequency(word: str, language: str = "en") -> float | None:
    """Zipf frequency of ``word`` (normalized) in ``language``, or None when not in its table."""
    key = normalize(word)
    if not key:
        return None
    freq = table(language)
    found = freq.get(key)
    if found is not None or language == "en":
        return found
    if language == "ko":
        for suffix in KO_SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix):
                stem = freq.get(key[: -len(suffix)])
                if stem is not None:
                    return stem
        return None
    for elision in _FR_ELISIONS:
        if key.startswith(elision) and len(key) > len(elision):
            return freq.get(key[len(elision) :])
    return None
