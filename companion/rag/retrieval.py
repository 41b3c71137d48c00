"""Hybrid retrieval: the vector ranking, the BM25 ranking (SQLite FTS5) and their fusion.

* ``vector``: exact cosine (or the approximate index, re-scored) over the chunk vectors.
* ``bm25``: FTS5's BM25 over the chunks' text and headings.  The query's words become
  an OR of phrases: an e-mail address, a health id or a hyphenated surname is one
  phrase of its tokens, so it matches only where those tokens stand together.
* ``hybrid``: both rankings, each cut to ``candidates``, fused by reciprocal-rank
  fusion (``sum 1 / (rrf_k + rank)``, Cormack et al. 2009) or by a weighted sum of
  the min-max-normalised scores (``fusion="weighted"``).

Every hit carries its exact cosine score, whichever ranking found it, and
``min_score`` is a relevance threshold on that score: chunks below it are never
returned, so a question about nothing in the store retrieves nothing instead of
the least bad chunks -- except, in the bm25 and hybrid modes, a chunk that contains
an e-mail address or a number (3+ digits) the question names: the embedding of a
bare id says little, the match says it is the chunk asked about.  The defaults (companion/settings.py) were chosen by
``veil eval rag`` (docs/rag/evaluation.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from py_core.errors import InvalidParameterError

if TYPE_CHECKING:
    from companion.rag.store import DocumentStore, Hit

Mode = Literal["vector", "bm25", "hybrid"]
MODES: tuple[str, ...] = get_args(Mode)
Fusion = Literal["rrf", "weighted"]
FUSIONS: tuple[str, ...] = get_args(Fusion)

# Words too common to say anything about which chunk is meant (English; other
# languages keep every word, which BM25's idf weighs down on its own).
_STOP = """a about above after again all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into
    is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves tell give please show find whose s t"""
STOPWORDS = frozenset(_STOP.split())
_WORD = re.compile(r"[^\s\"'`()\[\]{}<>,;:!?*^]+")
_TOKEN = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_TERMS = 48


@dataclass(frozen=True, slots=True)
class RetrievalOptions:
    """How one request retrieves (the settings' defaults, a request's fields over them)."""

    mode: Mode = "hybrid"
    min_score: float | None = None  # cosine threshold; None: no threshold
    fusion: Fusion = "weighted"
    rrf_k: int = 60
    weight: float = 0.5  # the vector ranking's share in the weighted fusion
    candidates: int = 50  # of each ranking, before fusion

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidParameterError(
                f"retrieval mode must be one of {', '.join(MODES)}; got {self.mode!r}"
            )
        if self.fusion not in FUSIONS:
            raise InvalidParameterError(
                f"fusion must be one of {', '.join(FUSIONS)}; got {self.fusion!r}"
            )
        if self.min_score is not None and not -1.0 <= self.min_score <= 1.0:
            raise InvalidParameterError(
                f"the relevance threshold is a cosine score in [-1, 1]; got {self.min_score!r}"
            )
        if self.rrf_k < 0 or self.candidates < 1 or not 0.0 <= self.weight <= 1.0:
            raise InvalidParameterError(
                "rrf_k must be >= 0, candidates >= 1 and the weight in [0, 1]"
            )

    @classmethod
    def from_settings(cls, settings: Any) -> RetrievalOptions:
        return cls(
            mode=settings.retrieval_mode,
            min_score=settings.retrieval_min_score,
            fusion=settings.retrieval_fusion,
            weight=settings.retrieval_weight,
            rrf_k=settings.retrieval_rrf_k,
            candidates=settings.retrieval_candidates,
        )

    def override(self, mode: str | None = None, min_score: float | None = None) -> RetrievalOptions:
        """These options with a request's ``retrieval_mode`` / ``min_score`` (None: kept)."""
        changes: dict[str, Any] = {}
        if mode is not None:
            changes["mode"] = mode
        if min_score is not None:
            changes["min_score"] = min_score
        return replace(self, **changes) if changes else self


