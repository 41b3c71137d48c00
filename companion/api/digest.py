"""The owner's one-time DP digest of a collection (companion/rag/digest.py).

``POST /v1/collections/{name}/digest/estimate`` says what building it would charge
each document (nothing charged); ``POST /v1/collections/{name}/digest`` charges every
document that can pay, once, and releases the statements many documents share;
``GET`` shows it (everything in it is DP output) and ``DELETE`` forgets it.  Guests never
reach these routes; their questions that the digest speaks to are answered from it
(companion/answer/digest.py).  Deleting a document of the collection forgets its digest.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from companion.api.deps import OwnerDep, RagDep, SettingsDep
from companion.errors import APIError, ErrorCode
from companion.rag.budget import DocumentBudget
from companion.rag.digest import DigestConfig, build_digest, drop_digest, estimate, load_digest
from py_core.errors import VeilError

router = APIRouter(tags=["digest"])


class DigestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    epsilon: float = Field(3.0, gt=0, le=50, description="charged once to every document")
    max_statements: int = Field(8, ge=1, le=64, description="sentences one document contributes")


def _collection(rag: Any, name: str) -> str:
    if name not in {c["name"] for c in rag.store.collections()}:
        raise APIError(404, ErrorCode.NOT_FOUND, f"no collection named {name!r}", "name")
    return name


def _config(body: DigestRequest) -> DigestConfig:
    try:
        return DigestConfig(epsilon=body.epsilon, max_statements=body.max_statements)
    except VeilError as exc:
        raise APIError(400, ErrorCode.INVALID_REQUEST, str(exc), "epsilon") from exc


@router.post(
    "/v1/collections/{name}/digest/estimate",
    summary="What building the collection's DP digest would charge (nothing charged)",
)
def estimate_digest(
    name: str, body: DigestRequest, rag: RagDep, settings: SettingsDep, _owner: OwnerDep
) -> Any:
    budget = DocumentBudget.for_settings(rag.store, settings)
    return estimate(budget, _collection(rag, name), _config(body))


@router.post(
    "/v1/collections/{name}/digest",
    summary="Build the collection's one-time DP digest (charges every document once)",
)
async def create_digest(
    name: str, body: DigestRequest, rag: RagDep, settings: SettingsDep, _owner: OwnerDep
) -> Any:
    from companion.decoding.noise import secure_generator

    collection = _collection(rag, name)
    config = _config(body)
    budget = await run_in_threadpool(DocumentBudget.for_settings, rag.store, settings)
    try:
        digest = await run_in_threadpool(
            build_digest, budget, collection, config, secure_generator()
        )
    except VeilError as exc:
        raise APIError(400, ErrorCode.INVALID_REQUEST, str(exc), "epsilon") from exc
    assert digest is not None  # built without `once`, it always is
    return digest.to_dict()


@router.get("/v1/collections/{name}/digest", summary="The collection's DP digest")
def get_digest(name: str, rag: RagDep, _owner: OwnerDep) -> Any:
    digest = load_digest(rag.store, _collection(rag, name))
    if digest is None:
        raise APIError(
            404,
            ErrorCode.NOT_FOUND,
            f"the collection {name!r} has no digest; POST /v1/collections/{name}/digest builds one",
        )
    return digest.to_dict()


@router.delete("/v1/collections/{name}/digest", summary="Forget the collection's DP digest")
def delete_digest(name: str, rag: RagDep, _owner: OwnerDep) -> Any:
    return {"deleted": drop_digest(rag.store, _collection(rag, name))}
