"""A collection's one-time DP digest: the statements many of its documents share, released once.

Every document contributes the distinct statements of its text (:func:`statements`: its
sentences, spaces collapsed, standalone numbers written ``[number]``, at most
``max_statements`` of them, in document order) -- a function of that document alone.
Each statement's count is the number of documents that contribute it, each document
weighing ``w = 1 / sqrt(max_statements)``; Gaussian noise of ``sigma`` is added to every
count, and a statement is released when its noisy count reaches ``tau``
(:func:`calibrate`).  That is the Gaussian thresholding of differentially private set
union (Gopi et al., ICML 2020; Korolova et al., WWW 2009), and the proof is the usual:

* adding or removing one document moves the counts of at most ``max_statements``
  statements by ``w`` each, so the vector of counts of the statements both neighbours
  have moves by at most ``w sqrt(max_statements) = 1`` in L2: a Gaussian mechanism of
  sensitivity 1, ``(epsilon, delta)`` at ``sigma`` (RDP converted at ``delta``), and the
  threshold is post-processing;
* a statement only one neighbour has is in the added document alone (count ``w``);
  there are at most ``max_statements`` of them and each passes with probability
  ``P[N(0, sigma^2) >= tau - w] = threshold_delta / max_statements``: together at most
  ``threshold_delta``.

So the digest is ``(epsilon, delta + threshold_delta)``-DP for adding or removing one
document of the collection.  It is paid once, by every document that contributes
(``DocumentBudget.charge_digest``): the Gaussian part's RDP at the filter's order, plus a
surcharge for ``threshold_delta`` (:func:`threshold_surcharge`).  A document whose
budget cannot pay contributes nothing (the individual filter's rule).  Everything after
the release -- which statements a question reads, the public model's answer from them,
the counts shown rounded as "about N documents" -- is post-processing: it costs no
budget however many questions use it (docs/methods/dprag.md, "The collection's digest").

What a digest can answer: a statement written the same way (numbers aside) in many
documents -- about ``tau / w`` of them, 32 at the defaults -- such as a clinic's standing
treatment for a condition or a device's error code in templated notes.  What it cannot:
anything said in a few documents, anything said in many documents in different words,
and anything that needs two statements of different documents put together.
"""

from __future__ import annotations

import json
import math
import re
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from companion.decoding.base import calibrate_sigma
from companion.decoding.defenses.dp_answer import THRESHOLD_DELTA_CAP, tail_quantile
from companion.decoding.noise import NoiseSource, check_source
from py_core.accounting import DEFAULT_DELTA, GaussianEvent
from py_core.errors import InvalidParameterError
from py_core.validate import check_count, check_delta, check_positive

ADD_REMOVE_COLLECTION_DOCUMENT = "adding or removing one document of the collection"
# The share of a document's delta every other thresholded charge may hold: dp_answer's
# surcharge caps its threshold deltas there (THRESHOLD_DELTA_CAP).
OTHER_THRESHOLD_SHARE = THRESHOLD_DELTA_CAP
NUMBER = "[number]"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_STANDALONE_NUMBER = re.compile(r"(?<![\w\-])[+\-]?\d+(?:[.,]\d+)*(?![\w\-])")


