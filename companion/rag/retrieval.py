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

import itertools
import math
import re
import sqlite3
import unicodedata
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
# A word of the question is rare when at most this many chunks of the store have it, or
# at most this share of them (chosen by `veil eval rag`, docs/rag/report.md).
RARE_MIN_DF = 3
RARE_SHARE = 0.01
COUNT_CAP = 5000  # chunks counted per word (a word in more is common whatever the count)


@dataclass(frozen=True, slots=True)
class RetrievalOptions:
    """How one request retrieves (the settings' defaults, a request's fields over them)."""

    mode: Mode = "hybrid"
    min_score: float | None = None  # cosine threshold; None: no threshold
    fusion: Fusion = "weighted"
    rrf_k: int = 60
    weight: float = 0.3  # the vector ranking's share in the weighted fusion
    # the vector share when the question names no rare word nor identifier of the store
    common_weight: float = 0.8
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
        if (
            self.rrf_k < 0
            or self.candidates < 1
            or not 0.0 <= self.weight <= 1.0
            or not 0.0 <= self.common_weight <= 1.0
        ):
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
            common_weight=getattr(settings, "retrieval_common_weight", 0.8),
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


_DIGIT_GROUP = re.compile(r"\(?\+?\d{1,5}\)?")
_THOUSANDS = re.compile(r"^\d{1,3}(?: \d{3})+$")  # "1 024 598": a number's thousands apart
_GROUP_SEP = re.compile(r"^[\s.\-/]*$")
MIN_JOINED_DIGITS = 7  # a phone or health number; "120 140" (two readings) stays two
MAX_SPLITS = 48  # phrases of the ways to cut one joined number into groups


def _digit_runs(text: str) -> list[tuple[int, int, str]]:
    """(start, end, digits) of runs of digit groups written apart ("947 304 7982",
    "(354) 574-6042", "+44 20 7946 0958") of at least ``MIN_JOINED_DIGITS`` digits."""
    runs: list[tuple[int, int, str]] = []
    groups = [m for m in _DIGIT_GROUP.finditer(text) if not _touches_word(text, m.start(), m.end())]
    i = 0
    while i < len(groups):
        j = i
        while j + 1 < len(groups) and _GROUP_SEP.match(
            text[groups[j].end() : groups[j + 1].start()]
        ):
            j += 1
        if j > i:
            digits = "".join(c for g in groups[i : j + 1] for c in g.group() if c.isdigit())
            written = text[groups[i].start() : groups[j].end()]
            singles = sum(len(g.group().strip("()+")) < 2 for g in groups[i : j + 1])
            thousands = bool(_THOUSANDS.match(written)) and len(digits) >= 6
            if thousands or (len(digits) >= MIN_JOINED_DIGITS and singles == 0):
                runs.append((groups[i].start(), groups[j].end(), digits))
        i = j + 1
    return runs


