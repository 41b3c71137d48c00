"""A lifetime privacy budget per document: Feldman and Zrnic's individual Rényi filter.

Every answer under a formal decoding defense charges the documents it may
depend on the RDP, at the filter's one fixed order, of the mechanism as it was
calibrated before generation (:meth:`companion.decoding.base.Defense.calibrated_events`);
a document is admitted to an answer only while its spend plus that charge stays
within its budget, so a spend never exceeds the budget and the whole sequence of
answers is ``(epsilon, delta)``-DP for each document (docs/methods/decoding.md,
"Per-document budget").  The arithmetic is :class:`py_core.accounting.IndividualRdpFilter`;
the state lives in the SQLite store (``budget_spend`` and the append-only
``budget_log``, one transaction per answer) and is changed only by charges and by
the owner's explicit, logged resets.

Which documents an answer may depend on: under a formal defense retrieval is
*thresholded* -- the candidates are the admitted documents with a chunk whose
cosine score reaches ``threshold``, every candidate is charged, and the context
is the top-k chunks among the candidates.  Whether a document is charged then
depends only on that document and the (public) question, never on the others,
which is what the filter's proof needs (plain top-k would let one document's
presence change another's spend, and so what later answers retrieve).

``is_guest`` is the one switch between the owner's and a guest's view: both are
filtered alike under a formal defense (the owner is told which documents were
left out); under a defense without a guarantee nothing is charged, guests never
get a document that could no longer pay for a reference answer, and the owner
gets every document with a warning.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from companion.rag.retrieval import RetrievalOptions, named_chunks, retrieve
from py_core.accounting import (
    GaussianEvent,
    IndividualRdpFilter,
    SampledGaussianEvent,
    filter_order,
)
from py_core.errors import InvalidParameterError

if TYPE_CHECKING:
    from companion.rag.service import RagService
    from companion.rag.store import BudgetTransaction, DocumentStore, Hit
    from companion.settings import Settings

__all__ = ["Admission", "DocumentBudget", "DocumentCharge", "planned_charge"]


class UnknownDocumentError(InvalidParameterError):
    """A reset named documents the store does not hold."""


@dataclass(frozen=True, slots=True)
class DocumentCharge:
    """What one answer did to one document's budget (figures after the charge)."""

    document_id: int
    document: str
    charge_rdp: float
    charge_fraction: float  # of the document's budget
    spent_rdp: float
    spent_fraction: float
    spent_epsilon: float  # the tightest epsilon (at the budget's delta) of the spend so far
    remaining_rdp: float
    remaining_fraction: float
    answers: int
    in_context: bool  # among the top-k chunks (every candidate is charged)
    # How many more answers like this one the document can pay for, and that in words.
    answers_left: int = 0
    remaining_words: str = ""