@dataclass(frozen=True, slots=True)
class DigestConfig:
    """The digest's release: ``epsilon`` per document of the collection, once."""

    epsilon: float = 3.0
    delta: float = DEFAULT_DELTA
    threshold_delta: float = 1e-10
    max_statements: int = 8  # statements one document contributes
    max_words: int = 40  # a longer sentence contributes its first 40 words

    def __post_init__(self) -> None:
        check_positive(self.epsilon, "epsilon")
        check_delta(self.delta)
        check_delta(self.threshold_delta)
        check_count(self.max_statements, "max_statements", minimum=1)
        check_count(self.max_words, "max_words", minimum=3)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DigestConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidParameterError(
                f"unknown digest parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class Calibration:
    sigma: float  # Gaussian noise on each statement's weighted count
    tau: float  # the noisy weighted count a statement needs
    weight: float  # one document's weight on each statement it contributes

    @property
    def documents_needed(self) -> float:
        """The documents at which a statement is released half the time."""
        return self.tau / self.weight

    def event(self) -> GaussianEvent:
        return GaussianEvent(self.sigma, 1.0)


def calibrate(config: DigestConfig) -> Calibration:
    sigma = calibrate_sigma(float(config.epsilon), 1.0, float(config.delta), 1)
    weight = 1.0 / math.sqrt(config.max_statements)
    tau = weight + sigma * tail_quantile(config.threshold_delta / config.max_statements)
    return Calibration(sigma, tau, weight)


def statements(text: str, max_statements: int = 8, max_words: int = 40) -> list[str]:
    """A document's contribution: its first ``max_statements`` distinct sentences,
    NFKC, spaces collapsed, standalone numbers as ``[number]`` (a dose or a count varies
    from note to note; a code such as ``H-36`` or ``MRN-123`` is kept), at most
    ``max_words`` words each; sentences of fewer than three words are skipped."""
    out: list[str] = []
    seen: set[str] = set()
    for raw in _SENTENCE_END.split(unicodedata.normalize("NFKC", text)):
        words = _STANDALONE_NUMBER.sub(NUMBER, raw).split()
        if len(words) < 3:
            continue
        sentence = " ".join(words[:max_words])
        if sentence in seen:
            continue
        seen.add(sentence)
        out.append(sentence)
        if len(out) == max_statements:
            break
    return out


@dataclass(frozen=True, slots=True)
class Statement:
    text: str
    documents: int  # the released noisy count / weight, rounded (post-processing)


def release(
    contributions: Sequence[Sequence[str]], config: DigestConfig, generator: NoiseSource
) -> list[Statement]:
    """The statements whose noisy count reaches ``tau``, most documents first.
    ``contributions``: each contributing document's :func:`statements` (at most
    ``max_statements`` each: checked).  Only the released statements and their rounded
    noisy counts leave this function."""
    generator = check_source(generator)
    cal = calibrate(config)
    counts: dict[str, float] = {}
    for items in contributions:
        keys = set(items)  # the text itself is the key: nothing else of a document leaves
        if len(keys) > config.max_statements:
            raise InvalidParameterError(
                f"a document contributed {len(keys)} statements; at most "
                f"{config.max_statements} (the sensitivity rests on it)"
            )
        for key in keys:
            counts[key] = counts.get(key, 0.0) + cal.weight
    if not counts:
        return []
    order = sorted(counts)  # a fixed order: the draw does not depend on the documents' order
    values = torch.tensor([counts[k] for k in order], dtype=torch.float64)
    noisy = values + cal.sigma * generator.normal((len(order),), values)
    out = [
        Statement(k, max(1, round(float(n) / cal.weight)))
        for k, n in zip(order, noisy.tolist(), strict=True)
        if n >= cal.tau
    ]
    return sorted(out, key=lambda s: (-s.documents, s.text))


def threshold_surcharge(config: DigestConfig, order: float, delta: float) -> float:
    """The RDP that pays the digest's ``threshold_delta`` in a document's filter.

    The filter converts a spend to ``(epsilon, delta)`` at ``delta`` minus every threshold
    delta the document has paid; a share ``s`` of delta costs ``-log(1 - s) / (order - 1)``.
    That cost is convex, so the digest's share ``b`` costs at most ``b / (1 - a - b)`` on top
    of the share ``a < OTHER_THRESHOLD_SHARE`` the document's other charges may hold."""
    b = float(config.threshold_delta) / float(delta)
    room = 1.0 - OTHER_THRESHOLD_SHARE - b
    if room <= 0:
        return math.inf
    return b / room / (order - 1.0)


@dataclass(frozen=True, slots=True)
class Digest:
    """A released digest as it is kept in the store (all of it DP output)."""

    collection: str
    statements: list[Statement]
    config: DigestConfig
    created: float
    contributors: int  # documents that paid for it (public: the owner's act)
    skipped: int  # documents whose budget could not pay

    def to_dict(self) -> dict[str, Any]:
        cal = calibrate(self.config)
        return {
            "collection": self.collection,
            "statements": [{"text": s.text, "documents": s.documents} for s in self.statements],
            "config": self.config.to_dict(),
            "created": self.created,
            "contributors": self.contributors,
            "skipped": self.skipped,
            "guarantee": {
                "relation": ADD_REMOVE_COLLECTION_DOCUMENT,
                "epsilon": self.config.epsilon,
                "delta": self.config.delta + self.config.threshold_delta,
                "note": (
                    f"Released once at epsilon {self.config.epsilon:g} per document: each "
                    "statement here is written the same way in many documents (about "
                    f"{cal.documents_needed:.0f} or more). Answers read from it cost no "
                    "budget. It cannot answer what only a few documents say."
                ),
            },
        }

    @classmethod
    def from_json(cls, raw: str) -> Digest:
        data = json.loads(raw)
        return cls(
            collection=str(data["collection"]),
            statements=[Statement(str(s["text"]), int(s["documents"])) for s in data["statements"]],
            config=DigestConfig.from_dict(dict(data["config"])),
            created=float(data["created"]),
            contributors=int(data["contributors"]),
            skipped=int(data["skipped"]),
        )

    def to_json(self) -> str:
        data = self.to_dict()
        data.pop("guarantee")
        return json.dumps(data, ensure_ascii=False, sort_keys=True)


def meta_key(collection: str) -> str:
    return f"digest:{collection}"


def auto_key(collection: str) -> str:
    """Set when the collection first had a digest: guests' questions build one only before."""
    return f"digest-auto:{collection}"


def new_digest(
    collection: str,
    contributions: Sequence[Sequence[str]],
    config: DigestConfig,
    generator: NoiseSource,
    skipped: int,
) -> Digest:
    return Digest(
        collection,
        release(contributions, config, generator),
        config,
        time.time(),
        len(contributions),
        skipped,
    )


def document_text(conn: Any, document_id: int) -> str:
    """A document's text again from its chunks (they overlap: each adds what lies after
    the previous one's end, by the character offsets they were cut at)."""
    rows = conn.execute(
        'SELECT text, start, "end" FROM chunks WHERE document_id = ? ORDER BY idx',
        (int(document_id),),
    ).fetchall()
    parts: list[str] = []
    reached = -1
    for r in rows:
        text, start, end = str(r["text"]), int(r["start"]), int(r["end"])
        if end <= reached:
            continue
        skip = max(0, reached - start)
        parts.append(("\n" if parts and skip == 0 else "") + text[skip:])
        reached = end
    return "".join(parts)


def digest_charge(config: DigestConfig, flt: Any) -> float:
    """What the digest charges each contributing document, in RDP at the filter's order."""
    return flt.charge_of([calibrate(config).event()]) + threshold_surcharge(
        config, flt.order, flt.delta
    )


def estimate(budget: Any, collection: str, config: DigestConfig) -> dict[str, Any]:
    """What building the digest would charge, and how many documents could pay (nothing
    is charged)."""
    flt = budget.filter
    charge = digest_charge(config, flt)
    rows = budget.store.budget_rows(collection)
    payers = sum(1 for r in rows if flt.admits(float(r["spent_rdp"]), charge))
    cal = calibrate(config)
    return {
        "collection": collection,
        "epsilon": config.epsilon,
        "charge_rdp": charge,
        "charge_fraction": charge / flt.budget,
        "documents": len(rows),
        "documents_that_can_pay": payers,
        "documents_needed_per_statement": round(cal.documents_needed, 1),
        "note": (
            f"Building the digest charges each of the {payers} documents that can pay "
            f"{100 * charge / flt.budget:.0f}% of its lifetime budget, once. It releases "
            f"the sentences written the same way in about {cal.documents_needed:.0f} or "
            "more documents; guests' questions it speaks to are then answered from it "
            "at no further cost."
        ),
    }


def build_digest(
    budget: Any,
    collection: str,
    config: DigestConfig,
    generator: NoiseSource,
    *,
    label: str = "digest",
    once: bool = False,
) -> Digest | None:
    """Charge every document of ``collection`` the digest's cost and release it, in one
    budget transaction (the charges and the digest are written together or not at all).
    A document that cannot pay is skipped: it contributes nothing.  ``once`` (the guests'
    own build): the digest the collection has is returned as it is, and a collection
    that had one before (since forgotten) gets none -- None, nothing charged; only the
    owner builds it again."""
    flt = budget.filter
    charge = digest_charge(config, flt)
    if not math.isfinite(charge) or charge > flt.budget:
        raise InvalidParameterError(
            f"a digest at epsilon {config.epsilon:g} costs more than a document's whole "
            f"budget (epsilon {flt.epsilon:g}); ask for a smaller epsilon"
        )
    with budget.store.budget_transaction() as tx:
        conn = tx.conn
        if once:
            kept = tx.meta(meta_key(collection))
            if kept is not None:
                return Digest.from_json(kept)
            if tx.meta(auto_key(collection)) is not None:
                return None
        ids = [
            int(r[0])
            for r in conn.execute(
                "SELECT d.id FROM documents d JOIN collections c ON c.id = d.collection_id "
                "WHERE c.name = ? ORDER BY d.id",
                (collection,),
            ).fetchall()
        ]
        docs = tx.document_shas(ids)
        spent = tx.spent([row["sha256"] for row in docs.values()])
        contributions: list[list[str]] = []
        skipped = 0
        for doc_id in ids:  # a collection holds the same bytes once (UNIQUE)
            sha = str(docs[doc_id]["sha256"])
            used, answers = spent.get(sha, (0.0, 0))
            if not flt.admits(used, charge):
                skipped += 1
                continue
            tx.set_spent(
                sha,
                kind="charge",
                spent_after=used + charge,
                answers=answers + 1,
                detail={"digest": config.to_dict(), "order": flt.order},
                document_id=doc_id,
                answer_id=label,
                charge_rdp=charge,
            )
            text = document_text(conn, doc_id)
            contributions.append(statements(text, config.max_statements, config.max_words))
        digest = new_digest(collection, contributions, config, generator, skipped)
        for key, value in ((meta_key(collection), digest.to_json()), (auto_key(collection), label)):
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
    return digest


def load_digest(store: Any, collection: str) -> Digest | None:
    """The collection's digest, None if it has none; one that cannot be read is not served."""
    ledger = store.ledger
    with ledger.lock:
        row = ledger.conn.execute(
            "SELECT value FROM meta WHERE key = ?", (meta_key(collection),)
        ).fetchone()
    raw = None if row is None else str(row["value"])
    if raw is None:
        return None
    try:
        return Digest.from_json(raw)
    except (ValueError, KeyError, TypeError, InvalidParameterError):
        return None


def drop_digest(store: Any, collection: str, *, collection_deleted: bool = False) -> bool:
    """Forget the collection's digest (a document of it was deleted: it may quote it);
    ``collection_deleted``: also that guests built it once (a new collection of the same
    name is another collection)."""
    with store.budget_transaction() as tx:
        cur = tx.conn.execute("DELETE FROM meta WHERE key = ?", (meta_key(collection),))
        if collection_deleted:
            tx.conn.execute("DELETE FROM meta WHERE key = ?", (auto_key(collection),))
    return bool(cur.rowcount)
