"""Under a formal defense, what one document can change (issue 23, points 2-4).

* A document that is not a candidate changes no other answer's context (BM25's IDF and
  average length are over the whole store, so on the old code it did: [C, E, A] became
  [C, E, B]).
* Documents enter as units: one document with many chunks takes one place, so adding or
  removing it moves at most one other document in or out (dp_vote's store-level
  accounting assumes two groups change; on the old code a document with k chunks changed
  k + 1 groups).
* dp_vote's groups do not depend on the order documents were added in.
* bounded's public prompt is the same whatever retrieval returned, in every layout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from companion.decoding.config import DefenseConfig
from companion.decoding.defenses import dp_vote as dv
from companion.rag.budget import DocumentBudget
from companion.rag.retrieval import RetrievalOptions
from companion.rag.service import RagService
from companion.rag.store import DocumentStore
from tests.companion.fakes import KeywordEmbedder, WordTokenizer

QUESTION = "gout allopurinol colchicine febuxostat?"
CANDIDATES = {  # each about gout (cosine ~1 with the question), one drug each
    "a.txt": b"gout allopurinol",
    "b.txt": b"gout colchicine",
    "c.txt": b"gout febuxostat",
}
# Not candidates (about asthma: cosine ~0.0001 < 0.5), but full of one drug's name, so
# BM25's IDF of that word falls when they are in the store.
OUTSIDERS = {f"asthma-{i}.txt": b"asthma allopurinol allopurinol allopurinol" for i in range(6)}


def _rag(path: Path, docs: dict[str, bytes], collection: str = "med") -> RagService:
    rag = RagService(DocumentStore(path), KeywordEmbedder())
    for name, data in docs.items():
        rag.ingest(name, data, collection)
    return rag


def _context(rag: RagService, k: int, mode: str = "bm25", defense: str = "bounded") -> list[str]:
    budget = DocumentBudget(rag.store, epsilon=1e9, delta=1e-6, threshold=0.5)
    admission = budget.retrieve(
        rag,
        QUESTION,
        "med",
        k,
        defense=DefenseConfig.from_options(defense),
        max_tokens=8,
        is_guest=True,
        answer_id="a",
        options=RetrievalOptions(mode=mode),  # type: ignore[arg-type]
    )
    return [h.document for h in admission.hits]


@pytest.mark.parametrize("mode", ["bm25", "hybrid", "vector"])
def test_a_document_that_is_no_candidate_changes_no_context(tmp_path, mode):
    alone = _context(_rag(tmp_path / "a.sqlite3", CANDIDATES), 2, mode)
    beside = _context(_rag(tmp_path / "b.sqlite3", {**CANDIDATES, **OUTSIDERS}), 2, mode)
    assert alone == beside
    # ... also from another collection (FTS5's statistics cover every collection)
    other = _rag(tmp_path / "c.sqlite3", CANDIDATES)
    for name, data in OUTSIDERS.items():
        other.ingest(name, data.replace(b"asthma", b"gout"), "elsewhere")
    assert _context(other, 2, mode) == alone


def test_a_document_of_many_chunks_takes_one_place(tmp_path):
    """k = 20 (the owner may set it): one document moves at most one other out."""
    # cosine ~0.71 (gout and fever); the big document's chunks ~1: on the old code they took
    # every place
    many = {f"note-{i:02d}.txt": f"gout fever note {i}".encode() for i in range(25)}
    big = "\n\n".join(f"gout allopurinol colchicine febuxostat part {i}" for i in range(40))
    rag = _rag(tmp_path / "m.sqlite3", many)
    before = _context(rag, 20, "hybrid")
    rag.ingest("big.txt", big.encode(), "med")
    (info,) = [d for d in rag.store.documents("med") if d.name == "big.txt"]
    assert info.chunks > 1
    after = _context(rag, 20, "hybrid")
    assert len(after) == len(set(after)) == 20  # twenty documents, each once
    changed = set(before) ^ set(after)
    assert "big.txt" in changed and len(changed) <= 2


def test_dp_vote_groups_do_not_depend_on_insertion_order(tmp_path):
    from companion.answer import AnswerPlan, admit
    from companion.answer.context import group_inputs
    from companion.settings import Settings

    settings = Settings(home=tmp_path, document_budget_epsilon=1e9, budget_relevance_threshold=0.5)
    groups = []
    for n, order in enumerate((list(CANDIDATES), list(reversed(CANDIDATES)))):
        rag = _rag(tmp_path / f"o{n}.sqlite3", {name: CANDIDATES[name] for name in order})
        plan = AnswerPlan.for_question(QUESTION, "dp_vote", 8, collection="med")
        context = admit(plan, settings, rag)
        docs = group_inputs(WordTokenizer(), plan, context)["documents"]
        groups.append(sorted((dv.group_of(key, 16), text) for key, text in docs))
    assert groups[0] == groups[1] and len(groups[0]) == 3


def test_dp_vote_is_charged_for_store_level_add_remove():
    """Two groups change: each release at twice its sensitivity, by dp-accounting too."""
    dp_accounting = pytest.importorskip("dp_accounting")
    config = dv.DpVoteConfig(epsilon=10.0)
    cal = dv.calibrate(config, 16)
    ours = dv.store_level_epsilon(cal, config.delta)
    events = [dp_accounting.GaussianDpEvent(e.sigma / (2 * e.sensitivity)) for e in cal.events()]
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.ComposedDpEvent(events))
    theirs = acc.get_epsilon(config.delta)
    assert ours == pytest.approx(theirs, rel=2e-2) and ours >= theirs * (1 - 1e-9) - 0.3
    assert ours > 10.0  # the per-answer 10 is not the store-level figure
    entry = DefenseConfig("dp_vote", config).defense
    assert entry.store_events(config, 16) == dv.store_events(cal)


@pytest.mark.parametrize("layout", ["system", "user", "nearest"])
def test_bounded_public_prompt_is_the_same_whatever_retrieval_returned(layout):
    from companion.answer import AnswerContext, AnswerPlan, chunks_context, generation_config

    lm = type("LM", (), {"tokenizer": WordTokenizer(), "device": "cpu", "stops": ()})()
    plan = AnswerPlan.for_question("what dose?", "bounded", 8, collection="med", layout=layout)
    found = generation_config(plan, chunks_context(["allopurinol 100 mg daily"]), lm)
    nothing = generation_config(plan, AnswerContext(retrieved=True), lm)
    assert list(found.public_prompt_ids) == list(nothing.public_prompt_ids)
    assert list(found.prompt_ids) != list(nothing.prompt_ids)