def request_options(settings: Any, body: Any) -> RetrievalOptions:
    """The settings' options with a request's ``retrieval_mode`` / ``retrieval_min_score``."""
    return RetrievalOptions.from_settings(settings).override(
        getattr(body, "retrieval_mode", None), getattr(body, "retrieval_min_score", None)
    )


def identifier_query(text: str, tokenizer: str = "unicode61", *, strict: bool = False) -> str:
    """The FTS5 query of the question's identifier-like words only (an e-mail address, a
    record number, a phone number, a hyphenated name: several tokens, or digits), or ''.

    ``strict``: only words with an ``@`` or at least three digits (what passes the
    relevance threshold whatever its cosine, see :func:`retrieve`).
    """
    terms = []
    for m in _WORD.finditer(text):
        word = m.group().strip(".-_/\\|~=+&#%$").lower()
        tokens = _TOKEN.findall(word)
        if len(tokens) > 1 or any(c.isdigit() for c in word):
            digits = sum(c.isdigit() for c in word)
            if len(tokens) == 1 and digits < 3:  # a year-like number or "2nd" is no id
                continue
            if strict and "@" not in word and digits < 3:
                continue
            phrase = word if tokenizer == "trigram" else " ".join(tokens)
            if tokenizer == "trigram" and len(word) < 3:
                continue
            terms.append('"' + phrase.replace('"', '""') + '"')
    return " OR ".join(dict.fromkeys(terms))


def named_chunks(
    store: DocumentStore,
    query_text: str,
    query_vector: np.ndarray,
    collection: str,
    exclude: set[int],
    limit: int = 1000,
) -> list[Hit]:
    """The chunks that contain an e-mail address or a number the question names (the
    strict identifier query), with their exact cosines; those in ``exclude`` left out."""
    strict = identifier_query(query_text, store.fts_tokenizer, strict=True)
    if not strict:
        return []
    ids = [c for c, _s in store.lexical_ranking(collection, strict, limit) if c not in exclude]
    q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    vecs = store.vectors_of(ids)
    scored = [
        (c, float(vecs[c] @ q) if c in vecs and vecs[c].shape == q.shape else 0.0) for c in ids
    ]
    return [replace(h, names_identifier=True) for h in store.hits(collection, scored)]


def fts_query(text: str, tokenizer: str = "unicode61") -> str:
    """An FTS5 MATCH expression for a question: an OR of its words as quoted phrases.

    Stop words are dropped (when a word is one token); with the trigram tokenizer words
    under three characters are too (they cannot match).  Empty when nothing is left.
    """
    terms: list[str] = []
    seen: set[str] = set()
    for m in _WORD.finditer(text):
        word = m.group().strip(".-_/\\|~=+&#%$").lower()
        tokens = _TOKEN.findall(word)
        if not tokens:
            continue
        if len(tokens) == 1 and tokens[0] in STOPWORDS:
            continue
        if tokenizer == "trigram":
            if len(word) < 3:
                continue
            phrase = word
        else:
            phrase = " ".join(tokens)
        if phrase in seen:
            continue
        seen.add(phrase)
        terms.append('"' + phrase.replace('"', '""') + '"')
        if len(terms) >= MAX_QUERY_TERMS:
            break
    return " OR ".join(terms)


def _ranks(pairs: Iterable[tuple[int, float]]) -> dict[int, tuple[int, float]]:
    return {cid: (rank, score) for rank, (cid, score) in enumerate(pairs, 1)}


def _minmax(values: dict[int, float]) -> dict[int, float]:
    if not values:
        return {}
    lo, hi = min(values.values()), max(values.values())
    span = hi - lo
    return {k: (v - lo) / span if span > 0 else 1.0 for k, v in values.items()}


