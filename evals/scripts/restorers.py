"""Noisy-channel restorers for Korean and French k-RR output (exact Bayes per word).

The adversary knows the mechanism: for a candidate word ``x`` of the observed
word's shape, ``P(y | x)`` is the product over its slots of ``p`` (slot kept) or
``q`` (changed), so ``log P(y | x) = const - sum_slots lambda_slot [x_s != y_s]``
with ``lambda = ln(a/b)`` of each slot's implemented weights.  The prior is a word
list from the ``wordfreq`` package (Zipf frequencies) -- for Korean its morpheme
list extended with stem + particle/ending compounds, since Korean words
(eojeol) are agglutinated -- and an out-of-vocabulary hypothesis competes with
it; when it wins, the word is returned as seen, which for a random string
succeeds with probability exactly Pr[T0].

``mode="ascii"`` restores the everything-into-ASCII output of the same text: a
non-ASCII character became a uniform ASCII character (likelihood 1/94 whatever
was seen), an ASCII one was kept with ``p``.
"""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from typing import Any

from py_core import alphabets, krr
from py_core.wordfreq import KO_SUFFIXES

__all__ = ["FrenchRestorer", "KoreanRestorer", "Restorer"]

_CASE_PRIOR = {"lower": 0.80, "title": 0.17, "upper": 0.03}
_OOV_PRIOR = 0.15


