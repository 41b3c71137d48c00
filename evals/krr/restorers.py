"""Restorers: what an adversary (or the remote LLM) does with a k-RR-perturbed prompt.

All restorers share one small interface, :class:`Restorer`: ``restore(texts,
epsilon) -> texts``.  Three implementations:

* :class:`NoisyChannelRestorer` -- offline, exact Bayes decoding of the k-RR
  channel per word.  k-RR keeps the length of a word and changes each character
  independently, so for a candidate word ``x`` of the same length as the observed
  ``y``, ``P(y | x) = p^L (q/p)^d(x, y)`` with ``d`` the Hamming distance and
  ``ln(p/q) = eps`` exactly.  The prior is symspellpy's bundled English unigram
  dictionary (MIT, 82,765 words with Google Books counts), with case and
  attached-punctuation variants; an "out-of-vocabulary" hypothesis (a character
  model) competes with it, and when it wins the word is returned as seen -- the
  best guess for a random string, whose success rate is exactly Pr[T0] = p^L.
  With ``context=True`` a second sweep rescales each word's candidates with
  symspellpy's bigram counts given its decoded neighbours.
* :class:`LocalLLMRestorer` -- the local causal LM (SmolLM2-135M-Instruct by
  default) prompted to restore the text, greedy decoding.
* :class:`OpenAICompatibleRestorer` -- the same prompt sent to any
  OpenAI-compatible chat endpoint (a remote model with an API key, or a local
  server); not run in tests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from py_core.errors import InvalidParameterError
from py_core.krr import implemented_epsilon

__all__ = [
    "RESTORE_INSTRUCTION",
    "LocalLLMRestorer",
    "NoisyChannelRestorer",
    "OpenAICompatibleRestorer",
    "Restorer",
    "restore_prompt",
]


class Restorer(Protocol):
    """Turns perturbed texts back into (a guess of) the originals."""

    name: str

    def restore(self, texts: Sequence[str], epsilon: float) -> list[str]:
        """One restored text per input; ``epsilon`` is the per-character ε used."""
        ...


# ------------------------------------------------------------------ noisy channel

# Hand-set priors for the shape of a word, documented in the report.  They are
# generic English-text rates, not fitted on the evaluation corpus.
_CASE_PRIOR = {"lower": 0.80, "title": 0.17, "upper": 0.03}
_CASES = ("lower", "title", "upper")
_PREFIX_PRIOR = {"": 0.97, "(": 0.015, '"': 0.015}
_SUFFIX_PRIOR = {
    "": 0.80,
    ",": 0.08,
    ".": 0.08,
    ":": 0.01,
    "?": 0.01,
    ";": 0.004,
    "!": 0.004,
    ")": 0.006,
    '"': 0.006,
}
# Character model of an out-of-vocabulary word (names, numbers, IDs): class
# probabilities times letter frequencies from the dictionary.
_OOV_CLASS_PRIOR = {"lower": 0.62, "upper": 0.12, "digit": 0.18, "punct": 0.08}


def _symspell_dictionary_path(name: str) -> Path:
    from evals.common import packaged_file

    return packaged_file("symspellpy", name)


UNIGRAM_FILE = "frequency_dictionary_en_82_765.txt"
BIGRAM_FILE = "frequency_bigramdictionary_en_243_342.txt"


def load_unigrams() -> dict[str, int]:
    """symspellpy's bundled English unigram counts (word -> count)."""
    counts: dict[str, int] = {}
    with _symspell_dictionary_path(UNIGRAM_FILE).open(encoding="utf-8") as handle:
        for line in handle:
            word, count = line.split()
            if word.isascii():
                counts[word] = int(count)
    return counts


def load_bigrams() -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    with _symspell_dictionary_path(BIGRAM_FILE).open(encoding="utf-8") as handle:
        for line in handle:
            first, second, count = line.split()
            counts[(first, second)] = int(count)
    return counts


