"""The owner's view of the documents' lifetime budgets, and the one way to reset them.

``GET /v1/budget`` lists every document's spend (RDP at the filter's order and
the epsilon it amounts to), what remains, how many answers charged it and
whether it is spent; ``GET /v1/budget/log`` is the append-only log of charges,
resets and the filter's setup; ``POST /v1/budget/reset`` sets named documents
back to zero, with a reason, as one logged action.  There is no "reset all":
every document is named.  ``POST /v1/budget/estimate`` takes a chat request and
says what its answer would charge each document, and what would remain, without
generating or charging anything (the chat page asks before it spends).  Guests never reach these routes (the app's
``check_access`` keeps every route the owner's unless it is a guest route).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from companion.api.deps import ConversationsDep, OwnerDep, RagDep, SettingsDep
from companion.errors import APIError, ErrorCode
from companion.protocol import ChatCompletionRequest
from companion.rag.budget import DocumentBudget, UnknownDocumentError

router = APIRouter(tags=["budget"])


class BudgetResetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    document_ids: list[int] = Field(..., min_length=1, max_length=10_000)
    reason: str = Field(..., min_length=1, max_length=500, description="kept in the budget log")


@router.get("/v1/budget", summary="Each document's lifetime privacy budget: spent and remaining")
def get_budget(rag: RagDep, settings: SettingsDep, collection: str | None = None) -> Any:
    return DocumentBudget.for_settings(rag.store, settings).status(collection)


@router.get("/v1/budget/log", summary="The append-only log of budget charges and resets")
def get_budget_log(rag: RagDep, limit: int = 100, document_id: int | None = None) -> Any:
    if not 1 <= limit <= 10_000:
        raise APIError(400, ErrorCode.INVALID_REQUEST, f"limit must be 1-10000; got {limit}")
    sha = None
    if document_id is not None:
        info = rag.store.document(document_id)
        if info is None:
            raise APIError(404, ErrorCode.NOT_FOUND, f"no document {document_id}")
        sha = info.sha256
    return {"entries": rag.store.budget_log(limit, sha)}


@router.post("/v1/budget/reset", summary="Reset named documents' budgets (logged, with a reason)")
async def reset_budget(body: BudgetResetRequest, rag: RagDep, settings: SettingsDep) -> Any:
    budget = await run_in_threadpool(DocumentBudget.for_settings, rag.store, settings)
    try:
        documents = await run_in_threadpool(budget.reset, body.document_ids, body.reason)
    except UnknownDocumentError as exc:
        raise APIError(404, ErrorCode.NOT_FOUND, str(exc), "document_ids") from exc
    return {"reset": documents}


@router.post(
    "/v1/budget/estimate",
    summary="What a chat request's answer would charge each document's lifetime budget "
    "(nothing generated, nothing charged)",
)
async def estimate_budget(
    body: ChatCompletionRequest,
    settings: SettingsDep,
    rag: RagDep,
    conversations: ConversationsDep,
    _owner: OwnerDep,
) -> Any:
    """The charge of ``body``'s answer, from the answer service's own plan and admission.

    The same :func:`companion.answer.plan_answer` and :func:`companion.answer.admit` as
    ``POST /v1/chat/completions`` (with the stored conversation's history, so a follow-up
    retrieves as it will), run as a dry run: the same candidates, the same per-document
    charge and the figures after it, nothing written.  While nothing else charges the
    documents in between, the answer then charges exactly this; sent with ``confirm`` as
    its ``budget_confirm``, it charges exactly this or nothing (409).
    """
    from companion.answer import admit, plan_answer
    from companion.api.chat import _check_replace, _history

    _check_replace(body)
    history = await run_in_threadpool(_history, conversations, body, False)
    plan = await run_in_threadpool(plan_answer, settings, rag, body, history)
    dry = dataclasses.replace(plan, preview=True)  # admit's dry run: nothing written
    seen: list[str] = []  # the admission's fingerprint: the answer's budget_confirm
    context = await run_in_threadpool(
        functools.partial(admit, dry, settings, rag, expect=seen.append)
    )
    return estimate_of(plan, context.budget, seen[0] if seen else None)


def estimate_of(
    plan: Any, budget: dict[str, Any] | None, confirm: str | None = None
) -> dict[str, Any]:
    """The estimate's body: whether the answer would charge, and each document's figures."""
    documents = [
        {
            **d,
            "spent_rdp_before": d["spent_rdp"] - d["charge_rdp"],
            "spent_fraction_before": d["spent_fraction"] - d["charge_fraction"],
        }
        for d in (budget or {}).get("documents", [])
    ]
    charges = bool(budget and budget.get("formal") and documents)
    if budget is None:
        note = "Nothing is retrieved for this request, so its answer charges no document."
    elif not budget.get("formal"):
        note = (
            f"The {plan.defense.name} defense gives no differential-privacy guarantee: its "
            "answer charges no document's lifetime budget."
        )
    elif not budget.get("covered"):
        note = budget["note"]  # a formal defense with no calibrated cost: no context at all
    elif not documents:
        note = "No document of the collection would be used for this answer: it charges none."
        if budget.get("excluded"):
            note += (
                f" {len(budget['excluded'])} document(s) have too little budget left for it "
                "and would be left out."
            )
    else:
        note = (
            f"This answer (ε {budget['answer_epsilon']:.3g} calibrated for "
            f"{plan.max_tokens} tokens) would charge each of {len(documents)} document(s) "
            f"{budget['charge_fraction']:.2%} of its lifetime budget of "
            f"(ε {budget['budget_epsilon']:g}, δ {budget['budget_delta']:g}). Nothing has "
            "been charged yet."
        )
    return {
        "charges": charges,
        "defense": plan.defense.name,
        "formal": bool(budget and budget.get("formal")),
        "max_tokens": plan.max_tokens,
        "collection": plan.collection,
        "charge_rdp": (budget or {}).get("charge_rdp"),
        "charge_fraction": (budget or {}).get("charge_fraction"),
        "answer_epsilon": (budget or {}).get("answer_epsilon"),
        "documents": documents,
        "excluded": (budget or {}).get("excluded", []),
        "budget": budget,
        "note": note,
        # sent back as the chat request's budget_confirm: exactly these charges, or a 409
        "confirm": confirm if charges else None,
    }
