"""English word frequencies for the k-RR preview (pure Python, runs in Pyodide).

The table ``wordfreq_en.tsv.gz`` beside this module holds the 50,000 most frequent
words of symspellpy's English dictionary (MIT licence, see
``wordfreq_en.LICENSE.txt``; rebuild with ``python -m evals.krr.build_wordfreq``)
with their Zipf frequency: log10 of occurrences per billion words (``the`` is
7.63, a word seen once per million words is 3.0).  It is read on first use
through a path relative to this file, which also works when the extension
unpacks ``py_core`` into Pyodide's file system.
"""

from __future__ import annotations

import gzip
import string
from functools import lru_cache
from pathlib import Path

from py_core.errors import InvalidParameterError

__all__ = ["TABLE_PATH", "normalize", "table", "zipf_frequency"]

TABLE_PATH = Path(__file__).with_name("wordfreq_en.tsv.gz")
_STRIP = string.punctuation


@lru_cache(maxsize=1)
def table() -> dict[str, float]:
    """The whole table, word (lower case) -> Zipf frequency."""
    try:
        raw = gzip.decompress(TABLE_PATH.read_bytes()).decode("ascii")
    except OSError as exc:
        raise InvalidParameterError(
            f"the word-frequency table {TABLE_PATH} is missing or unreadable ({exc}); "
            "rebuild it with: python -m evals.krr.build_wordfreq"
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
    return word.strip(_STRIP).lower()


def zipf_frequency(word: str) -> float | None:
    """Zipf frequency of ``word`` (normalized), or None when it is not in the table."""
    key = normalize(word)
    if not key:
        return None
    return table().get(key)
