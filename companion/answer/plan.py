"""An answer's plan: every choice made before the model is held, validated once.

:func:`plan_answer` turns a chat request (and the stored conversation before it)
into an :class:`AnswerPlan`: the principal it answers (the owner, or a guest key),
the limits checked, the defense and its parameters, the collection and the
retrieval options, the prompt layout and the generation settings.  Nothing here
touches the model or the documents' text.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from companion.errors import APIError, ErrorCode
from companion.rag.retrieval import RetrievalOptions
from py_core.errors import VeilError

if TYPE_CHECKING:
    from companion.decoding.config import DefenseConfig
    from companion.protocol import ChatCompletionRequest
    from companion.rag.service import RagService
    from companion.settings import Settings


@dataclass(slots=True)
class AnswerPlan:
    """What one answer will do; the answer service's input."""

    messages: list[dict[str, str]]  # the whole conversation (stored history first)
    defense: DefenseConfig
    max_tokens: int
    new_messages: list[dict[str, str]] = field(default_factory=list)  # to store after it
    collection: str | None = None  # None: no retrieval
    top_k: int = 3
    retrieval: RetrievalOptions | None = None  # None: the defaults (RetrievalOptions())
    query_mode: str = "user_turns"
    layout: str = "system"
    temperature: float = 0.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    prefill_chunk: int = 256
    repetition_penalty: float = 1.0
    stop_loops: int = 0  # end an answer repeating one block this many times (0: never)
    # A guest's formal answer: the context token budget its prefill is padded to, so its
    # timing does not depend on what was retrieved (None: no padding).
    pad_context_to: int | None = None
    model: Any = None  # companion.models.ModelEntry; None: the engine's default model
    guest: Any = None  # companion.keys.GuestKey when a guest asks
    conversation_id: str | None = None
    # The owner previews what ``guest`` would receive: the guest's view, nothing charged
    # (neither the key nor the documents' lifetime budgets).
    preview: bool = False
    # Read from the collection's DP digest (companion/answer/digest.py): its receipt. The
    # answer then decodes without noise, reads no document and charges nothing.
    digest: dict[str, Any] | None = None
    id: str = field(default_factory=lambda: "chatcmpl-" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def is_guest(self) -> bool:
        return self.guest is not None

    @classmethod
    def for_question(
        cls, question: str, defense: str | DefenseConfig = "none", max_tokens: int = 256, **kw: Any
    ) -> AnswerPlan:
        """A plan for one question asked alone (an evaluation's or a benchmark's)."""
        from companion.decoding.config import DefenseConfig

        config = DefenseConfig.from_options(defense) if isinstance(defense, str) else defense
        return cls(
            messages=[{"role": "user", "content": question}],
            defense=config,
            max_tokens=max_tokens,
            **kw,
        )


def _role(role: str) -> str:
    return "system" if role == "developer" else role


def _collection(
    settings: Settings, rag: RagService, body: ChatCompletionRequest, is_guest: bool
) -> str | None:
    """The collection to retrieve from: the one asked for (404 if it does not exist), the
    default one when none was named (if it has documents), or none (``collection: null``).
    A guest's 404 does not list the other collections."""
    names = {c["name"] for c in rag.store.collections()}
    if "collection" in body.model_fields_set or body.collection is not None:
        if body.collection is None:
            return None
        if body.collection not in names:
            known = "" if is_guest else f" (there are: {', '.join(sorted(names)) or 'none yet'})"
            raise APIError(
                404,
                ErrorCode.NOT_FOUND,
                f"no collection named {body.collection!r}{known}; upload documents to it "
                "first, or leave 'collection' out to use the default one",
                "collection",
            )
        return body.collection
    default = settings.default_collection
    return default if default and default in names else None


def _defense(settings: Settings, body: ChatCompletionRequest, is_guest: bool) -> DefenseConfig:
    """The request's defense; an owner who names none gets ``settings.owner_defense``.

    There is no one to hide the owner's own documents from, so by default the owner
    reads them plainly; a guest's defense is the key's (``guest_request``).
    """
    from companion.decoding.config import DefenseConfig

    name = body.defense
    if not is_guest and "defense" not in body.model_fields_set:
        name = settings.owner_defense
    try:
        return DefenseConfig.from_options(name, body.defense_params)
    except VeilError as exc:
        raise APIError(400, ErrorCode.INVALID_REQUEST, str(exc), "defense_params") from exc


def _top_k(settings: Settings, body: ChatCompletionRequest, defense: DefenseConfig) -> int:
    """The documents the answer reads: the defense's own context size where it sets one
    (dp_answer's groups need many), else the request's or the settings' top k."""
    size = defense.defense.context_size
    if size is not None:
        return int(size(defense.params))
    return body.retrieval_top_k or settings.retrieval_top_k


def plan_answer(
    settings: Settings,
    rag: RagService,
    body: ChatCompletionRequest,
    history: list[dict[str, str]] | None = None,
    *,
    model: Any = None,
    guest: Any = None,
) -> AnswerPlan:
    """The plan of ``body``'s answer; 400/404 for what breaks a limit or names nothing."""
    from companion.rag.retrieval import request_options

    history = history or []
    count = len(history) + len(body.messages)
    if count > settings.max_messages:
        raise APIError(
            400,
            ErrorCode.PROMPT_TOO_LONG,
            f"the request has {count} messages (the conversation's included); this "
            f"companion's limit is {settings.max_messages} (max_messages)",
            "messages",
        )
    max_tokens = body.max_completion_tokens or body.max_tokens or settings.default_max_tokens
    if max_tokens > settings.max_tokens_limit:
        raise APIError(
            400,
            ErrorCode.INVALID_REQUEST,
            f"max_tokens {max_tokens} is over this companion's limit of "
            f"{settings.max_tokens_limit}",
            "max_tokens",
        )
    if body.seed is not None and not settings.allow_seed:
        raise APIError(
            400,
            ErrorCode.INSECURE_RANDOMNESS,
            "seed is refused: the defenses' noise comes from a cryptographic random source "
            "(a fixed seed is for tests and experiments only)",
            "seed",
        )
    is_guest = guest is not None
    defense = _defense(settings, body, is_guest)
    formal = bool(defense.defense.guarantee.formal)
    new_messages = [{"role": _role(m.role), "content": m.text()} for m in body.messages]
    return AnswerPlan(
        messages=[*history, *new_messages],
        new_messages=new_messages,
        defense=defense,
        max_tokens=max_tokens,
        collection=_collection(settings, rag, body, is_guest),
        top_k=_top_k(settings, body, defense),
        retrieval=request_options(settings, body),
        query_mode=body.retrieval_query or settings.followup_query,
        layout=settings.prompt_layout,
        temperature=body.temperature or 0.0,
        stop=tuple(body.stop_list()),
        seed=body.seed,
        prefill_chunk=settings.prefill_chunk_tokens,
        repetition_penalty=settings.repetition_penalty,
        stop_loops=settings.stop_loops,
        pad_context_to=settings.context_token_budget if is_guest and formal else None,
        model=model,
        guest=guest,
        conversation_id=body.conversation_id,
    )