@dataclass(slots=True)
class Admission:
    """The context of one answer and what it charged; ``to_dict`` is ``veil.budget``."""

    hits: list[Hit]
    defense: str
    formal: bool
    filter: dict[str, Any]
    charge_rdp: float | None = None
    answer_epsilon: float | None = None  # the defense's calibrated epsilon for this answer
    threshold: float | None = None
    charged: list[DocumentCharge] = field(default_factory=list)
    excluded: list[dict[str, Any]] = field(default_factory=list)
    exhausted_in_context: list[dict[str, Any]] = field(default_factory=list)
    # Each context document's key (its content's SHA-256): what dp_vote groups it by, so a
    # document's group never depends on the order documents were added in.
    document_keys: dict[int, str] = field(default_factory=dict)
    # How the context was retrieved: mode, relevance threshold, chunks found; with a
    # "nothing" sentence when no chunk reached the threshold (the page shows it).
    retrieval: dict[str, Any] | None = None
    # Poisson subsampling (a defense's sample_rate < 1): how many admitted documents their
    # coins kept (None: no sampling).  The owner's to see; a guest's depends on the store.
    sampled: int | None = None

    @property
    def charge_fraction(self) -> float | None:
        if self.charge_rdp is None:
            return None
        return min(math.inf, self.charge_rdp / self.filter["budget_rdp"])

    @property
    def covered(self) -> bool:
        """Whether the answer's tokens are inside every context document's budget."""
        return self.formal and self.charge_rdp is not None and math.isfinite(self.charge_rdp)

    def note(self, *, is_guest: bool = False) -> str:
        """The budget's sentence for this answer (a guest's names no document and no count)."""
        if not self.formal:
            text = (
                f"The {self.defense} defense gives no differential-privacy guarantee, so this "
                "answer is not covered by the documents' lifetime budgets and charged nothing."
            )
            if self.exhausted_in_context and not is_guest:
                names = ", ".join(d["document"] for d in self.exhausted_in_context)
                text += f" Documents whose budget is spent were used anyway: {names}."
            return text
        if not self.covered:
            return (
                f"The {self.defense} defense states no calibrated cost, so no document could "
                "pay for this answer: it was given no context."
            )
        share = (
            f"{self.charge_fraction:.2%} of its lifetime budget of (ε {self.filter['epsilon']:g}, "
            f"δ {self.filter['delta']:g}) ({self.charge_rdp:.4g} of RDP at order "
            f"{self.filter['order']:g})"
        )
        if is_guest:
            return (
                f"This answer (ε {self.answer_epsilon:.3g} calibrated) charged every document it "
                f"may depend on {share}; a document whose budget is spent is no longer used. "
                + self.lifetime_words()
            )
        text = (
            f"This answer (ε {self.answer_epsilon:.3g} calibrated) charged each of the "
            f"{len(self.charged)} document(s) with a chunk scoring at least {self.threshold:g} "
            f"{share}."
        )
        if self.excluded:
            text += (
                f" {len(self.excluded)} document(s) had too little budget left for it and were "
                "not retrieved."
            )
        return text

    def lifetime_words(self) -> str:
        """A guest's budget in words: public (the budget and this answer's charge only).

        How much a document has left depends on which earlier questions it was relevant
        to -- on its content -- so a guest is told what a document can pay for in its whole
        lifetime, not what it has left (the owner sees that, per document)."""
        if self.charge_rdp is None or not math.isfinite(self.charge_rdp) or self.charge_rdp <= 0:
            return ""
        n = int(self.filter["budget_rdp"] // self.charge_rdp)
        return (
            f"Each document can take part in {answers_in_words(n, lifetime=True)} like this "
            "one in its lifetime; a repeated or reworded question already answered costs "
            "nothing."
        )

    def to_dict(self, *, is_guest: bool) -> dict[str, Any]:
        finite = self.charge_rdp is not None and math.isfinite(self.charge_rdp)
        common = {
            "covered": self.covered,
            "defense": self.defense,
            "formal": self.formal,
            "charge_rdp": self.charge_rdp if finite else None,  # JSON has no infinity
            "charge_fraction": self.charge_fraction if finite else None,
            "answer_epsilon": self.answer_epsilon,
            "order": self.filter["order"],
        }
        if self.retrieval is not None:
            common["retrieval"] = self.retrieval
        if is_guest:  # which documents were retrieved, or are spent, is not a guest's to see
            return {**common, "note": self.note(is_guest=True)}
        return {
            **common,
            "budget_epsilon": self.filter["epsilon"],
            "budget_delta": self.filter["delta"],
            "budget_rdp": self.filter["budget_rdp"],
            "threshold": self.threshold,
            "documents": [asdict(c) for c in self.charged],
            "excluded": self.excluded,
            "exhausted_in_context": self.exhausted_in_context,
            **({"sampled": self.sampled} if self.sampled is not None else {}),
            "note": self.note(),
        }


def answers_in_words(n: int, *, lifetime: bool = False) -> str:
    """ "about 3 more answers on this topic" (or, for a whole lifetime, "about 3 answers")."""
    more = "" if lifetime else " more"
    topic = "" if lifetime else " on this topic"
    if n <= 0:
        return (
            "no answers"
            if lifetime
            else "no more answers: its budget for answers like this is spent"
        )
    if n == 1:
        return f"1{more} answer{topic}"
    return f"about {n}{more} answers{topic}"


def top_documents(candidates: list[Hit], k: int, keys: dict[int, str]) -> list[Hit]:
    """The context of a formal answer: the ``k`` best documents, each as one unit (its best
    chunk), best first.

    Each chunk's place depends on that chunk and the question alone -- whether it holds an
    identifier the question names, then its exact cosine, then its document's content
    hash -- never on the other documents (no corpus statistics such as BM25's IDF or
    average length, no score normalised over the candidates, no depth cap).  So a document
    that is not a candidate changes nothing (it is charged nothing), and adding or
    removing one candidate document moves at most one other document in or out of the top
    ``k`` (what dp_vote's store-level accounting relies on).
    """
    best: dict[int, Hit] = {}
    for hit in candidates:
        held = best.get(hit.document_id)
        if held is None or _place(hit, keys) < _place(held, keys):
            best[hit.document_id] = hit
    return sorted(best.values(), key=lambda h: _place(h, keys))[:k]


def _place(hit: Hit, keys: dict[int, str]) -> tuple[bool, float, str, int]:
    return (not hit.names_identifier, -hit.score, keys.get(hit.document_id, ""), hit.index)


def planned_charge(defense: Any, max_tokens: int, flt: IndividualRdpFilter) -> float | None:
    """The RDP at the filter's order of an answer, as calibrated before generation.

    ``defense`` is a :class:`companion.decoding.config.DefenseConfig`.  None for a
    defense without a formal guarantee (nothing to charge); infinity for a formal
    one that states no calibrated events (no document can pay: fail closed).
    """
    entry = defense.defense
    if not entry.guarantee.formal:
        return None
    # adding or removing one document of the store: what its lifetime must pay for
    events = entry.store_events(defense.params, max_tokens)
    if not events or not all(isinstance(e, GaussianEvent | SampledGaussianEvent) for e in events):
        return math.inf  # the figures shown (spent_epsilon) assume Gaussian charges
    charge = flt.charge_of(events)
    if entry.surcharge is not None:  # a delta of the mechanism's own, paid in RDP
        charge += entry.surcharge(defense.params, charge, flt.budget, flt.order, flt.delta)
    return charge


@cache
def _reference_events(max_tokens: int) -> tuple[Any, ...]:
    from companion.decoding.config import DefenseConfig

    ref = DefenseConfig.from_options("bounded")
    return tuple(ref.defense.calibrated_events(ref.params, max_tokens))


def sample_rate(defense: Any) -> float:
    """The defense's Poisson sampling rate of admitted documents (1: every one is read)."""
    return float(getattr(defense.params, "sample_rate", 1.0) or 1.0)


def poisson_sample(
    documents: Sequence[int], rate: float, coin: Callable[[], float] | None = None
) -> list[int] | None:
    """Each document kept with probability ``rate``, one coin each, independently (None when
    ``rate`` is 1: no coin is thrown).  The coins are independent uniform draws of the
    CSPRNG unless ``coin`` is given (a test's seeded one)."""
    if rate >= 1.0:
        return None
    draw = coin or secrets.SystemRandom().random
    return [d for d in sorted(documents) if draw() < rate]


class DocumentBudget:
    """The store's per-document filter: admission, charges, the owner's view and resets.

    The filter's ``(epsilon, delta)`` and order are fixed when a store is first
    used (recorded in ``meta`` and as the log's ``setup`` row) and never change
    afterwards: settings that ask for another budget are reported, not applied.
    """

    def __init__(
        self,
        store: DocumentStore,
        *,
        epsilon: float,
        delta: float,
        threshold: float,
        reference_max_tokens: int = 256,
    ) -> None:
        self.store = store
        self.threshold = float(threshold)
        self.configured = (float(epsilon), float(delta))
        with store.budget_transaction() as tx:
            saved = tx.meta("budget_epsilon")
            if saved is None:
                order = filter_order(epsilon, delta)
                self.filter = IndividualRdpFilter(epsilon, delta, order)
                for key, value in (("epsilon", epsilon), ("delta", delta), ("order", order)):
                    tx.set_meta(f"budget_{key}", repr(float(value)))
                tx.log("setup", self._params())
            else:
                self.filter = IndividualRdpFilter(
                    float(saved),
                    float(tx.meta("budget_delta") or "nan"),
                    float(tx.meta("budget_order") or "nan"),
                )
        self.reference_rdp = min(
            self.filter.budget, self.filter.charge_of(_reference_events(reference_max_tokens))
        )

    @classmethod
    def for_settings(cls, store: DocumentStore, settings: Settings) -> DocumentBudget:
        return cls(
            store,
            epsilon=settings.document_budget_epsilon,
            delta=settings.document_budget_delta,
            threshold=settings.budget_relevance_threshold,
            reference_max_tokens=settings.default_max_tokens,
        )

    # ----------------------------------------------------------------- figures
    def _params(self) -> dict[str, Any]:
        f = self.filter
        return {"epsilon": f.epsilon, "delta": f.delta, "order": f.order, "budget_rdp": f.budget}

    def _epsilon(self, rdp: float) -> float:
        return self.filter.gaussian_epsilon_of(rdp)

    def _fraction(self, rdp: float) -> float:
        return rdp / self.filter.budget

    def exhausted(self, spent: float) -> bool:
        """Too little left for one reference answer (``bounded`` at its defaults)."""
        return not self.filter.admits(spent, self.reference_rdp)

    def describe(self, row: dict[str, Any]) -> dict[str, Any]:
        """One document's budget as the owner sees it."""
        spent = float(row["spent_rdp"])
        remaining = self.filter.remaining(spent)
        return {
            "document_id": row["document_id"],
            "document": row["document"],
            "collection": row["collection"],
            "sha256": row["sha256"],
            "spent_rdp": spent,
            "spent_fraction": self._fraction(spent),
            "spent_epsilon": self._epsilon(spent),
            "remaining_rdp": remaining,
            "remaining_fraction": self._fraction(remaining),
            "answers": int(row["answers"]),
            "answers_left": int(remaining // self.reference_rdp) if self.reference_rdp else 0,
            "exhausted": self.exhausted(spent),
            "updated": row["updated"],
        }

    def status(self, collection: str | None = None) -> dict[str, Any]:
        """The filter's parameters and every document's spend (the owner's ``GET /v1/budget``)."""
        eps, delta = self.configured
        mismatch = (eps, delta) != (self.filter.epsilon, self.filter.delta)
        return {
            "filter": {
                **self._params(),
                "reference_rdp": self.reference_rdp,
                "threshold": self.threshold,
                "settings_epsilon": eps,
                "settings_delta": delta,
                "settings_apply": not mismatch,
            },
            "documents": [self.describe(r) for r in self.store.budget_rows(collection)],
        }

    # ----------------------------------------------------------------- answers
    def retrieve(
        self,
        rag: RagService,
        query: str,
        collection: str,
        k: int,
        *,
        defense: Any,
        max_tokens: int,
        is_guest: bool,
        answer_id: str,
        options: RetrievalOptions | None = None,
        dry_run: bool = False,
        expect: Callable[[str], None] | None = None,
        coin: Callable[[], float] | None = None,
    ) -> Admission:
        """The answer's context, with its documents charged in one transaction, before generation.

        ``dry_run``: the same admission and figures, nothing written (the owner's preview
        of what a guest would receive: the owner may read the documents anyway).
        ``expect``: called, inside the transaction and before anything is written, with
        the admission's :func:`admission_fingerprint` -- what it is about to charge; an
        exception from it leaves every budget as it was (the owner's confirmed estimate).

        ``defense`` is a :class:`companion.decoding.config.DefenseConfig`; ``options``
        the retrieval mode and relevance threshold (companion/rag/retrieval.py; None:
        the service's).  Under a formal defense the candidates are every chunk whose
        cosine reaches the budget's threshold and, in the bm25 and hybrid modes, every
        chunk with an e-mail address or number the question names; each of their
        documents is charged.  ``options`` orders them (and its threshold can only
        narrow them).

        A defense with a ``sample_rate`` q < 1 (dp_answer) gets Poisson subsampling: each
        admitted document is kept with probability q by its own coin, thrown before the
        top-k documents are chosen (docs/methods/dprag.md, "Poisson subsampling"); every
        admitted document is charged, kept or not (its charge is the amplified one).
        ``coin``: a uniform draw on [0, 1); default the operating system's CSPRNG.
        """
        options = options or rag.retrieval
        admission = self._admit(
            rag,
            query,
            collection,
            k,
            options,
            defense=defense,
            max_tokens=max_tokens,
            is_guest=is_guest,
            answer_id=answer_id,
            dry_run=dry_run,
            expect=expect,
            coin=coin,
        )
        admission.retrieval = {
            "mode": options.mode,
            "min_score": options.min_score,
            "found": len(admission.hits),
        }
        if not admission.hits:
            admission.retrieval["note"] = (
                "No passage of the collection reached the relevance threshold; the answer "
                "has no context from the documents."
                if options.min_score is not None
                else "No passage of the collection was retrieved."
            )
        return admission

    def _admit(
        self,
        rag: RagService,
        query: str,
        collection: str,
        k: int,
        options: RetrievalOptions,
        *,
        defense: Any,
        max_tokens: int,
        is_guest: bool,
        answer_id: str,
        dry_run: bool = False,
        expect: Callable[[str], None] | None = None,
        coin: Callable[[], float] | None = None,
    ) -> Admission:
        charge = planned_charge(defense, max_tokens, self.filter)
        admission = Admission(
            hits=[], defense=defense.name, formal=charge is not None, filter=self._params()
        )
        vector = rag.embed([query])[0]
        if charge is None:
            self._unguaranteed(admission, query, vector, collection, k, options, is_guest=is_guest)
            return admission
        admission.charge_rdp = charge
        admission.answer_epsilon = defense.defense.calibrated_epsilon(defense.params, max_tokens)
        admission.threshold = self.threshold
        with self.store.budget_transaction() as tx:
            candidates = self.store.scored_chunks(collection, vector, self.threshold)
            if options.mode != "vector":  # and the chunks naming the question's id: charged too
                candidates += named_chunks(
                    self.store, query, vector, collection, {h.chunk_id for h in candidates}
                )
            docs = tx.document_shas([h.document_id for h in candidates])
            spent = tx.spent([row["sha256"] for row in docs.values()])
            admitted: list[int] = []
            for doc_id, row in docs.items():
                used, _answers = spent.get(row["sha256"], (0.0, 0))
                if self.filter.admits(used, charge):
                    admitted.append(doc_id)
                elif not is_guest:
                    admission.excluded.append(
                        {
                            "document_id": doc_id,
                            "document": row["name"],
                            "spent_rdp": used,
                            "remaining_rdp": self.filter.remaining(used),
                            "reason": "too little budget left for this answer",
                        }
                    )
            sampled = poisson_sample(admitted, sample_rate(defense), coin)
            admission.sampled = None if sampled is None else len(sampled)
            chosen = set(admitted if sampled is None else sampled)
            kept = [h for h in candidates if h.document_id in chosen]
            if options.min_score is not None:  # a request's threshold only narrows them
                kept = [h for h in kept if h.score >= options.min_score or h.names_identifier]
            keys = {doc_id: str(row["sha256"]) for doc_id, row in docs.items()}
            admission.hits = top_documents(kept, k, keys)
            admission.document_keys = {d: keys[d] for d in {h.document_id for h in kept}}
            in_context = {h.document_id for h in admission.hits}
            if expect is not None:  # may refuse the whole admission before any write
                expect(admission_fingerprint(charge, docs, spent, admitted))
            for doc_id in sorted(admitted):
                row = docs[doc_id]
                admission.charged.append(
                    self._charge(
                        tx,
                        row,
                        spent,
                        charge,
                        answer_id,
                        defense,
                        max_tokens,
                        in_context=doc_id in in_context,
                        dry_run=dry_run,
                    )
                )
        return admission

    def _charge(
        self,
        tx: BudgetTransaction,
        row: Any,
        spent: dict[str, tuple[float, int]],
        charge: float,
        answer_id: str,
        defense: Any,
        max_tokens: int,
        *,
        in_context: bool,
        dry_run: bool = False,
    ) -> DocumentCharge:
        sha = row["sha256"]
        used, answers = spent.get(sha, (0.0, 0))
        after = used + charge
        if not dry_run:  # a preview writes nothing
            tx.set_spent(
                sha,
                kind="charge",
                spent_after=after,
                answers=answers + 1,
                detail={
                    "defense": defense.to_dict(),
                    "max_tokens": max_tokens,
                    "order": self.filter.order,
                    "in_context": in_context,
                },
                document_id=int(row["id"]),
                document=row["name"],
                collection=row["collection"],
                answer_id=answer_id,
                charge_rdp=charge,
            )
        spent[sha] = (after, answers + 1)
        left = int(self.filter.remaining(after) // charge) if charge > 0 else 0
        return DocumentCharge(
            document_id=int(row["id"]),
            document=row["name"],
            charge_rdp=charge,
            charge_fraction=self._fraction(charge),
            spent_rdp=after,
            spent_fraction=self._fraction(after),
            spent_epsilon=self._epsilon(after),
            remaining_rdp=self.filter.remaining(after),
            remaining_fraction=self._fraction(self.filter.remaining(after)),
            answers=answers + 1,
            in_context=in_context,
            answers_left=left,
            remaining_words=answers_in_words(left),
        )

    def _unguaranteed(
        self,
        admission: Admission,
        query: str,
        vector: Any,
        collection: str,
        k: int,
        options: RetrievalOptions,
        *,
        is_guest: bool,
    ) -> None:
        """No guarantee, no charge: guests lose spent documents, the owner is warned."""
        store = self.store
        spent = {r["document_id"]: float(r["spent_rdp"]) for r in store.budget_rows(collection)}
        exhausted = {doc for doc, used in spent.items() if self.exhausted(used)}
        if not is_guest:
            admission.hits = retrieve(store, query, vector, collection, k, options)
            names = {
                h.document_id: h.document for h in admission.hits if h.document_id in exhausted
            }
            admission.exhausted_in_context = [
                {"document_id": doc, "document": name} for doc, name in sorted(names.items())
            ]
            return
        total = store.chunk_count(collection)
        n = k
        while True:
            hits = retrieve(store, query, vector, collection, n, options)
            kept = [h for h in hits if h.document_id not in exhausted]
            if len(kept) >= k or n >= total:
                admission.hits = kept[:k]
                return
            n = min(total, 2 * n)

    # ------------------------------------------------------------------- reset
    def reset(self, document_ids: list[int], reason: str) -> list[dict[str, Any]]:
        """Set the named documents' spend back to zero, logged; every id must exist."""
        with self.store.budget_transaction() as tx:
            docs = tx.document_shas(document_ids)
            missing = sorted(set(document_ids) - set(docs))
            if missing:
                raise UnknownDocumentError(f"no document with id(s) {missing}; nothing was reset")
            spent = tx.spent([row["sha256"] for row in docs.values()])
            done: set[str] = set()
            for doc_id in sorted(docs):
                row = docs[doc_id]
                if row["sha256"] in done:
                    continue
                done.add(row["sha256"])
                before, answers = spent.get(row["sha256"], (0.0, 0))
                tx.set_spent(
                    row["sha256"],
                    kind="reset",
                    spent_after=0.0,
                    answers=0,
                    detail={"reason": reason, "answers_before": answers, "spent_before": before},
                    document_id=doc_id,
                    document=row["name"],
                    collection=row["collection"],
                )
        wanted = set(document_ids)
        return [self.describe(r) for r in self.store.budget_rows() if r["document_id"] in wanted]


def admission_fingerprint(
    charge: float,
    docs: dict[int, Any],
    spent: dict[str, tuple[float, int]],
    admitted: list[int],
) -> str:
    """What one formal admission charges, as a short digest: the charge, and every candidate
    document (id, content hash, spend before, admitted or not).  Two admissions with the same
    digest charge the same documents the same amounts from the same spends; an estimate's
    digest (``POST /v1/budget/estimate``'s ``confirm``) sent back with the answer's request
    makes the answer charge exactly what the owner was shown, or nothing (409).
    """
    rows = []
    for doc_id in sorted(docs):
        sha = str(docs[doc_id]["sha256"])
        rows.append([doc_id, sha, repr(spent.get(sha, (0.0, 0))[0]), doc_id in admitted])
    text = json.dumps([repr(float(charge)), rows], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]