class Restorer:
    """Shared candidate tables: per length, slot codes and log priors (numpy)."""

    name = "noisy-channel"
    slots_per_char = 1

    def __init__(self) -> None:
        self._tables: dict[int, tuple[Any, Any, list[str]]] = {}  # n -> (codes, logp, texts)
        self._columns: dict[int, list[list[Any]]] = {}  # n -> [position][slot] -> codes
        self._cache: dict[tuple[str, float, str, bool], str] = {}

    def _build(self, entries: dict[str, float]) -> None:
        """``entries``: candidate text -> log prior."""
        import numpy as np

        by_length: dict[int, list[tuple[str, tuple[int, ...], float]]] = {}
        for text, prior in entries.items():
            encoded = self.encode(text)
            if encoded is None:
                continue
            by_length.setdefault(len(text), []).append((text, encoded, prior))
        for n, rows in by_length.items():
            codes = np.array([r[1] for r in rows], dtype=np.int16).reshape(
                len(rows), n, self.slots_per_char
            )
            # One contiguous column per (position, slot): the distance is a few vector ops.
            columns = [
                [np.ascontiguousarray(codes[:, i, j]) for j in range(self.slots_per_char)]
                for i in range(n)
            ]
            self._tables[n] = (codes, np.array([r[2] for r in rows]), [r[0] for r in rows])
            self._columns[n] = columns

    def encode(self, text: str) -> tuple[int, ...] | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def best(self, observed: str, lambdas: Any, *, ascii_mode: bool = False) -> tuple[str, float]:
        """The best dictionary explanation of ``observed`` and its score ("" if none)."""
        import numpy as np

        table = self._tables.get(len(observed))
        if table is None:
            return "", -math.inf
        codes, logp, texts = table
        if ascii_mode:
            scores = logp + self._ascii_loglik(observed, codes)
        else:
            seen = self.encode(observed)
            if seen is None:
                return "", -math.inf
            scores = logp.copy()
            per = self.slots_per_char
            for i, column in enumerate(self._columns[len(observed)]):
                for j, values in enumerate(column):
                    np.subtract(scores, lambdas[j], out=scores, where=values != seen[i * per + j])
        i = int(np.argmax(scores))
        return texts[i], float(scores[i])

    def _ascii_loglik(self, observed: str, codes: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


def cased_entries(ranked: list[str], frequencies: dict[str, float]) -> dict[str, float]:
    """Each word in lower, title and upper case, scored log frequency + log case prior."""
    entries: dict[str, float] = {}
    for word in ranked:
        base = _log_freq(frequencies[word])
        for case, prior in _CASE_PRIOR.items():
            text = (
                word.upper()
                if case == "upper"
                else word[:1].upper() + word[1:]
                if case == "title"
                else word
            )
            score = base + math.log(prior)
            if score > entries.get(text, -math.inf):
                entries[text] = score
    return entries


def _log_freq(zipf: float) -> float:
    return (zipf - 9.0) * math.log(10.0)  # Zipf = log10 of occurrences per 10^9 words


# ------------------------------------------------------------------- Korean

_HANGUL_RUN = re.compile(r"([\uac00-\ud7a3]+)([.,?!]?)")


class KoreanRestorer(Restorer):
    """Per-syllable (initial, vowel, final) channel over wordfreq's Korean list + compounds."""

    name = "noisy-channel (wordfreq ko)"
    slots_per_char = 3

    def __init__(
        self, frequencies: dict[str, float], *, stems: int = 3000, suffixes: int = 100
    ) -> None:
        super().__init__()
        hangul = {w: z for w, z in frequencies.items() if re.fullmatch("[\uac00-\ud7a3]+", w)}
        # Suffixes: py_core's particle/ending list, then the most frequent short morphemes.
        ranked = sorted(hangul, key=lambda w: -hangul[w])
        chosen = {s for s in KO_SUFFIXES if s in hangul}
        for w in ranked:
            if len(chosen) >= suffixes:
                break
            if len(w) <= 2:
                chosen.add(w)
        suffix_total = sum(10 ** hangul[s] for s in chosen)
        entries: dict[str, float] = {}
        bare = math.log(0.4)
        for word, zipf in hangul.items():
            entries[word] = bare + _log_freq(zipf)
        glue = math.log(0.6)
        for stem in ranked[:stems]:
            for suffix in chosen:
                text = stem + suffix
                score = (
                    glue + _log_freq(hangul[stem]) + math.log(10 ** hangul[suffix] / suffix_total)
                )
                if score > entries.get(text, -math.inf):
                    entries[text] = score
        self._build(entries)

    def encode(self, text: str) -> tuple[int, ...] | None:
        out: list[int] = []
        for ch in text:
            s = ord(ch) - 0xAC00
            if not 0 <= s < 11172:
                return None
            out += (s // 588, (s // 28) % 21, s % 28)
        return tuple(out)

    def _ascii_loglik(self, observed: str, codes: Any) -> Any:
        import numpy as np

        # Every Hangul syllable became a uniform ASCII character: the same for all candidates.
        return np.full(codes.shape[0], len(observed) * math.log(1 / krr.K))

    def restore_word(self, token: str, epsilon: float, *, ascii_mode: bool = False) -> str:
        key = (token, epsilon, "ko", ascii_mode)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        result = self._restore_word(token, epsilon, ascii_mode)
        self._cache[key] = result
        return result

    def _restore_word(self, token: str, epsilon: float, ascii_mode: bool) -> str:
        impls = alphabets.slot_implementations(epsilon)
        if ascii_mode:
            if not token.isascii():
                return token
            # The script is hidden: try the token as a Korean word of the same length.
            word, score = self.best(token, None, ascii_mode=True)
            oov = math.log(_OOV_PRIOR) + len(token) * math.log(1 / krr.K)
            return word if word and score + math.log(1 - _OOV_PRIOR) > oov else token
        match = _HANGUL_RUN.fullmatch(token)
        if not match:
            return token
        core, tail = match.groups()
        lambdas = [impls[s].epsilon for s in alphabets.SCRIPT_SLOTS["hangul"]]
        word, score = self.best(core, lambdas)
        # The OOV hypothesis: a uniform syllable model; as log P(y) relative to P(y|x=y).
        keep = sum(math.log(impls[s].keep_probability) for s in alphabets.SCRIPT_SLOTS["hangul"])
        oov = math.log(_OOV_PRIOR) + len(core) * (math.log(1 / 11172) - keep)
        restored = word if word and score + math.log(1 - _OOV_PRIOR) > oov else core
        if tail:
            tail = _best_tail(tail, impls["ascii"].epsilon)
        return restored + tail


def _best_tail(seen: str, lam: float) -> str:
    options = {".": 0.55, ",": 0.35, "?": 0.05, "!": 0.05}
    best, best_score = seen, math.log(0.02)  # keep what was seen (it may be a real symbol)
    for option, prior in options.items():
        score = math.log(prior) - lam * (option != seen)
        if score > best_score:
            best, best_score = option, score
    return best


# ------------------------------------------------------------------- French

_PREFIXES = {
    0: {"": 0.90},
    1: {"(": 0.004, "«": 0.003, '"': 0.003},
    2: {e: 0.012 for e in ("l'", "d'", "j'", "n'", "s'", "c'", "m'", "t'")},
    3: {"qu'": 0.008},
}
_SUFFIXES = {
    0: {"": 0.80},
    1: {",": 0.08, ".": 0.08, ":": 0.01, ";": 0.004, "!": 0.004, "?": 0.01, ")": 0.006},
}


@dataclass(frozen=True, slots=True)
class _Channel:
    lam_base: float
    lam_mark: float  # math.inf when the mark slot is off
    log_p_mark: float
    log_q_mark: float


class FrenchRestorer(Restorer):
    """Per-character (ASCII base, mark) channel over wordfreq's French list."""

    name = "noisy-channel (wordfreq fr)"
    slots_per_char = 2

    def __init__(self, frequencies: dict[str, float], *, words: int = 60_000) -> None:
        super().__init__()
        keep = re.compile(r"[a-zàâäçéèêëîïôöûùüÿœæ']+")
        ranked = sorted(
            (w for w in frequencies if keep.fullmatch(w)), key=lambda w: -frequencies[w]
        )[:words]
        entries = cased_entries(ranked, frequencies)
        self._build(entries)

    def encode(self, text: str) -> tuple[int, ...] | None:
        out: list[int] = []
        for ch in text:
            if "!" <= ch <= "~":
                out += (ord(ch) - 33, 0)
                continue
            pair = alphabets.decompose_latin(ch)
            if pair is None:
                return None
            out += (ord(pair[0]) - 33, alphabets.ALPHABETS["latin-mark"].symbols.index(pair[1]))
        return tuple(out)

    def _ascii_loglik(self, observed: str, codes: Any) -> Any:
        import numpy as np

        base, mark = codes[:, :, 0], codes[:, :, 1]
        y = np.array([ord(c) - 33 for c in observed], dtype=np.int16)
        plain = mark == 0
        same = (base == y[None, :]) & plain
        lp, lq = self._ascii_logs
        return (
            same.sum(axis=1) * lp
            + (plain & ~same).sum(axis=1) * lq
            + (~plain).sum(axis=1) * math.log(1 / krr.K)
        )

    def restore_word(
        self, token: str, epsilon: float, *, ascii_mode: bool = False, latin_marks: bool = True
    ) -> str:
        key = (token, epsilon, "fr" + ("m" if latin_marks else ""), ascii_mode)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        result = self._restore_word(token, epsilon, ascii_mode, latin_marks)
        self._cache[key] = result
        return result

    def _restore_word(self, token: str, epsilon: float, ascii_mode: bool, latin_marks: bool) -> str:
        import numpy as np

        impls = alphabets.slot_implementations(epsilon)
        ascii_impl = impls["ascii"]
        mark = impls["latin-mark"]
        on = latin_marks and not ascii_mode
        channel = _Channel(
            ascii_impl.epsilon,
            mark.epsilon if on else math.inf,
            math.log(mark.keep_probability) if on else 0.0,
            math.log(mark.replace_probability) if on else -math.inf,
        )
        self._ascii_logs = (
            math.log(ascii_impl.keep_probability),
            math.log(ascii_impl.replace_probability),
        )
        seen = self.encode(token)
        if seen is None:
            return token
        # Log-likelihoods relative to "every slot kept": OOV and edges on the same scale.
        oov = math.log(_OOV_PRIOR) + sum(
            self._oov_char(token[i], seen[2 * i + 1], channel, ascii_mode)
            for i in range(len(token))
        )
        best_text, best_score = token, oov
        for pre_len, prefixes in _PREFIXES.items():
            for suf_len, suffixes in _SUFFIXES.items():
                n = len(token) - pre_len - suf_len
                if n < 1 or n not in self._tables:
                    continue
                pre, pre_score = self._edge(prefixes, token[:pre_len], channel, ascii_mode)
                suf, suf_score = self._edge(
                    suffixes, token[len(token) - suf_len :], channel, ascii_mode
                )
                core = token[pre_len : pre_len + n]
                if ascii_mode:
                    word, score = self.best(core, None, ascii_mode=True)
                    score -= n * self._ascii_logs[0]  # relative to all kept
                else:
                    lambdas = np.array([channel.lam_base, channel.lam_mark if on else 1e9])
                    word, score = self.best(core, lambdas)
                if not word:
                    continue
                total = math.log(1 - _OOV_PRIOR) + pre_score + suf_score + score
                if total > best_score:
                    best_text, best_score = pre + word + suf, total
        return best_text

    def _oov_char(self, ch: str, mark_seen: int, channel: _Channel, ascii_mode: bool) -> float:
        """log P(char seen | OOV) - log P(char seen | it was typed), per character."""
        impls_keep = self._ascii_logs[0]
        value = math.log(1 / krr.K) - impls_keep
        if not ascii_mode and channel.lam_mark != math.inf:
            value += (
                channel.log_p_mark if mark_seen == 0 else channel.log_q_mark
            ) - channel.log_p_mark
        return value

    def _edge(
        self, options: dict[str, float], seen: str, channel: _Channel, ascii_mode: bool
    ) -> tuple[str, float]:
        best, best_score = "", -math.inf
        for option, prior in options.items():
            score = math.log(prior)
            for a, b in zip(option, seen, strict=True):
                if a == b:
                    continue
                if ascii_mode and not a.isascii():
                    score += math.log(1 / krr.K) - self._ascii_logs[0]
                else:
                    score -= channel.lam_base
            if score > best_score:
                best, best_score = option, score
        return best, best_score


_PUNCT = set(string.punctuation)