@dataclass(frozen=True, slots=True)
class _Candidate:
    text: str
    word: str  # dictionary word (lower case), "" for the OOV hypothesis
    score: float  # log P(x) + log P(y | x) - L log p


class NoisyChannelRestorer:
    """Per-word Bayes decoding of k-RR with a unigram prior (and optional bigram context)."""

    def __init__(
        self,
        *,
        oov_prior: float = 0.15,
        context: bool = False,
        top_k: int = 8,
        unigrams: dict[str, int] | None = None,
    ) -> None:
        import numpy as np

        if not 0.0 < oov_prior < 1.0:
            raise InvalidParameterError(f"oov_prior must be in (0, 1); got {oov_prior!r}")
        self.name = "noisy-channel+bigram" if context else "noisy-channel"
        self.context = context
        self.top_k = top_k
        self._log_oov = math.log(oov_prior)
        self._log_in = math.log(1.0 - oov_prior)
        counts = unigrams if unigrams is not None else load_unigrams()
        total = float(sum(counts.values()))
        self._unigram_log = {w: math.log(c / total) for w, c in counts.items()}
        by_length: dict[int, list[str]] = {}
        for word in counts:
            by_length.setdefault(len(word), []).append(word)
        self._words: dict[int, list[str]] = {}
        self._lower_t: dict[int, Any] = {}  # [n][position] -> bytes of every word
        self._upper_t: dict[int, Any] = {}
        self._logp: dict[int, Any] = {}
        for n, words in by_length.items():
            self._words[n] = words
            lower = np.frombuffer("".join(words).encode(), dtype=np.uint8).reshape(-1, n)
            upper = np.frombuffer("".join(words).upper().encode(), dtype=np.uint8).reshape(-1, n)
            self._lower_t[n] = np.ascontiguousarray(lower.T)
            self._upper_t[n] = np.ascontiguousarray(upper.T)
            self._logp[n] = np.array([self._unigram_log[w] for w in words])
        letters: dict[str, float] = {}
        for word, count in counts.items():
            for ch in word:
                if "a" <= ch <= "z":
                    letters[ch] = letters.get(ch, 0.0) + count
        letter_total = sum(letters.values())
        self._char_log: dict[str, float] = {}
        for code in range(33, 127):
            ch = chr(code)
            if "a" <= ch <= "z":
                lp = _OOV_CLASS_PRIOR["lower"] * letters.get(ch, 1.0) / letter_total
            elif "A" <= ch <= "Z":
                lp = _OOV_CLASS_PRIOR["upper"] * letters.get(ch.lower(), 1.0) / letter_total
            elif ch.isdigit():
                lp = _OOV_CLASS_PRIOR["digit"] / 10
            else:
                lp = _OOV_CLASS_PRIOR["punct"] / 32
            self._char_log[ch] = math.log(lp)
        self._case_column = np.array([[math.log(_CASE_PRIOR[c])] for c in _CASES])
        self._bigrams: dict[tuple[str, str], int] | None = None
        self._bigram_totals: dict[str, int] = {}
        self._cache: dict[tuple[str, float], list[_Candidate]] = {}

    # -- per word ------------------------------------------------------------
    def candidates(self, token: str, epsilon: float) -> list[_Candidate]:
        """The ``top_k`` best explanations of ``token``, best first (OOV included)."""
        key = (token, epsilon)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        lam = implemented_epsilon(epsilon)  # ln(p/q) of the mechanism actually run
        oov_score = self._log_oov + sum(self._char_log.get(ch, -20.0) for ch in token)
        found = [_Candidate(token, "", oov_score)]
        if token.isascii():
            found.extend(self._dictionary_candidates(token, lam))
        found.sort(key=lambda c: -c.score)
        result = found[: self.top_k]
        if len(self._cache) > 500_000:
            self._cache.clear()
        self._cache[key] = result
        return result

    def _dictionary_candidates(self, token: str, lam: float) -> list[_Candidate]:
        import numpy as np

        length = len(token)
        ranked: list[tuple[float, str, str]] = []  # (score, text, dictionary word)
        for pre_len in (0, 1):
            for suf_len in (0, 1):
                n = length - pre_len - suf_len
                if n < 1 or n not in self._words:
                    continue
                # Best attached punctuation for this split: one scalar per edge.
                pre, pre_score = self._best_edge(_PREFIX_PRIOR, token[:pre_len], pre_len, lam)
                suf, suf_score = self._best_edge(
                    _SUFFIX_PRIOR, token[length - suf_len :], suf_len, lam
                )
                base = self._log_in + pre_score + suf_score
                core = token[pre_len : pre_len + n].encode()
                lower_t, upper_t = self._lower_t[n], self._upper_t[n]
                # Hamming distances column by column (contiguous rows: much faster than
                # a row-wise reduction over short words).
                d_lower = np.zeros(lower_t.shape[1], dtype=np.int16)
                d_upper = np.zeros_like(d_lower)
                for j, ch in enumerate(core):
                    d_lower += lower_t[j] != ch
                    d_upper += upper_t[j] != ch
                d_title = d_lower - (lower_t[0] != core[0]) + (upper_t[0] != core[0])
                dists = (
                    np.stack((d_lower, d_title, d_upper)) if n > 1 else np.stack((d_lower, d_title))
                )
                scores = self._logp[n][None, :] - lam * dists + self._case_column[: len(dists)]
                flat = scores.ravel()
                k = min(self.top_k, flat.size)
                for index in np.argpartition(-flat, k - 1)[:k]:
                    case_index, word_index = divmod(int(index), scores.shape[1])
                    word = self._words[n][word_index]
                    shaped = _shape(word, _CASES[case_index])
                    ranked.append((float(flat[index]) + base, pre + shaped + suf, word))
        ranked.sort(key=lambda item: -item[0])
        return [_Candidate(text, word, score) for score, text, word in ranked[: self.top_k]]

    @staticmethod
    def _best_edge(prior: dict[str, float], seen: str, size: int, lam: float) -> tuple[str, float]:
        best, best_score = "", -math.inf
        for option, probability in prior.items():
            if len(option) != size:
                continue
            score = math.log(probability) - lam * sum(
                a != b for a, b in zip(option, seen, strict=True)
            )
            if score > best_score:
                best, best_score = option, score
        return best, best_score

    # -- per text --------------------------------------------------------------
    def restore(self, texts: Sequence[str], epsilon: float) -> list[str]:
        return [self.restore_one(text, epsilon) for text in texts]

    def restore_one(self, text: str, epsilon: float) -> str:
        pieces = re.split(r"(\s+)", text)
        token_positions = [i for i, piece in enumerate(pieces) if piece and not piece.isspace()]
        options = [self.candidates(pieces[i], epsilon) for i in token_positions]
        chosen = [opts[0] for opts in options]
        if self.context and len(chosen) > 1:
            chosen = self._context_sweep(options, chosen)
        for i, cand in zip(token_positions, chosen, strict=True):
            pieces[i] = cand.text
        return "".join(pieces)

    def _context_sweep(
        self, options: list[list[_Candidate]], chosen: list[_Candidate]
    ) -> list[_Candidate]:
        """Re-pick each word with an interpolated bigram model given its decoded neighbours.

        ``P(b | a) = lam c(a, b) / N(a) + (1 - lam) P(b)``; a candidate's unigram prior is
        multiplied by ``P(b | left) / P(b)`` and ``P(right | b) / P(right)``.  The
        out-of-vocabulary hypothesis keeps its score (ratio 1).
        """
        if self._bigrams is None:
            self._bigrams = load_bigrams()
            self._bigram_totals = {}
            for (a, _), count in self._bigrams.items():
                self._bigram_totals[a] = self._bigram_totals.get(a, 0) + count
        big, totals, uni = self._bigrams, self._bigram_totals, self._unigram_log
        lam = 0.5

        def ratio(a: str, b: str, b_logp: float) -> float:
            n_a = totals.get(a)
            if not a or not b or not n_a:
                return 0.0
            p_b = math.exp(b_logp)
            return math.log(lam * big.get((a, b), 0) / n_a + (1 - lam) * p_b) - b_logp

        out = list(chosen)
        for i, opts in enumerate(options):
            if len(opts) < 2:
                continue
            left = out[i - 1].word if i > 0 else ""
            right = chosen[i + 1].word if i + 1 < len(chosen) else ""
            right_logp = uni.get(right, 0.0)

            def score(
                c: _Candidate, left: str = left, right: str = right, rl: float = right_logp
            ) -> float:
                if not c.word:
                    return c.score
                return c.score + ratio(left, c.word, uni[c.word]) + ratio(c.word, right, rl)

            out[i] = max(opts, key=score)
        return out


