"""``/v1/keys``: the owner's guest keys; and what a guest's chat may ask and see.

* ``POST /v1/keys`` creates a key for one collection with one fixed defense and
  its parameters (validated by the registry), an optional lifetime ε budget, an
  optional expiry and whether answers may name the cited documents.  The
  response holds the key itself -- the only time it is ever shown.
* ``GET /v1/keys`` lists the keys (never the keys themselves: only their
  SHA-256 is stored) with their budget, spend and status.
* ``DELETE /v1/keys/{key_id}`` revokes a key; the next request with it is refused.

All three are the owner's.  What a guest's chat may ask and see is the answer
service's (:mod:`companion.answer.guest`, :mod:`companion.answer.result`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from companion.api.deps import KeysDep, OwnerDep, RagDep
from companion.decoding.registry import DEFENSES
from companion.errors import APIError, ErrorCode
from companion.keys import GuestKey, KeyStore, parse_expiry

router = APIRouter(prefix="/v1/keys", tags=["keys"])


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    collection: str = Field(..., description="the one collection the key chats over")
    defense: str = Field(..., description="one of " + ", ".join(DEFENSES))
    defense_params: dict[str, Any] = Field(default_factory=dict)
    budget: float | None = Field(
        None, description="lifetime epsilon cap (formal defenses only); none: no cap"
    )
    expires: str | None = Field(
        None, description="a duration (30d, 12h, 90m, 2w) or an ISO date; none: never"
    )
    allow_titles: bool = Field(
        False, description="answers name the cited documents (otherwise only their number)"
    )
    label: str = Field("", max_length=200, description="who or what the key is for")


def _create(keys: KeyStore, rag: Any, body: KeyCreate) -> tuple[GuestKey, str]:
    names = {c["name"] for c in rag.store.collections()}
    if body.collection not in names:
        raise APIError(
            400,
            ErrorCode.INVALID_REQUEST,
            f"no collection named {body.collection!r}; upload documents to it first",
            "collection",
        )
    return keys.create(
        collection=body.collection,
        defense=body.defense,
        params=body.defense_params,
        budget=body.budget,
        expires=parse_expiry(body.expires),
        allow_titles=body.allow_titles,
        label=body.label,
    )


@router.post("", status_code=201, summary="Create a guest key (the key is shown only here)")
async def create_key(
    body: KeyCreate, keys: KeysDep, rag: RagDep, owner: OwnerDep
) -> dict[str, Any]:
    key, raw = await run_in_threadpool(_create, keys, rag, body)
    return {"key": raw, "guest_key": key.to_dict()}


@router.get("", summary="List guest keys (never the keys themselves)")
def list_keys(keys: KeysDep, owner: OwnerDep) -> dict[str, Any]:
    return {"data": [k.to_dict() for k in keys.list_keys()]}


@router.delete("/{key_id}", summary="Revoke a guest key at once")
def revoke_key(key_id: int, keys: KeysDep, owner: OwnerDep) -> dict[str, Any]:
    key = keys.revoke(key_id)
    if key is None:
        raise APIError(404, ErrorCode.NOT_FOUND, f"no guest key with id {key_id}")
    return {"revoked": True, "guest_key": key.to_dict()}
