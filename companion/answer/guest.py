"""What a guest key's chat may ask: the key's terms, and its charge before the answer.

A request that asks for another collection, defense, parameters or retrieval depth,
or a seed, is refused with 403 rather than silently changed, so a client never
believes it got what it did not (:func:`guest_request`).  The key pays the answer's
calibrated ε before it is generated (:func:`charge_guest`).  What a guest sees of the
answer is :mod:`companion.answer.result`'s.
"""

from __future__ import annotations

from typing import Any

from companion.errors import APIError, ErrorCode
from companion.keys import BudgetSpentError, GuestKey, KeyStore
from companion.protocol import ChatCompletionRequest
from companion.settings import Settings
from py_core.errors import VeilError


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
    if body.budget_confirm is not None:  # its 409 would tell whether the documents changed
        raise _refuse(
            "budget_confirm is the owner's (it confirms an estimate of the documents' budgets)",
            "budget_confirm",
        )
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