def _shape(word: str, case: str) -> str:
    if case == "upper":
        return word.upper()
    if case == "title":
        return word[:1].upper() + word[1:]
    return word


# ------------------------------------------------------------------------- LLMs

RESTORE_INSTRUCTION = (
    "Some characters of the text below were replaced by random characters. "
    "Rewrite the text with the original words restored. Keep names, numbers and "
    "anything you cannot restore exactly as they are. Output only the restored text."
)


def restore_prompt(text: str) -> list[dict[str, str]]:
    """Chat messages asking a model to restore ``text``."""
    return [
        {"role": "system", "content": "You correct corrupted text."},
        {"role": "user", "content": f"{RESTORE_INSTRUCTION}\n\nText:\n{text}"},
    ]


class LocalLLMRestorer:
    """The local causal LM prompted to restore the text (greedy decoding)."""

    def __init__(self, loaded: Any, *, max_new_tokens_factor: float = 1.6, name: str | None = None):
        self.loaded = loaded
        self.factor = max_new_tokens_factor
        self.name = name or "local-llm"

    def restore(self, texts: Sequence[str], epsilon: float) -> list[str]:
        return [self.generate(restore_prompt(t), len(t)) for t in texts]

    def generate(
        self, messages: list[dict[str, str]], n_chars: int, *, max_new_tokens: int | None = None
    ) -> str:
        """Greedy completion of ``messages``; the budget follows the input unless given."""
        import torch

        tok, model = self.loaded.tokenizer, self.loaded.model
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs = tok(prompt, return_tensors="pt").to(self.loaded.device)
        budget = max(16, int(len(tok(messages[-1]["content"])["input_ids"]) * self.factor))
        budget = min(budget, max(16, n_chars))  # never more tokens than characters
        if max_new_tokens is not None:
            budget = max_new_tokens
        with torch.inference_mode():
            out = model.generate(
                **inputs,
                max_new_tokens=budget,
                do_sample=False,
                pad_token_id=tok.eos_token_id,
            )
        return str(
            tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        ).strip()


class OpenAICompatibleRestorer:
    """The restore prompt sent to an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    ``base_url`` like ``https://api.example.com/v1`` or a local server; the key is
    read by the caller (e.g. from an environment variable) and never logged.
    """

    def __init__(self, base_url: str, model: str, api_key: str, *, timeout_s: float = 60.0):
        if not base_url.startswith(("http://", "https://")):
            raise InvalidParameterError(
                f"base_url must start with http:// or https://; got {base_url!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.name = f"api:{model}"

    def restore(self, texts: Sequence[str], epsilon: float) -> list[str]:
        import httpx

        out = []
        with httpx.Client(timeout=self.timeout_s) as client:
            for text in texts:
                response = client.post(
                    f"{self.base_url}/chat/completions",
                    headers={"Authorization": f"Bearer {self._api_key}"},
                    json={"model": self.model, "messages": restore_prompt(text), "temperature": 0},
                )
                response.raise_for_status()
                out.append(str(response.json()["choices"][0]["message"]["content"]).strip())
        return out