def retrieve(
    store: DocumentStore,
    query_text: str,
    query_vector: np.ndarray,
    collection: str,
    k: int,
    options: RetrievalOptions | None = None,
    *,
    within: set[int] | None = None,
) -> list[Hit]:
    """The ``k`` best chunks of ``collection`` for the question, by ``options.mode``.

    ``within`` restricts the result to those chunk ids (a formal defense's admitted
    candidates).  Each hit's ``score`` is its exact cosine; ranks and the fused score
    say how it was found.
    """
    opts = options or RetrievalOptions()
    if k < 1:
        raise InvalidParameterError(f"top_k must be >= 1; got {k!r}")
    n = max(opts.candidates, k)
    named: set[int] = set()  # chunks with an e-mail address or number the question names
    q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    vector: dict[int, tuple[int, float]] = {}
    lexical: dict[int, tuple[int, float]] = {}
    if opts.mode in ("vector", "hybrid"):
        ranked = store.vector_ranking(collection, q, n if within is None else max(n, 1000))
        if within is not None:
            ranked = [p for p in ranked if p[0] in within][:n]
        vector = _ranks(ranked)
    if opts.mode in ("bm25", "hybrid"):
        depth = n if within is None else max(n, 1000)
        # Chunks that contain one of the question's identifiers rank first (by BM25), then
        # the rest of the full query's matches: a common word the question also uses
        # (BM25 adds the words' scores) never outranks the chunk with the e-mail address.
        ident = identifier_query(query_text, store.fts_tokenizer)
        first = store.lexical_ranking(collection, ident, depth) if ident else []
        top = max((sc for _c, sc in first), default=0.0)
        rest = store.lexical_ranking(collection, fts_query(query_text, store.fts_tokenizer), depth)
        have = {c for c, _s in first}
        ranked = [(c, sc + top + 1.0) for c, sc in first] + [
            (c, sc) for c, sc in rest if c not in have
        ]
        if within is not None:
            ranked = [p for p in ranked if p[0] in within]
        lexical = _ranks(ranked[:n])
        strict = identifier_query(query_text, store.fts_tokenizer, strict=True)
        if strict and opts.min_score is not None:
            named = {c for c, _s in store.lexical_ranking(collection, strict, depth)}
            if within is not None:
                named &= within
    fused: dict[int, float] = {}
    if opts.mode == "vector":
        fused = {cid: s for cid, (_r, s) in vector.items()}
    elif opts.mode == "bm25":
        fused = {cid: s for cid, (_r, s) in lexical.items()}
    elif opts.fusion == "rrf":
        for ranking in (vector, lexical):
            for cid, (rank, _s) in ranking.items():
                fused[cid] = fused.get(cid, 0.0) + 1.0 / (opts.rrf_k + rank)
    else:
        vec_n = _minmax({c: s for c, (_r, s) in vector.items()})
        lex_n = _minmax({c: s for c, (_r, s) in lexical.items()})
        for cid in set(vec_n) | set(lex_n):
            fused[cid] = opts.weight * vec_n.get(cid, 0.0) + (1 - opts.weight) * lex_n.get(cid, 0.0)
    cosine = {cid: s for cid, (_r, s) in vector.items()}
    missing = [cid for cid in fused if cid not in cosine]
    if missing:
        for cid, vec in store.vectors_of(missing).items():
            cosine[cid] = float(vec @ q) if vec.shape == q.shape else 0.0
    order = sorted(fused, key=lambda c: (-fused[c], c))
    if opts.min_score is not None:  # a chunk that has the id the question names is relevant
        order = [c for c in order if cosine.get(c, -1.0) >= opts.min_score or c in named]
    order = order[:k]
    hits = store.hits(collection, [(c, cosine.get(c, 0.0)) for c in order])
    return [
        replace(
            h,
            vector_rank=vector[h.chunk_id][0] if h.chunk_id in vector else None,
            lexical_rank=lexical[h.chunk_id][0] if h.chunk_id in lexical else None,
            bm25=lexical[h.chunk_id][1] if h.chunk_id in lexical else None,
            fused=fused[h.chunk_id],
            names_identifier=h.chunk_id in named,
        )
        for h in hits
    ]
