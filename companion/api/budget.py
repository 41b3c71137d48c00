"""The owner's view of the documents' lifetime budgets, and the one way to reset them.

``GET /v1/budget`` lists every document's spend (RDP at the filter's order and
the epsilon it amounts to), what remains, how many answers charged it and
whether it is spent; ``GET /v1/budget/log`` is the append-only log of charges,
resets and the filter's setup; ``POST /v1/budget/reset`` sets named documents
back to zero, with a reason, as one logged action.  There is no "reset all":
every document is named.  Guests never reach these routes (the app's
``check_access`` keeps every route the owner's unless it is a guest route).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from companion.api.deps import RagDep, SettingsDep
from companion.errors import APIError, ErrorCode
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
