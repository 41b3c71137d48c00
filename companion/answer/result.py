"""What an answer tells its reader: the receipt, the ``veil`` object, the usage.

The owner sees everything about their own documents: the citations with their
text, which chunks the context budget kept, each document's lifetime charge.

A guest sees only what the defense's guarantee covers, so that two neighbouring
stores (one document added or removed) give a guest identically distributed
responses apart from the answer text itself (docs/methods/decoding.md, "What a
guest sees"): the receipt of the defense (its fields are fixed before generation,
or functions of the released tokens), the key's own budget, a fixed budget note,
and usage counted on the public prompt (the conversation without the retrieved
context).  No citation, source count, retrieval note, context size or private
prompt length -- each of those changes deterministically with the store.  Titles
(``allow_titles``) are shown only under a defense without a formal guarantee, where
the answer claims none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from companion.protocol import VeilInfo

if TYPE_CHECKING:
    from companion.answer.context import AnswerContext
    from companion.answer.plan import AnswerPlan
    from companion.decoding.generate import GenerationResult

# dp_vote's counts of what its vote did (functions of its noisy releases only)
VOTE_FIELDS = (
    "released_tokens",
    "released_tokens_allowed",
    "agreed_tokens",
    "weak_vote_tokens",
    "public_fallback_tokens",
    "budget_spent",
    "epsilon_store_level",
    "note",
)

OWNER_PLAIN_NOTE = (
    "You own these documents, so the answer reads them plainly: no decoding noise is "
    "added (there is no one to hide your own documents from). Guests and agents get the "
    "defense their key sets."
)


PREVIEW_NOTE = (
    "A preview: what this guest key would receive now. Nothing was charged, neither the "
    "key's budget nor the documents' lifetime budgets."
)


def receipt(plan: AnswerPlan, context: AnswerContext, result: GenerationResult) -> dict[str, Any]:
    """The answer's receipt; the owner's also says what the context budget cut."""
    if plan.digest is not None:  # the digest's guarantee, paid when it was released
        tokens = len(result.token_ids)
        return {**plan.digest, "total_tokens": tokens, "max_tokens": plan.max_tokens}
    out: dict[str, Any] = result.receipt.to_dict() if result.receipt else {}
    if context.report is not None and not plan.is_guest:
        out["context"] = context.report
    details = result.details or {}
    if details:
        out["votes"] = {k: details[k] for k in VOTE_FIELDS if k in details}
    if not plan.is_guest and plan.defense.name == "none":
        out["notes"] = [*out.get("notes", []), OWNER_PLAIN_NOTE]
    return out


def _guest_budget(budget: dict[str, Any] | None) -> dict[str, Any] | None:
    """A guest's ``veil.budget``: the defense's fixed charge and note, nothing retrieval found."""
    if budget is None:
        return None
    return {k: v for k, v in budget.items() if k != "retrieval"}


def _guest_veil(
    plan: AnswerPlan, context: AnswerContext, the_receipt: dict[str, Any]
) -> dict[str, Any]:
    key = plan.guest
    formal = bool(plan.defense.defense.guarantee.formal) or plan.digest is not None
    titles = key.allow_titles and not formal
    return {
        "receipt": the_receipt,
        "citations": (
            [{"n": i + 1, "document": h.document} for i, h in enumerate(context.hits)]
            if titles
            else []
        ),
        "guest": {
            "key_id": key.id,
            "collection": key.collection,
            "budget": key.budget,
            "spent": key.spent,
            "remaining": key.remaining,
        },
        "budget": _guest_budget(context.budget),
        **({"preview": PREVIEW_NOTE} if plan.preview else {}),
    }


def veil(plan: AnswerPlan, context: AnswerContext, the_receipt: dict[str, Any]) -> dict[str, Any]:
    """The ``veil`` object of the response (a guest's: see the module's docstring)."""
    if plan.is_guest:
        return _guest_veil(plan, context, the_receipt)
    return VeilInfo(
        receipt=the_receipt, citations=context.citations, budget=context.budget
    ).model_dump()


def usage(plan: AnswerPlan, result: GenerationResult) -> dict[str, int]:
    """OpenAI's usage; a guest's prompt tokens are the public prompt's (no context)."""
    prompt = result.public_prompt_tokens if plan.is_guest else result.prompt_tokens
    completion = len(result.token_ids)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def finish_reason(result: GenerationResult) -> str:
    return result.finish_reason if result.finish_reason in ("stop", "length") else "stop"
