"""``/v1/keys``: the owner's guest keys; and what a guest's chat may ask and see.

* ``POST /v1/keys`` creates a key for one collection with one fixed defense and
  its parameters (validated by the registry), an optional lifetime ε budget, an
  optional expiry and whether answers may name the cited documents.  The
  response holds the key itself -- the only time it is ever shown.
* ``GET /v1/keys`` lists the keys (never the keys themselves: only their
  SHA-256 is stored) with their budget, spend and status.
* ``DELETE /v1/keys/{key_id}`` revokes a key; the next request with it is refused.

All three are the owner's.  For a guest, ``POST /v1/chat/completions`` runs with
the key's terms (:func:`guest_request`): a request that asks for another
collection, defense, parameters or retrieval depth, or a seed, is refused with
403 rather than silently changed, so a client never believes it got what it did
not.  Its ``veil`` object carries the receipt, no chunk text, and either the
cited documents' titles (when the owner allowed it) or only their number
(:func:`guest_veil`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from companion.api.deps import KeysDep, OwnerDep, RagDep
from companion.decoding.registry import DEFENSES
from companion.errors import APIError, ErrorCode
from companion.keys import BudgetSpentError, GuestKey, KeyStore, Principal, parse_expiry
from companion.protocol import ChatCompletionRequest
from companion.settings import Settings
from py_core.errors import VeilError

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


# ------------------------------------------------------------------ guest chat


def guest_key(principal: Principal) -> GuestKey | None:
    return principal.key if principal.kind == "guest" else None


def _refuse(message: str, param: str) -> APIError:
    return APIError(403, ErrorCode.GUEST_FORBIDDEN, message, param)


def guest_request(
    body: ChatCompletionRequest, key: GuestKey, settings: Settings
) -> ChatCompletionRequest:
    """The request with the key's collection, defense and parameters; 403 if it asked otherwise."""
    from companion.decoding.config import DefenseConfig

    asked = body.model_fields_set
    if body.collection is not None and body.collection != key.collection:
        raise _refuse(
            f"this guest key chats only over the collection {key.collection!r}, "
            f"not {body.collection!r}",
            "collection",
        )
    if "defense" in asked and body.defense != key.defense:
        raise _refuse(
            f"this guest key's defense is {key.defense!r} and cannot be changed "
            f"(asked for {body.defense!r})",
            "defense",
        )
    if body.defense_params:
        try:
            asked_params = DefenseConfig.from_options(key.defense, body.defense_params)
        except VeilError as exc:
            raise _refuse(
                f"this guest key's defense parameters are fixed: {exc}", "defense_params"
            ) from exc
        if asked_params.to_dict()["params"] != key.params:
            raise _refuse(
                "this guest key's defense parameters are fixed by the owner and differ from "
                "the ones asked for; leave defense_params out",
                "defense_params",
            )
    if body.retrieval_top_k is not None and body.retrieval_top_k != settings.retrieval_top_k:
        raise _refuse(
            f"a guest key retrieves {settings.retrieval_top_k} chunks per question; "
            "leave retrieval_top_k out",
            "retrieval_top_k",
        )
    if body.seed is not None:
        raise _refuse("a guest key cannot fix the noise's seed", "seed")
    return body.model_copy(
        update={
            "collection": key.collection,
            "defense": key.defense,
            "defense_params": dict(key.params),
            "retrieval_top_k": None,
        }
    )


def charge_guest(keys: KeyStore, key: GuestKey, defense: Any, max_tokens: int) -> GuestKey:
    """Charge the answer's calibrated epsilon to the key before it is generated.

    The calibrated epsilon (for an answer of ``max_tokens`` tokens) is the
    guarantee and is known in advance; what an answer spent after the fact
    depends on where it stopped, which depends on the documents, so it is not
    what is charged.  Defenses with no formal guarantee are not charged (and a
    key with a budget cannot have one).  403 when the budget would be passed.
    """
    epsilon = defense.defense.calibrated_epsilon(defense.params, max_tokens)
    try:
        return keys.charge(key.id, 0.0 if epsilon is None else float(epsilon))
    except BudgetSpentError as exc:
        raise APIError(403, ErrorCode.GUEST_BUDGET_SPENT, str(exc)) from exc


def guest_veil(receipt: dict[str, Any], hits: list[Any], key: GuestKey) -> dict[str, Any]:
    """A guest's ``veil`` object: the receipt, no chunk text, titles only if allowed."""
    citations = (
        [{"n": i + 1, "document": h.document} for i, h in enumerate(hits)]
        if key.allow_titles
        else []
    )
    return {
        "receipt": receipt,
        "citations": citations,
        "sources": len(hits),
        "guest": {
            "key_id": key.id,
            "collection": key.collection,
            "budget": key.budget,
            "spent": key.spent,
            "remaining": key.remaining,
        },
    }
