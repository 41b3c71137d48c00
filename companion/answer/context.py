"""An answer's context: what retrieval admitted, what fits the prompt, and how it is cited.

:func:`admit` retrieves the plan's context and charges its documents' lifetime
budgets (:class:`companion.rag.budget.DocumentBudget`) before anything is
generated; :func:`fit` keeps the chunks, best first, within the context token
budget; :func:`chunks_context` builds a context from given chunks for the
evaluations and benchmarks that choose the chunks themselves.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from companion.protocol import Citation

if TYPE_CHECKING:
    from companion.answer.plan import AnswerPlan
    from companion.rag.service import RagService
    from companion.settings import Settings


def _where(hit: Any) -> dict[str, Any]:
    """The page and heading of a chunk, where the store and the citation model know them."""
    return {
        name: getattr(hit, name)
        for name in ("page", "heading")
        if name in Citation.model_fields and getattr(hit, name, None) is not None
    }


def citations_for(hits: list[Any]) -> list[Citation]:
    """One citation per retrieved chunk, numbered as the prompt numbers them."""
    return [
        Citation(
            **_where(h),
            n=i + 1,
            chunk_id=h.chunk_id,
            document_id=h.document_id,
            document=h.document,
            collection=h.collection,
            chunk_index=h.index,
            start=h.start,
            end=h.end,
            score=round(h.score, 6),
            text=h.text,
        )
        for i, h in enumerate(hits)
    ]


@dataclass(slots=True)
class AnswerContext:
    """The retrieved chunks of one answer and what became of them."""

    retrieved: bool = False  # retrieval ran (a collection was asked), whatever it found
    hits: list[Any] = field(default_factory=list)  # companion.rag.store.Hit, best first
    texts: list[str] = field(default_factory=list)  # the chunks' text as the prompt has it
    budget: dict[str, Any] | None = None  # veil.budget
    citations: list[Citation] = field(default_factory=list)  # the owner's; a guest gets none
    report: dict[str, Any] | None = None  # what the context budget kept and cut
    # document id -> the key dp_vote groups it by (its content hash; default: the id)
    document_keys: dict[Any, str] = field(default_factory=dict)


def admit(
    plan: AnswerPlan,
    settings: Settings,
    rag: RagService,
    *,
    expect: Callable[[str], None] | None = None,
) -> AnswerContext:
    """Retrieve the context and charge its documents' lifetime budgets, before generation.

    ``expect`` sees the formal admission's fingerprint before anything is charged and may
    refuse it (:meth:`companion.rag.budget.DocumentBudget.retrieve`)."""
    from companion.conversations.query import retrieval_query
    from companion.rag.budget import DocumentBudget
    from companion.rag.retrieval import RetrievalOptions

    if not plan.collection:
        return AnswerContext()
    admission = DocumentBudget.for_settings(rag.store, settings).retrieve(
        rag,
        retrieval_query(plan.messages, plan.query_mode),
        plan.collection,
        plan.top_k,
        defense=plan.defense,
        max_tokens=plan.max_tokens,
        is_guest=plan.is_guest,
        answer_id=plan.id,
        options=plan.retrieval or RetrievalOptions(),
        dry_run=plan.preview,
        expect=expect,
        # Poisson subsampling's coins: the CSPRNG, or the plan's seed behind the insecure
        # allow_seed switch (an evaluation's reproducible run)
        coin=None if plan.seed is None else random.Random(plan.seed).random,
    )
    hits = list(admission.hits)
    return AnswerContext(
        retrieved=True,
        hits=hits,
        texts=[h.text for h in hits],
        budget=admission.to_dict(is_guest=plan.is_guest),
        citations=[] if plan.is_guest else citations_for(hits),
        document_keys=dict(admission.document_keys),
    )


def titled(hit: Any) -> str:
    """How a chunk enters the owner's prompt: under its document's name, so a question
    that names the file ("the copyright of libmagic1") finds it, and the model can tell
    which document a passage is from.  A guest's prompt has no names (they may not see
    them, and a formal answer's prompt must not depend on more than the texts)."""
    name = getattr(hit, "document", None)
    return f"From {name}:\n{hit.text}" if name else str(hit.text)


def fit(
    context: AnswerContext, tokenizer: Any, settings: Settings, *, titles: bool = False
) -> None:
    """Keep the retrieved chunks, best first, within ``context_token_budget`` tokens
    (``titles``: each under its document's name, :func:`titled`, counted in the budget)."""
    from companion.rag.prompt import fit_context, near_best

    if not context.hits:
        return
    chunks = [titled(h) if titles else h.text for h in context.hits]
    fitted = fit_context(
        tokenizer,
        chunks,
        settings.context_token_budget,
        keep=near_best([h.score for h in context.hits], settings.context_relative_score),
    )
    context.texts = fitted.texts
    context.report = fitted.report()
    for citation, kept, chunk, hit in zip(
        context.citations, fitted.kept, chunks, context.hits, strict=False
    ):
        citation.included = kept.included
        # the passage's own characters, not its title's
        citation.included_chars = max(0, kept.chars - (len(chunk) - len(hit.text)))


def chunks_context(
    chunks: list[str], documents: list[str] | None = None, *, retrieved: bool = True
) -> AnswerContext:
    """A context of given chunks (an evaluation's choice, not retrieval's).

    ``documents`` names each chunk's document (dp_vote groups chunks by it); by default
    every chunk is its own document.  ``retrieved=False``: an answer with no retrieval
    (a no-RAG baseline).
    """
    from types import SimpleNamespace

    names = documents if documents is not None else [str(i) for i in range(len(chunks))]
    hits = [
        SimpleNamespace(document_id=name, text=text, score=1.0)
        for name, text in zip(names, chunks, strict=True)
    ]
    return AnswerContext(retrieved=retrieved, hits=hits, texts=list(chunks))


def group_inputs(tokenizer: Any, plan: AnswerPlan, context: AnswerContext) -> dict[str, Any]:
    """For a defense that runs its own passes (dp_vote): documents, group prompts, public prompt.

    The documents are the context's chunks with their document's key, its content hash
    (every chunk of a document lands in the same group, whatever order the documents were
    added in); the public prompt is the grounded one whether or
    not anything was retrieved, so it never depends on the documents.
    """
    from companion.rag.prompt import build_messages, build_prompt, encode_chat

    def prompt_for(text: str) -> list[int]:
        chunks = [text] if text else []
        return build_prompt(
            tokenizer,
            plan.messages,
            chunks,
            plan.layout,
            grounded=True,
            nothing_found=False,
            check_identifiers=False,  # dp_vote's groups: as measured (docs/dprag)
        ).prompt_ids

    public = encode_chat(
        tokenizer, build_messages(plan.messages, "", layout=plan.layout, grounded=True)
    )
    return {
        # every admitted chunk: a near-best floor would make one document's place in the
        # groups depend on another document's score
        "documents": [
            (context.document_keys.get(h.document_id, str(h.document_id)), h.text)
            for h in context.hits
        ],
        "prompt_for": prompt_for,
        "public_prompt_ids": public,
    }