def _touches_word(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return before.isalnum() or after.isalnum() or before in "@_" or after in "@_"


def number_forms(digits: str, written: str | None = None) -> list[str]:
    """The phrases a number can stand as in a document: glued (``9473047982``), as it
    was written in groups (``947 304 7982``), and cut into two or three groups of two or
    more digits (how phones and health numbers are written: 3-3-4, 3-4-3, 4-3-3, ...)."""
    forms = [digits]
    if written:
        forms.append(written)
    n = len(digits)
    cuts: list[tuple[int, ...]] = [(a,) for a in range(2, n - 1)]
    cuts += [(a, b) for a in range(2, n - 3) for b in range(a + 2, n - 1)]
    for cut in cuts:
        if len(forms) >= MAX_SPLITS:
            break
        bounds = (0, *cut, n)
        forms.append(" ".join(digits[x:y] for x, y in itertools.pairwise(bounds)))
    return list(dict.fromkeys(forms))


def _number_terms(glued: str, written: str | None, tokenizer: str) -> list[str]:
    """The phrases of one number: :func:`number_forms`, and a phone's national and
    international forms ("+44 20 7946 0958" is "020 7946 0958"; "02079460958" is found in
    "+44 20 7946 0958" by its groups after the 0)."""
    if tokenizer == "trigram":  # substrings of the raw text: glued, spaced, dashed
        forms = [glued] + ([written, written.replace(" ", "-")] if written else [])
        return list(dict.fromkeys(forms))
    forms = number_forms(glued, written)
    if written and written.startswith("+"):
        groups = written[1:].split()
        national = "".join(groups[1:])
        if len(national) >= MIN_JOINED_DIGITS - 1:
            forms += [
                " ".join(groups[1:]),
                *number_forms("0" + national, "0" + " ".join(groups[1:])),
            ]
    elif glued.startswith("0") and len(glued) > MIN_JOINED_DIGITS:
        forms += number_forms(glued[1:])[1:]
    return list(dict.fromkeys(forms))


def identifier_query(text: str, tokenizer: str = "unicode61", *, strict: bool = False) -> str:
    """The FTS5 query of the question's identifier-like words only (an e-mail address, a
    record number, a phone number, a hyphenated name: several tokens, or digits), or ''.

    A number written in groups ("947 304 7982", "(354) 574-6042") is one identifier: its
    groups glued and its usual cuts into groups (:func:`number_forms`), so it finds
    "9473047982" and "947-304-7982" alike, and never a chunk with "304" alone.

    ``strict``: only words with an ``@`` or at least three digits (what passes the
    relevance threshold whatever its cosine, see :func:`retrieve`).
    """
    terms = [
        '"' + phrase.replace('"', '""') + '"'
        for _written, phrases in identifiers(text, tokenizer, strict=strict)
        for phrase in phrases
    ]
    return " OR ".join(dict.fromkeys(terms))


def identifiers(
    text: str, tokenizer: str = "unicode61", *, strict: bool = False
) -> list[tuple[str, list[str]]]:
    """The question's identifier-like words (see :func:`identifier_query`), each as it is
    written with the phrases (FTS5 token sequences, or raw substrings for ``trigram``) a
    document may write it as."""
    out: list[tuple[str, list[str]]] = []
    runs = _digit_runs(text)
    for start, end, glued in runs:
        written = " ".join(_TOKEN.findall(text[start:end]))
        if text[start:end].lstrip("(").startswith("+"):
            written = "+" + written
        forms = [f.lstrip("+") for f in _number_terms(glued, written, tokenizer)]
        out.append((text[start:end], forms))
    covered = [(a, b) for a, b, _d in runs]
    for m in _WORD.finditer(text):
        if any(a <= m.start() < b for a, b in covered):
            continue
        word = m.group().strip(".-_/\\|~=+&#%$").lower()
        tokens = _TOKEN.findall(word)
        # "low-cost", "multi-day": a compound, not an identifier (a name is capitalised)
        compound = word.isalpha() is False and all(t.isalpha() for t in tokens)
        compound = compound and "@" not in word and not m.group()[:1].isupper()
        if (len(tokens) > 1 and not compound) or any(c.isdigit() for c in word):
            digits = sum(c.isdigit() for c in word)
            if len(tokens) == 1 and digits < 3:  # a year-like number or "2nd" is no id
                continue
            if strict and "@" not in word and digits < 3:
                continue
            if word.isdigit() and len(word) >= MIN_JOINED_DIGITS:  # glued: its cuts too
                out.append((word, _number_terms(word, None, tokenizer)))
                continue
            phrase = word if tokenizer == "trigram" else " ".join(tokens)
            if tokenizer == "trigram" and len(word) < 3:
                continue
            out.append((m.group().strip(".,;:!?\"'()"), [phrase]))
    return out


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


def query_terms(text: str, tokenizer: str = "unicode61") -> list[str]:
    """The question's words as FTS5 phrases (unquoted), stop words and repeats left out."""
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
        terms.append(phrase)
        if len(terms) >= MAX_QUERY_TERMS:
            break
    return terms


def _quote(phrase: str) -> str:
    return '"' + phrase.replace('"', '""') + '"'


def fts_query(text: str, tokenizer: str = "unicode61") -> str:
    """An FTS5 MATCH expression for a question: an OR of its words as quoted phrases.

    Stop words are dropped (when a word is one token); with the trigram tokenizer words
    under three characters are too (they cannot match).  Empty when nothing is left.
    """
    return " OR ".join(_quote(t) for t in query_terms(text, tokenizer))


def _fold(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def is_name_in(word: str, text: str) -> bool:
    """Whether ``word`` stands in ``text`` as a name: capitalised wherever it occurs, and
    at least once inside a sentence ("Dr. Quispe", "-- Matthias Klose"; not "Battle" at
    a sentence's start beside "the battle"), diacritics and case folded for the match."""
    folded = _fold(text)
    inside = False
    for m in re.finditer(r"(?<!\w)" + re.escape(_fold(word)) + r"(?!\w)", folded, re.I):
        if _in_address(folded, m.start(), m.end()):
            continue  # "<scott@kitterman.com>": an address says nothing of the case
        if not folded[m.start()].isupper():
            return False
        before = folded[: m.start()].rstrip()
        if (
            (before and before[-1] not in ".!?\"'")
            or (before.endswith(".") and _ABBREVIATION.search(before))
            or (not before and folded[m.end() : m.end() + 1] in (",", ":"))  # "Quispe, Rosa"
        ):
            inside = True
    return inside


def _in_address(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is part of an e-mail address or a host name."""
    before, after = text[max(start - 1, 0) : start], text[end : end + 2]
    return before in ("@", ".") or after[:1] == "@" or (after[:1] == "." and after[1:].isalnum())


_ABBREVIATION = re.compile(r"(?:^|\s)[A-Z][a-z]{0,3}\.$")


@dataclass(frozen=True, slots=True)
class RareTerm:
    phrase: str  # as an FTS5 phrase (unquoted)
    chunks: int  # how many chunks of the store have it (its document frequency)


def term_counts(store: DocumentStore, text: str) -> list[RareTerm]:
    """The question's words (:func:`query_terms`) with how many chunks of the store have
    each (FTS5's own index, counted up to ``COUNT_CAP``); words in no chunk left out.
    Digit groups of a number written apart are left to :func:`identifier_query`."""
    lexical = getattr(store, "lexical", None)
    if lexical is None or not text.strip():
        return []
    covered = [(a, b) for a, b, _d in _digit_runs(text)]
    if covered:  # the groups of "947 304 7982" are no words of their own
        text = "".join(
            " " if any(a <= i < b for a, b in covered) else c for i, c in enumerate(text)
        )
    terms = query_terms(text, store.fts_tokenizer)
    out = []
    with lexical.lock:
        for phrase in terms:
            try:
                row = lexical.conn.execute(
                    "SELECT COUNT(*) FROM (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? "
                    "LIMIT ?)",
                    (_quote(phrase), COUNT_CAP),
                ).fetchone()
            except sqlite3.OperationalError:
                continue
            if int(row[0]) >= 1:
                out.append(RareTerm(phrase, int(row[0])))
    return out


def rare_cutoff(total: int) -> int:
    return max(RARE_MIN_DF, int(RARE_SHARE * total))


def rare_terms(store: DocumentStore, text: str) -> list[RareTerm]:
    """The question's words that few chunks of the store contain (at most ``RARE_MIN_DF``
    chunks, or ``RARE_SHARE`` of them): a surname, a place, a drug, a word of a title --
    the words that say which document is meant.  Words in no chunk are not rare, they are
    absent."""
    cap = rare_cutoff(store.chunk_count()) if getattr(store, "lexical", None) else 0
    return [t for t in term_counts(store, text) if t.chunks <= cap]


def coverage(
    store: DocumentStore, collection: str, terms: list[RareTerm], chunks: list[int]
) -> float:
    """How much of the question the best of ``chunks`` (BM25's first few) contains: the
    share of the question's idf (ln(N / df)) in its words that chunk has.  Near 1: the
    question is in the words of a passage (lexical evidence is good); near 0: a paraphrase."""
    total = max(store.chunk_count(), 1)
    terms = [t for t in terms if 2 * t.chunks < total]  # in half the chunks: says nothing
    if not terms or not chunks:
        return 0.0
    idf = {t.phrase: math.log(1.0 + total / t.chunks) for t in terms}
    whole = sum(idf.values())
    best = 0.0
    for h in store.hits(collection, [(c, 0.0) for c in chunks]):
        words = " " + " ".join(_TOKEN.findall(_fold(h.text).lower())) + " "
        have = sum(v for p, v in idf.items() if f" {_fold(p)} " in words)
        best = max(best, have / whole)
    return best


def _ranks(pairs: Iterable[tuple[int, float]]) -> dict[int, tuple[int, float]]:
    return {cid: (rank, score) for rank, (cid, score) in enumerate(pairs, 1)}


def _minmax(values: dict[int, float]) -> dict[int, float]:
    if not values:
        return {}
    lo, hi = min(values.values()), max(values.values())
    span = hi - lo
    return {k: (v - lo) / span if span > 0 else 1.0 for k, v in values.items()}


TIER_NAMED = True


TIER_MODE = "names"
COVERAGE_CHUNKS = 5  # BM25's first chunks whose coverage of the question sets the weight
COVERAGE = 0.6  # the share of the question's idf a passage must have for BM25's weight


def _tier(cid: int, rare_match: dict[int, int], names: dict[int, int], idents: set[int]) -> int:
    if TIER_MODE == "count":
        return 1000 * (cid in idents) + rare_match.get(cid, 0)
    return 1000 * (cid in idents) + names.get(cid, 0)


MAX_LOOKUP_WORDS = 3  # "find the note for quispe": a lookup, the name is what it says


def _as_names(text: str, rare: list[RareTerm]) -> list[RareTerm]:
    """The rare words the question may mean as names: those it capitalises inside the
    sentence, and -- in a short lookup ("find the note for quispe") -- any, whatever the
    case.  A long question that writes "the fallen towers" in lower case does not mean
    the Twin Towers."""
    words = [w for w in _WORD.finditer(text)]
    capital = {
        t.lower()
        for i, w in enumerate(words)
        if i > 0 and w.group()[:1].isupper()
        for t in _TOKEN.findall(_fold(w.group()))
    }
    content = [t for t in query_terms(text) if not any(c.isdigit() for c in t)]
    if len(content) <= MAX_LOOKUP_WORDS:
        return rare
    return [t for t in rare if all(_fold(w) in capital for w in t.phrase.split())]


def _names(
    store: DocumentStore, collection: str, rare: list[RareTerm], chunks: set[int]
) -> dict[int, int]:
    """Per chunk of ``chunks``: how many of the rare words stand in it as a name or have
    digits (what the question names, whatever the chunk's cosine)."""
    if not chunks:
        return {}
    hits = store.hits(collection, [(c, 0.0) for c in sorted(chunks)])
    out: dict[int, int] = {}
    for h in hits:
        for term in rare:
            words = term.phrase.split()
            named = any(ch.isdigit() for ch in term.phrase) or all(
                is_name_in(w, h.text) for w in words
            )
            if named and all(_fold(w).lower() in _fold(h.text).lower() for w in words):
                out[h.chunk_id] = out.get(h.chunk_id, 0) + 1
    return out


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
    from companion.rag import spelling  # it reads this module's word parsing

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
    first: list[tuple[int, float]] = []
    rare_match: dict[int, int] = {}  # chunk -> how many of the question's rare words it has
    names: dict[int, int] = {}  # chunk -> how many of them it writes as names
    covered = 0.0
    if opts.mode in ("bm25", "hybrid"):
        depth = n if within is None else max(n, 1000)
        # Chunks that contain one of the question's identifiers rank first (by BM25), then
        # those with its rare words (few chunks have them: a surname, a title's word), then
        # the rest of the full query's matches: a common word the question also uses (BM25
        # adds the words' scores) never outranks the chunk with the e-mail address.
        ident = identifier_query(query_text, store.fts_tokenizer)
        first = store.lexical_ranking(collection, ident, depth) if ident else []
        # the chunks of a document whose name has what the question names come first too
        by_name = store.chunk_ids(spelling.named_documents(store, collection, query_text))
        if by_name:
            have_first = {c for c, _s in first}
            first += [(c, 0.0) for c in by_name if c not in have_first]
        counts = term_counts(store, query_text)
        cap = rare_cutoff(store.chunk_count()) if counts else 0
        rare = [t for t in counts if t.chunks <= cap]
        for term in rare:
            for c, _s in store.lexical_ranking(collection, _quote(term.phrase), term.chunks):
                rare_match[c] = rare_match.get(c, 0) + 1
        rare_q = " OR ".join(_quote(t.phrase) for t in rare)
        second = store.lexical_ranking(collection, rare_q, depth) if rare_q else []
        rest = store.lexical_ranking(collection, fts_query(query_text, store.fts_tokenizer), depth)
        top = max((sc for _c, sc in rest), default=0.0) + 1.0
        top2 = top + max((sc for _c, sc in second), default=0.0) + 1.0
        ranked, have = [], set()
        for tier, offset in ((first, top2), (second, top), (rest, 0.0)):
            ranked += [(c, sc + offset) for c, sc in tier if c not in have]
            have |= {c for c, _s in tier}
        if within is not None:
            ranked = [p for p in ranked if p[0] in within]
            rare_match = {c: m for c, m in rare_match.items() if c in within}
        lexical = _ranks(ranked[:n])
        names = _names(store, collection, _as_names(query_text, rare), set(rare_match))
        strict = identifier_query(query_text, store.fts_tokenizer, strict=True)
        if strict and opts.min_score is not None:
            named = {c for c, _s in store.lexical_ranking(collection, strict, depth)}
        if opts.min_score is not None:  # a name the question gives passes too
            named |= set(names) | set(by_name)
        if within is not None:
            named &= within
        if opts.mode == "hybrid" and not (first or names):
            covered = coverage(store, collection, counts, [c for c, _s in rest][:COVERAGE_CHUNKS])
    named_question = bool(first) or bool(names)
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
        # The lexical ranking's share is large when the question names an identifier or a
        # name few chunks have, or when a passage has most of the question's words (by
        # idf); for a paraphrase, whose words no passage has together, the vectors decide.
        weight = opts.weight if named_question or covered >= COVERAGE else opts.common_weight
        vec_n = _minmax({c: s for c, (_r, s) in vector.items()})
        lex_n = _minmax({c: s for c, (_r, s) in lexical.items()})
        for cid in set(vec_n) | set(lex_n):
            fused[cid] = weight * vec_n.get(cid, 0.0) + (1 - weight) * lex_n.get(cid, 0.0)
    cosine = {cid: s for cid, (_r, s) in vector.items()}
    missing = [cid for cid in fused if cid not in cosine]
    if missing:
        for cid, vec in store.vectors_of(missing).items():
            cosine[cid] = float(vec @ q) if vec.shape == q.shape else 0.0
    if TIER_NAMED and opts.mode == "hybrid" and named_question:
        # what has the question's identifier, then more of the names it gives, comes first
        idents = {c for c, _s in first}
        order = sorted(fused, key=lambda c: (-_tier(c, rare_match, names, idents), -fused[c], c))
    else:
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
