"""The lifetime run: hundreds of guest questions under one store's per-document filter.

Everything goes through the companion's own guest path: the store's
:class:`~companion.rag.budget.DocumentBudget` (thresholded candidates, each charged;
the top-k *documents* by :func:`~companion.rag.budget.top_documents`), the answer
cache (:mod:`companion.answer.cache`), and ``dp_answer`` through the answer service.
In the same run, for the cost and the accuracy baseline, every distinct question is
also answered undefended (``none`` over the top 3 chunks, as the owner's chat) and
without documents (``no-RAG``).

The noise is seeded (an experiment, repeatable); the companion's own answers use the
CSPRNG.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.dprag.corpus import CORPUS_SEED, Corpus, Question, membership_questions
from evals.dprag.lifetime_corpus import Ask, lifetime_corpus, schedule
from evals.dprag.runner import identifiers_found, membership_score
from evals.pad.metrics import answer_correct


@dataclass(frozen=True, slots=True)
class LifetimeConfig:
    per_level: int = 10
    supports: tuple[int, ...] = (5, 20, 50, 100)
    filler: int = 250
    records: int = 20
    membership: int = 10
    epsilon: float = 5.0  # per answer, store-level add/remove
    groups: int = 0  # 0: dp_answer's setting for epsilon
    group_tokens: int = 48
    answer_tokens: int = 16  # the proposals reach a code after their preamble
    relevance: float = 0.5  # the budget's cosine threshold (every candidate is charged)
    similarity: float = 0.9  # the cache's paraphrase threshold
    document_epsilon: float = 10.0
    document_delta: float = 1e-6
    max_tokens: int = 16
    sweep_epsilons: tuple[float, ...] = (2.0, 3.0, 5.0, 8.0)
    sweep_facts: int = 1  # facts per support level in the epsilon sweep
    digest_epsilon: float = 3.0  # the collection's one-time DP digest (0: none)
    digest_statements: int = 8  # sentences each note contributes to it
    # chat models that read the digest after the run (evals/dprag/digest_models.py); the
    # run's own model by its name is reused
    digest_models: tuple[str, ...] = ()
    smoke: bool = False


FULL = LifetimeConfig(
    membership=5,
    sweep_epsilons=(3.0, 5.0, 8.0),
    digest_models=(
        "smollm2-135m-instruct",
        "qwen2.5-coder-0.5b-instruct",
        "qwen2.5-coder-1.5b-instruct",
    ),
)
SMOKE = LifetimeConfig(
    per_level=2,
    supports=(16,),  # a note's first sentence alone at the digest's ε 3: ~11 notes suffice
    filler=12,
    records=1,
    membership=1,
    epsilon=5.0,
    groups=6,
    group_tokens=40,
    answer_tokens=4,
    max_tokens=8,
    sweep_epsilons=(5.0,),
    sweep_facts=1,
    digest_statements=1,
    digest_models=("smollm2-135m-instruct",),
    smoke=True,
)
# What fits ~20 minutes on two shared cores: 2 facts per level (the FULL run's schedule
# otherwise); ``veil eval dprag --stages lifetime --lifetime reduced``.
REDUCED = LifetimeConfig(per_level=2, filler=50, records=5, membership=3, sweep_epsilons=(3.0, 8.0))


CONFIGS = {"full": FULL, "reduced": REDUCED, "smoke": SMOKE}


def _dp_config(cfg: LifetimeConfig, epsilon: float, groups: int | None = None) -> Any:
    from companion.decoding.config import DefenseConfig
    from companion.decoding.defenses.dp_answer import DpAnswerConfig

    return DefenseConfig(
        "dp_answer",
        DpAnswerConfig(
            epsilon=epsilon,
            groups=cfg.groups if groups is None else groups,
            group_tokens=cfg.group_tokens,
            answer_tokens=cfg.answer_tokens,
        ),
    )


class Guest:
    """One guest key's answers over the run's store: cache, budget, dp_answer."""

    def __init__(
        self, lm: Any, rag: Any, budget: Any, cache: Any, cfg: LifetimeConfig, digest: Any = None
    ) -> None:
        self.lm, self.rag, self.budget, self.cache, self.cfg = lm, rag, budget, cache, cfg
        self.digest = digest  # companion.rag.digest.Digest, or None
        self.n = 0

    def private(
        self, question: str, defense: Any, seed: int, *, dry_run: bool = False, cached: bool = True
    ) -> dict[str, Any]:
        from companion.answer import AnswerContext, AnswerPlan, answer_now
        from companion.answer.cache import scope_key

        messages = [{"role": "user", "content": question}]
        scope = scope_key("clinic", defense.to_dict(), "eval")
        t0 = time.perf_counter()
        if cached:
            hit = self.cache.lookup(scope, messages)
            if hit is not None:
                return {
                    "answer": hit.answer,
                    "cached": hit.matched,
                    "similarity": hit.similarity,
                    "seconds": time.perf_counter() - t0,
                    **{k: hit.veil.get(k) for k in ("released", "charged", "candidates", "digest")},
                }
        if self.digest is not None and not dry_run:  # as companion/answer/digest.py does
            row = self._from_digest(question, seed, t0)
            if row is not None:
                if cached:
                    kept = {k: row[k] for k in ("released", "charged", "candidates", "digest")}
                    self.cache.store(scope, messages, row["answer"], kept)
                return row
        self.n += 1
        size = defense.defense.context_size(defense.params)
        admission = self.budget.retrieve(
            self.rag,
            question,
            "clinic",
            size,
            defense=defense,
            max_tokens=self.cfg.max_tokens,
            is_guest=True,
            answer_id=f"eval-{self.n}",
            dry_run=dry_run,
        )
        hits = list(admission.hits)
        context = AnswerContext(
            retrieved=True,
            hits=hits,
            texts=[h.text for h in hits],
            document_keys=dict(admission.document_keys),
        )
        plan = AnswerPlan.for_question(question, defense, self.cfg.max_tokens, seed=seed)
        res = answer_now(plan, context, self.lm)
        seconds = time.perf_counter() - t0
        row = {
            "answer": res.text,
            "cached": None,
            "seconds": seconds,
            "released": bool(res.details.get("released")),
            "charged": len(admission.charged),
            "candidates": len(admission.charged) + len(admission.excluded),
            "excluded": len(admission.excluded),
            "context_documents": len(hits),
            "charge_rdp": admission.charge_rdp,
        }
        if cached:
            self.cache.store(
                scope,
                messages,
                res.text,
                {k: row[k] for k in ("released", "charged", "candidates")},
            )
        return row

    def _from_digest(self, question: str, seed: int, t0: float) -> dict[str, Any] | None:
        from companion.answer import AnswerPlan, answer_now, chunks_context
        from companion.answer.digest import reading, relevant

        found = relevant(self.digest, question)
        if not found:
            return None
        plan = reading(AnswerPlan.for_question(question, "none", self.cfg.max_tokens, seed=seed))
        res = answer_now(plan, chunks_context([s.text for s in found]), self.lm)
        return {
            "answer": res.text,
            "cached": None,
            "digest": True,
            "seconds": time.perf_counter() - t0,
            "released": True,
            "charged": 0,
            "candidates": 0,
        }


def _baselines(
    lm: Any,
    rag: Any,
    question: str,
    max_tokens: int,
    seed: int,
    labels: Sequence[str] = ("none", "no-RAG"),
) -> list[dict[str, Any]]:
    from companion.answer import AnswerPlan, answer_now, chunks_context

    rows = []
    for label in labels:
        chunks = [] if label == "no-RAG" else [h.text for h in rag.search(question, "clinic", 3)]
        plan = AnswerPlan.for_question(question, "none", max_tokens, seed=seed)
        t0 = time.perf_counter()
        res = answer_now(plan, chunks_context(chunks, retrieved=bool(chunks)), lm)
        rows.append({"defense": label, "answer": res.text, "seconds": time.perf_counter() - t0})
    return rows


def _score(row: dict[str, Any], q: Question, corpus: Corpus) -> dict[str, Any]:
    row = dict(row)
    row.update(kind=q.kind, question=q.text, support=q.support, note=q.note, member=q.member)
    row["identifiers_found"] = identifiers_found(row["answer"], corpus)
    if q.kind == "population":
        row["correct"] = answer_correct(row["answer"], q.answer)
    elif q.kind == "record":
        row["correct"] = any(
            "".join(c for c in v if c.isdigit()) in "".join(c for c in row["answer"] if c.isdigit())
            for v in q.answer
        )
    elif q.kind == "membership":
        row["score"] = membership_score(row["answer"], q)
    return row


def document_epsilons(budget: Any, threshold_delta: float) -> dict[str, Any]:
    """Every charged document's total epsilon at the budget's delta, two ways.

    ``filter``: what the filter guarantees from its spend at its order (surcharges
    included).  ``exact``: the Gaussian part alone (answers x the per-answer RDP, linear in
    the order), converted at ``delta - answers * threshold_delta`` over all orders -- the
    proof's figure; both must stay within the budget's epsilon.
    """
    from py_core.accounting import rdp_to_dp
    from py_core.accounting.common import DEFAULT_ORDERS

    flt = budget.filter
    rows = budget.store.budget_rows("clinic")
    out = []
    for r in rows:
        spent, answers = float(r["spent_rdp"]), int(r["answers"])
        if spent <= 0:
            continue
        out.append({"spent_rdp": spent, "answers": answers, "filter": flt.epsilon_of(spent)})
    return {
        "documents": out,
        "order": flt.order,
        "budget_rdp": flt.budget,
        "orders": list(DEFAULT_ORDERS),
        "rdp_to_dp": rdp_to_dp.__name__,
    }


def exact_epsilon(
    per_answer_rdp_at_order: float, order: float, answers: int, delta: float, threshold_delta: float
) -> float:
    """The Gaussian part of ``answers`` charges converted at ``delta - answers * td``."""
    from py_core.accounting import rdp_to_dp
    from py_core.accounting.common import DEFAULT_ORDERS

    left = delta - answers * threshold_delta
    if left <= 0:
        return math.inf
    alphas = [a for a in DEFAULT_ORDERS if a > 1.0]
    rdp = [answers * per_answer_rdp_at_order * a / order for a in alphas]
    return rdp_to_dp(rdp, alphas, left)[0]


def run_lifetime(
    lm: Any,
    embedder: Any,
    cfg: LifetimeConfig,
    *,
    seed: int = CORPUS_SEED,
    log: Any = print,
    save: Any = lambda _out: None,
    model_name: str = "smollm2-135m-instruct",
) -> dict[str, Any]:
    from companion.answer.cache import AnswerCache
    from companion.decoding.defenses.dp_answer import calibrate
    from companion.rag.budget import DocumentBudget
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore

    corpus = lifetime_corpus(cfg.per_level, cfg.supports, cfg.filler, cfg.membership, seed=seed)
    asks = schedule(corpus, cfg.records, seed=seed)
    members = membership_questions(corpus, cfg.membership, seed=seed)
    out: dict[str, Any] = {
        "config": {**cfg.__dict__} if hasattr(cfg, "__dict__") else {},
        "rows": [],
        "sweep": [],
        "membership": [],
    }
    out["config"] = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    out["facts"] = [
        {"kind": f.kind, "subject": f.subject, "answer": f.answer, "support": f.support}
        for f in corpus.facts
    ]
    with tempfile.TemporaryDirectory() as tmp:
        rag = RagService(DocumentStore(Path(tmp) / "rag.sqlite3"), embedder)
        t0 = time.time()
        for note in corpus.notes:
            rag.ingest(f"note-{note.id:04d}.txt", note.text.encode(), "clinic")
        out["ingest_seconds"] = time.time() - t0
        log(f"[lifetime] {len(corpus.notes)} notes ingested in {out['ingest_seconds']:.0f} s")
        budget = DocumentBudget(
            rag.store,
            epsilon=cfg.document_epsilon,
            delta=cfg.document_delta,
            threshold=cfg.relevance,
        )
        cache = AnswerCache(
            Path(tmp) / "answers.sqlite3", embed=rag.embed, similarity=cfg.similarity
        )
        digest = None
        if cfg.digest_epsilon > 0:
            from companion.decoding.noise import SeededNoise
            from companion.rag.digest import DigestConfig, build_digest, digest_charge

            t1 = time.time()
            dconfig = DigestConfig(epsilon=cfg.digest_epsilon, max_statements=cfg.digest_statements)
            digest = build_digest(budget, "clinic", dconfig, SeededNoise(seed + 31))
            assert digest is not None  # built without `once`, it always is
            out["digest"] = {
                **digest.to_dict(),
                "seconds": time.time() - t1,
                "charge_rdp": digest_charge(dconfig, budget.filter),
                "charge_fraction": digest_charge(dconfig, budget.filter) / budget.filter.budget,
            }
            log(
                f"[lifetime] digest at ε {cfg.digest_epsilon:g}: {len(digest.statements)} "
                f"statements from {digest.contributors} notes"
            )
        guest = Guest(lm, rag, budget, cache, cfg, digest)
        defense = _dp_config(cfg, cfg.epsilon)
        cal = calibrate(defense.params)
        out["calibration"] = {
            "sigma": cal.sigma,
            "threshold": cal.tau,
            "groups": cal.groups,
            "top_k": cal.top_k,
        }
        plain: dict[str, list[dict[str, Any]]] = {}
        for i, ask in enumerate(asks):
            q = ask.question
            row = guest.private(q.text, defense, seed + 104729 * (i + 1))
            row.update(
                defense="dp_answer",
                index=i,
                topic=ask.topic,
                paraphrase=ask.paraphrase,
                repeat=ask.repeat,
            )
            out["rows"].append(_score(row, q, corpus))
            if q.text not in plain:  # greedy and undefended: one answer per distinct question
                plain[q.text] = _baselines(lm, rag, q.text, cfg.max_tokens, seed + i)
                for b in plain[q.text]:
                    b["fresh"] = True
            else:
                plain[q.text] = [{**b, "fresh": False} for b in plain[q.text]]
            for b in plain[q.text]:
                out["rows"].append(_score({**b, "index": i, "topic": ask.topic}, q, corpus))
            if i % 10 == 0:
                _record_documents(out, budget, rag, defense, cfg)
                save(out)
                log(
                    f"[lifetime] {i + 1}/{len(asks)} {q.kind} {row['cached'] or 'fresh'}: {row['answer']!r}"
                )
        for j, q in enumerate(members):
            row = guest.private(q.text, defense, seed + 7919 * (j + 1))
            out["membership"].append(_score({**row, "defense": "dp_answer"}, q, corpus))
            for b in _baselines(lm, rag, q.text, cfg.max_tokens, seed + j):
                out["membership"].append(_score(b, q, corpus))
        # The epsilon sweep: fresh answers over the same top-k documents, outside the filter
        # (a dry run of the admission would see the documents the run has spent).
        for eps in cfg.sweep_epsilons:
            sdef = _dp_config(cfg, eps, groups=0 if not cfg.smoke else cfg.groups)
            scal = calibrate(sdef.params)
            for level in cfg.supports:
                for f in [f for f in corpus.facts if f.support == level][: cfg.sweep_facts]:
                    q = Question("population", _first_paraphrase(f), (f.answer,), support=f.support)
                    row = _unfiltered(lm, rag, q.text, sdef, cfg, seed + 7 * len(out["sweep"]))
                    row.update(
                        epsilon=eps, groups=scal.groups, threshold=scal.tau, top_k=scal.top_k
                    )
                    out["sweep"].append(_score(row, q, corpus))
                    log(
                        f"[lifetime] sweep ε={eps:g} support {level}: {row['answer']!r} ({row['seconds']:.0f} s)"
                    )
                    save(out)
        _record_documents(out, budget, rag, defense, cfg)
        out["fresh_private_answers"] = guest.n
        save(out)
        if digest is not None and cfg.digest_models:
            from evals.dprag.digest_models import read_by_models, strong_without_digest

            part = read_by_models(
                cfg.digest_models,
                (model_name, lm),
                rag,
                digest,
                asks,
                cfg.max_tokens,
                seed=seed + 523,
                log=log,
            )
            out["digest_models"] = {
                **part,
                "strong_without_digest": strong_without_digest(digest, asks),
            }
        cache.close()
        rag.store.close()
    return out


def _record_documents(out: dict[str, Any], budget: Any, rag: Any, defense: Any, cfg: Any) -> None:
    """Every charged note's total epsilon so far, into ``out`` (at each save, so a run
    stopped part way still reports what its notes spent)."""
    per_answer = budget.filter.charge_of(
        defense.defense.store_events(defense.params, cfg.max_tokens)
    )
    docs = []
    for r in rag.store.budget_rows("clinic"):
        spent, answers = float(r["spent_rdp"]), int(r["answers"])
        if answers == 0:
            continue
        docs.append(
            {
                "answers": answers,
                "spent_rdp": spent,
                "epsilon_filter": budget.filter.epsilon_of(spent),
                "epsilon_exact": exact_epsilon(
                    per_answer,
                    budget.filter.order,
                    answers,
                    cfg.document_delta,
                    defense.params.threshold_delta,
                ),
            }
        )
    out["documents"] = docs
    out["filter"] = {
        "order": budget.filter.order,
        "budget_rdp": budget.filter.budget,
        "charge_rdp": per_answer,
    }


def _unfiltered(
    lm: Any, rag: Any, question: str, defense: Any, cfg: LifetimeConfig, seed: int
) -> dict[str, Any]:
    """One fresh dp_answer answer over the top-k candidate documents, no filter, no cache."""
    from companion.answer import AnswerContext, AnswerPlan, answer_now
    from companion.rag.budget import top_documents

    t0 = time.perf_counter()
    vector = rag.embed([question])[0]
    candidates = rag.store.scored_chunks("clinic", vector, cfg.relevance)
    keys = {h.document_id: f"doc-{h.document_id}" for h in candidates}
    hits = top_documents(candidates, defense.defense.context_size(defense.params), keys)
    context = AnswerContext(
        retrieved=True, hits=hits, texts=[h.text for h in hits], document_keys=keys
    )
    plan = AnswerPlan.for_question(question, defense, cfg.max_tokens, seed=seed)
    res = answer_now(plan, context, lm)
    return {
        "answer": res.text,
        "seconds": time.perf_counter() - t0,
        "released": bool(res.details.get("released")),
        "candidates": len({h.document_id for h in candidates}),
        "context_documents": len(hits),
    }


def _first_paraphrase(fact: Any) -> str:
    from evals.dprag.lifetime_corpus import FAULT, TREATMENT

    return (TREATMENT if fact.kind == "treatment" else FAULT)[0].format(s=fact.subject)


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The goals' figures from a lifetime run's rows."""
    rows = results.get("rows", [])

    def rate(defense: str, pred: Any) -> tuple[int, int]:
        sel = [r for r in rows if r["defense"] == defense and pred(r)]
        return sum(1 for r in sel if r.get("correct")), len(sel)

    strong = lambda r: r["kind"] == "population" and (r["support"] or 0) >= 50  # noqa: E731
    by_support: dict[int, dict[str, tuple[int, int]]] = {}
    for s in sorted({r["support"] for r in rows if r["kind"] == "population"}):
        by_support[s] = {
            d: rate(d, lambda r, s=s: r["kind"] == "population" and r["support"] == s)
            for d in ("dp_answer", "none", "no-RAG")
        }
    fresh = [
        r["seconds"]
        for r in rows
        if r["defense"] == "dp_answer" and not r.get("cached") and not r.get("digest")
    ]
    allp = [r["seconds"] for r in rows if r["defense"] == "dp_answer"]
    plain = [r["seconds"] for r in rows if r["defense"] == "none" and r.get("fresh")]
    docs = results.get("documents", [])
    found = sum(len(r["identifiers_found"]) for r in rows if r["defense"] == "dp_answer")
    found += sum(
        len(r["identifiers_found"])
        for r in results.get("membership", [])
        if r["defense"] == "dp_answer"
    )
    return {
        "questions": sum(1 for r in rows if r["defense"] == "dp_answer"),
        "strong": {d: rate(d, strong) for d in ("dp_answer", "none", "no-RAG")},
        "by_support": by_support,
        "documents_measured": "documents" in results,  # older partial runs lack them
        "max_epsilon_filter": max((d["epsilon_filter"] for d in docs), default=0.0),
        "max_epsilon_exact": max((d["epsilon_exact"] for d in docs), default=0.0),
        "documents_charged": len(docs),
        "max_answers_per_document": max((d["answers"] for d in docs), default=0),
        "identifiers_found": found,
        "seconds_fresh": sum(fresh) / len(fresh) if fresh else None,
        "seconds_all": sum(allp) / len(allp) if allp else None,
        "seconds_none": sum(plain) / len(plain) if plain else None,
        "cached": sum(1 for r in rows if r["defense"] == "dp_answer" and r.get("cached")),
        "fresh": len(fresh),
        "from_digest": sum(
            1
            for r in rows
            if r["defense"] == "dp_answer" and r.get("digest") and not r.get("cached")
        ),
        "digest": results.get("digest"),
    }


def membership_auc(rows: Sequence[dict[str, Any]], defense: str) -> float | None:
    from evals.inversion.metrics import auroc

    pos = [r["score"] for r in rows if r["defense"] == defense and r["member"]]
    neg = [r["score"] for r in rows if r["defense"] == defense and not r["member"]]
    if not pos or not neg:
        return None
    return float(auroc(pos, neg))


__all__ = ["SMOKE", "Ask", "LifetimeConfig", "run_lifetime", "summary"]
