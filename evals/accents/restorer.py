"""The noisy-channel restorer of :mod:`evals.scripts` for any Latin-script language, and fold.

:class:`LatinRestorer` is :class:`evals.scripts.restorers.FrenchRestorer` (exact Bayes
per word over the language's ``wordfreq`` list; an out-of-vocabulary hypothesis
returns the word as seen) with the list's letters not limited to French ones, and
a third channel for the ``fold`` mode: every Latin letter was sent as its ASCII
base, so a candidate ``é`` explains a seen ``e`` as well as ``e`` does (kept with
``p``, replaced with ``q``); among words that fold alike the more frequent wins.
"""

from __future__ import annotations

import re
from typing import Any

from evals.scripts.restorers import FrenchRestorer, Restorer, cased_entries

__all__ = ["LatinRestorer"]

_WORDLIKE = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")


class LatinRestorer(FrenchRestorer):
    """(ASCII base, mark) channel over one language's word list; ``mode`` picks the channel."""

    def __init__(self, language: str, frequencies: dict[str, float], *, words: int) -> None:
        Restorer.__init__(self)
        self.name = f"noisy-channel (wordfreq {language})"
        self.language = language
        ranked = sorted(
            (w for w in frequencies if _WORDLIKE.fullmatch(w) and self.encode(w) is not None),
            key=lambda w: -frequencies[w],
        )[:words]
        entries = cased_entries(ranked, frequencies)
        self._fold = False
        self._build(entries)

    def _ascii_loglik(self, observed: str, codes: Any) -> Any:
        if not self._fold:
            return super()._ascii_loglik(observed, codes)
        import numpy as np

        base = codes[:, :, 0]
        y = np.array([ord(c) - 33 for c in observed], dtype=np.int16)
        same = (base == y[None, :]).sum(axis=1)
        lp, lq = self._ascii_logs
        return same * lp + (observed.__len__() - same) * lq

    def restore(self, token: str, epsilon: float, mode: str, latin_marks: bool) -> str:
        """The most likely word typed, for ``token`` sent in ``mode`` at ``epsilon`` per slot."""
        key = (token, epsilon, f"{mode}{int(latin_marks)}", mode != "scripts")
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        self._fold = mode == "fold"
        try:
            result = self._restore_word(token, epsilon, mode != "scripts", latin_marks)
        finally:
            self._fold = False
        self._cache[key] = result
        return result
