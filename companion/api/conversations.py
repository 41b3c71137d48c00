"""``/v1/conversations``: the chat page's conversations, kept by the companion (owner only).

* ``GET /v1/conversations`` lists them (newest activity first, no messages);
  ``?q=words`` only those whose title or one of whose messages has every word, each
  with ``match``: where (``title`` or ``message``), the message's id and role, and a
  snippet of it with the matched words between U+0002 and U+0003;
* ``POST /v1/conversations`` starts one (a title and the page's settings for it);
* ``GET /v1/conversations/{id}`` returns one with its messages, each answer with
  its ``veil`` object (receipt, citations, budget);
* ``PATCH /v1/conversations/{id}`` renames it or changes its settings;
* ``DELETE /v1/conversations/{id}`` deletes it and its messages;
* ``GET /v1/conversations/{id}/export`` gives it as a Markdown file.

A chat request with ``conversation_id`` appends its last user message and the
answer to that conversation (companion/api/chat.py).  Guests can use none of
this: the routes are not in :data:`companion.keys.GUEST_ROUTES`, and a guest's
chat request that names a conversation is refused.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from companion.api.deps import ConversationsDep, OwnerDep, get_conversations
from companion.conversations.store import MAX_TITLE, to_markdown
from companion.errors import APIError, ErrorCode
from py_core.errors import VeilError

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])
__all__ = ["get_conversations", "router"]  # get_conversations: the old import path

ConvId = Annotated[
    str, Path(pattern=r"^conv_[0-9a-f]{24}$", description="a conversation id (conv_...)")
]


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field("New conversation", max_length=MAX_TITLE)
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="what the page chose for it: model, collection, use_documents, defense, "
        "defense_params, max_tokens",
    )


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(None, max_length=MAX_TITLE)
    settings: dict[str, Any] | None = None


def _missing(conv_id: str) -> APIError:
    return APIError(404, ErrorCode.NOT_FOUND, f"no conversation with id {conv_id}")


def _invalid(exc: VeilError) -> APIError:
    return APIError(400, ErrorCode.INVALID_REQUEST, str(exc))


@router.get("", summary="List conversations (newest first, without their messages), or search them")
def list_conversations(
    conversations: ConversationsDep,
    owner: OwnerDep,
    q: Annotated[
        str | None,
        Query(
            max_length=500,
            description="words: only the conversations whose title or one of whose "
            "messages has every one (a word or a word's start, any case)",
        ),
    ] = None,
) -> dict[str, Any]:
    if q is None or not q.strip():
        return {"data": [c.to_dict() for c in conversations.list()]}
    found = conversations.search(q)
    return {"data": [c.to_dict() | {"match": hit.to_dict()} for c, hit in found], "query": q}


@router.post("", status_code=201, summary="Start a conversation")
def create_conversation(
    body: ConversationCreate, conversations: ConversationsDep, owner: OwnerDep
) -> dict[str, Any]:
    try:
        conv = conversations.create(body.title, body.settings)
    except VeilError as exc:
        raise _invalid(exc) from exc
    return conv.to_dict(messages=True)


@router.get("/{conv_id}", summary="One conversation with its messages")
def get_conversation(
    conv_id: ConvId, conversations: ConversationsDep, owner: OwnerDep
) -> dict[str, Any]:
    conv = conversations.get(conv_id)
    if conv is None:
        raise _missing(conv_id)
    return conv.to_dict(messages=True)


@router.patch("/{conv_id}", summary="Rename a conversation or change its settings")
def update_conversation(
    conv_id: ConvId, body: ConversationUpdate, conversations: ConversationsDep, owner: OwnerDep
) -> dict[str, Any]:
    try:
        conv = conversations.update(conv_id, title=body.title, settings=body.settings)
    except VeilError as exc:
        raise _invalid(exc) from exc
    if conv is None:
        raise _missing(conv_id)
    return conv.to_dict()


@router.delete("/{conv_id}", summary="Delete a conversation and its messages")
def delete_conversation(
    conv_id: ConvId, conversations: ConversationsDep, owner: OwnerDep
) -> dict[str, Any]:
    if not conversations.delete(conv_id):
        raise _missing(conv_id)
    return {"deleted": True, "id": conv_id}


@router.get(
    "/{conv_id}/export",
    summary="A conversation as a Markdown file",
    response_class=Response,
    responses={200: {"content": {"text/markdown": {}}}},
)
def export_conversation(
    conv_id: ConvId, conversations: ConversationsDep, owner: OwnerDep
) -> Response:
    conv = conversations.get(conv_id)
    if conv is None:
        raise _missing(conv_id)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", conv.title).strip("-.")[:60] or "conversation"
    return Response(
        to_markdown(conv),
        media_type="text/markdown; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{stem}.md"'},
    )
