"""``POST /v1/chat/completions``: OpenAI-compatible chat with retrieval and a defense.

HTTP only: the guest key's terms, the stored conversation, the model slot, the
plain and the streamed (SSE) response.  What the answer is -- its plan, context,
generation, receipt and what a guest may see -- is :mod:`companion.answer`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from companion.answer import AnswerContext, AnswerPlan, admit, fit, plan_answer, start
from companion.answer import result as answer_result
from companion.answer.cache import answer_scope, kept_veil, served_again
from companion.answer.digest import from_digest
from companion.answer.guest import charge_guest, guest_request
from companion.api.deps import (
    ConversationsDep,
    EngineDep,
    KeysDep,
    PrincipalDep,
    RagDep,
    SettingsDep,
)
from companion.errors import (
    APIError,
    ErrorCode,
    envelope,
    internal_error_message,
    storage_error_response,
)
from companion.protocol import ChatCompletionRequest, ChatCompletionResponse
from companion.settings import Settings
from py_core.errors import VeilError

if TYPE_CHECKING:
    from companion.engine import Engine
    from companion.rag.service import RagService

router = APIRouter(tags=["chat"])


def _lm(engine: Engine, model: Any) -> Any:
    """The loaded model: the engine's default, or ``model`` (loaded now if it is not yet)."""
    return engine.load() if model is None else engine.load(model)


def _check_length(settings: Settings, engine: Engine, plan: AnswerPlan) -> None:
    """400 when the conversation alone (no context) is over ``max_prompt_tokens``."""
    from companion.rag.prompt import build_messages, encode_chat

    tokenizer = _lm(engine, plan.model).tokenizer
    count = len(encode_chat(tokenizer, build_messages(plan.messages, "")))
    if count > settings.max_prompt_tokens:
        raise APIError(
            400,
            ErrorCode.PROMPT_TOO_LONG,
            f"the conversation has {count:,} tokens; this companion's limit is "
            f"{settings.max_prompt_tokens:,} (max_prompt_tokens): send fewer or shorter "
            "messages",
            "messages",
        )


def _resolve_model(settings: Settings, body: ChatCompletionRequest, engine: Engine) -> Any:
    """The catalog entry a request names; None for the default model (or no ``model``)."""
    from companion.api.models import find_model

    if body.model is None or body.model == engine.model_id:
        return None
    return find_model(settings, body.model)


def _history(conversations: Any, body: ChatCompletionRequest, is_guest: bool) -> list[Any]:
    """The stored conversation's messages before this request's (404 if it is not there)."""
    if body.conversation_id is None:
        return []
    if is_guest:
        raise APIError(
            403,
            ErrorCode.GUEST_FORBIDDEN,
            "a guest key cannot use stored conversations; send the whole conversation in "
            "'messages' and leave conversation_id out",
            "conversation_id",
        )
    conv = conversations.get(body.conversation_id)
    if conv is None:
        raise APIError(
            404,
            ErrorCode.NOT_FOUND,
            f"no conversation with id {body.conversation_id}",
            "conversation_id",
        )
    messages = conv.messages
    if body.replace_from is not None:  # regenerate or edit: the history ends before it
        at = [i for i, m in enumerate(messages) if m.id == body.replace_from and m.role == "user"]
        if not at:
            raise APIError(
                404,
                ErrorCode.NOT_FOUND,
                f"conversation {body.conversation_id} has no question with message id "
                f"{body.replace_from} to answer again",
                "replace_from",
            )
        messages = messages[: at[0]]
    return [{"role": m.role, "content": m.content} for m in messages]


def _check_replace(body: ChatCompletionRequest) -> None:
    if body.replace_from is not None and body.conversation_id is None:
        raise APIError(
            400,
            ErrorCode.INVALID_REQUEST,
            "replace_from names a message of a stored conversation; send conversation_id too",
            "replace_from",
        )


def _save(
    conversations: Any,
    plan: AnswerPlan,
    replace_from: int | None,
    answer: str,
    veil: dict[str, Any],
) -> dict[str, Any] | None:
    """Keep this request's messages and the answer in its conversation, if it has one:
    appended, or in place of ``replace_from`` and every message after it.  What was kept
    (the conversation's id and the new messages' ids), or None."""
    if plan.conversation_id is None:
        return None
    turns: list[tuple[str, str, dict[str, Any] | None]] = [
        (m["role"], m["content"], None) for m in plan.new_messages
    ]
    turns.append(("assistant", answer, veil))
    try:
        if replace_from is not None:
            kept = conversations.replace_from(plan.conversation_id, replace_from, turns)
        else:
            kept = [conversations.append(plan.conversation_id, *turn) for turn in turns]
    except KeyError:  # deleted while the answer was generated: nothing to keep it in
        return None
    return {"id": plan.conversation_id, "message_ids": [m.id for m in kept]}


class _Answer:
    """One request's answer as the engine's worker thread makes it."""

    def __init__(self, engine: Engine, plan: AnswerPlan, context: AnswerContext) -> None:
        self.engine = engine
        self.plan = plan
        self.context = context
        self.run: Any = None

    def work(self, cancel: Any) -> Any:
        self.run = start(self.plan, self.context, _lm(self.engine, self.plan.model), cancel)
        return iter(self.run)

    def parts(self) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """(result, veil, usage) once the generation has ended (an empty result if the
        engine never started it)."""
        from companion.decoding.generate import GenerationResult

        result = self.run.result if self.run is not None else GenerationResult()
        the_receipt = answer_result.receipt(self.plan, self.context, result)
        veil = answer_result.veil(self.plan, self.context, the_receipt)
        return result, veil, answer_result.usage(self.plan, result)


def _prepare(
    settings: Settings,
    rag: RagService,
    engine: Engine,
    plan: AnswerPlan,
    confirm: str | None = None,
) -> AnswerContext:
    """Retrieve and charge, then fit the context (in a worker thread); with ``confirm``
    (an estimate's), exactly that estimate's charges or a 409 with nothing charged."""
    context = admit(plan, settings, rag, expect=None if confirm is None else _confirmed(confirm))
    fit(
        context,
        _lm(engine, plan.model).tokenizer,
        settings,
        titles=settings.prompt_titles and not plan.is_guest,
    )
    return context


def _confirmed(confirm: str) -> Any:
    """The check of an owner's confirmed estimate, run inside the charge's transaction."""

    def check(fingerprint: str) -> None:
        if not hmac.compare_digest(fingerprint, confirm):
            raise APIError(
                409,
                ErrorCode.STATE_CONFLICT,
                "the documents' budgets changed since the estimate this request confirms "
                "(another answer charged them, or documents were added, removed or reset): "
                "nothing was charged; ask POST /v1/budget/estimate again",
                "budget_confirm",
            )

    return check


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletionResponse,
    summary="Chat completion (OpenAI-compatible) with retrieval and a privacy-aware decoding defense",
)
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    settings: SettingsDep,
    rag: RagDep,
    engine: EngineDep,
    principal: PrincipalDep,
    keys: KeysDep,
    conversations: ConversationsDep,
) -> Any:
    """Without ``collection`` the answer retrieves from the default collection
    (``Settings.default_collection``, ``default``) when it has documents -- the chat
    page's default too; ``collection: null`` answers from no documents. The owner's
    answers default to ``Settings.owner_defense`` (``none``: the owner reads their own
    documents plainly); a guest's defense is the key's. An unknown collection, model or
    conversation is a 404."""
    key = principal.key if principal.kind == "guest" else None
    preview = _preview_key(request, principal, keys)
    if preview is not None:  # the owner sees what this key would receive
        key = preview
    if key is not None:  # the key's collection, defense and parameters, or 403
        body = guest_request(body, key, settings)
    model = _resolve_model(settings, body, engine)
    if key is not None and model is not None:
        raise APIError(
            403,
            ErrorCode.GUEST_FORBIDDEN,
            f"a guest key chats with the companion's default model {engine.model_id!r} only",
            "model",
        )
    _check_replace(body)
    history = await run_in_threadpool(_history, conversations, body, key is not None)
    plan = await run_in_threadpool(
        plan_answer, settings, rag, body, history, model=model, guest=key
    )
    plan.preview = preview is not None
    # The engine that runs this answer's defense (vLLM hands the ones it cannot run to the
    # in-process engine beside it: companion/vllm/engine.py), or a 400 before any charge;
    # an engine without the method runs every defense.
    engine_for = getattr(engine, "engine_for", None)
    if engine_for is not None:
        engine = engine_for(plan)
    # 400 before any charge; loads a model that is not loaded yet, in a worker thread
    await run_in_threadpool(_check_length, settings, engine, plan)
    model_id = model.id if model is not None else engine.model_id
    # A guest's formal answer released before for this question: served again, before
    # anything is charged (companion/answer/cache.py says why that reveals nothing).
    scope = answer_scope(plan, model_id) if rag.answers is not None else None
    if scope is not None and not body.fresh:
        hit = await run_in_threadpool(rag.answers.lookup, scope, plan.messages)
        if hit is not None:
            return _served_again(plan, model_id, hit, body)
    # A question the collection's DP digest speaks to: read from it, charged nothing.
    digested = await run_in_threadpool(from_digest, rag, plan, settings)
    if digested is not None:
        plan, context = digested
    remember = _remember(rag, None if plan.preview else scope, plan)
    if not body.stream:
        async with engine.slot():
            if digested is None:
                _charge(plan, keys)
                context = await run_in_threadpool(
                    _prepare, settings, rag, engine, plan, body.budget_confirm
                )
            answer = _Answer(engine, plan, context)
            async for _ in engine.run_stream(answer.work):
                pass
        result, veil, usage = answer.parts()
        await run_in_threadpool(remember, result, veil, usage)
        kept = await run_in_threadpool(
            _save, conversations, plan, body.replace_from, result.text, veil
        )
        completion = _completion(plan, model_id, result, veil, usage)
        if kept is not None:
            completion["conversation"] = kept
        return JSONResponse(completion, headers=_ignored_header(body))
    # A full queue is a proper 503 before the stream starts; the model itself is taken
    # inside the stream, so a client that never reads the stream cannot hold it.
    engine.check_queue()
    if digested is None:
        _charge(plan, keys)
        context = await run_in_threadpool(
            _prepare, settings, rag, engine, plan, body.budget_confirm
        )
    return StreamingResponse(
        _sse(
            plan,
            engine,
            _Answer(engine, plan, context),
            model_id,
            conversations,
            body.replace_from,
            remember,
        ),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **_ignored_header(body)},
    )


def _remember(rag: RagService, scope: str | None, plan: AnswerPlan) -> Any:
    """What keeps a finished answer under ``scope`` (nothing when it is None); a cancelled
    or failed generation is not kept (it was not released whole)."""

    def keep(result: Any, veil: dict[str, Any], usage: dict[str, int]) -> None:
        if scope is None or result.finish_reason not in ("stop", "length"):
            return
        finish = answer_result.finish_reason(result)
        rag.answers.store(scope, plan.messages, result.text, kept_veil(veil, usage, finish))

    return keep


def _served_again(plan: AnswerPlan, model_id: str, hit: Any, body: ChatCompletionRequest) -> Any:
    """The response of a cached answer: the same text, its veil with the key's budget now."""
    veil, usage, finish = served_again(
        hit, plan.guest, preview_note=answer_result.PREVIEW_NOTE if plan.preview else None
    )
    headers = _ignored_header(body)
    if not body.stream:
        result = SimpleNamespace(text=hit.answer, finish_reason=finish)
        completion = _completion(plan, model_id, result, veil, usage)
        return JSONResponse(completion, headers=headers)

    async def events() -> AsyncIterator[str]:
        yield _event(_chunk(plan, model_id, {"role": "assistant", "content": ""}, None))
        yield _event(_chunk(plan, model_id, {"content": hit.answer}, None))
        final = _chunk(plan, model_id, {}, finish)
        yield _event(final | {"veil": veil, "usage": usage})
        yield _event("[DONE]")

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
    )


def _ignored_header(body: ChatCompletionRequest) -> dict[str, str]:
    """``X-Veil-Ignored: tools, tool_choice``: the fields accepted and not acted on."""
    ignored = body.ignored_fields()
    return {"X-Veil-Ignored": ", ".join(ignored)} if ignored else {}


PREVIEW_HEADER = "X-Veil-Preview-Guest"


def _preview_key(request: Request, principal: Any, keys: Any) -> Any:
    """The guest key whose view the owner asks to preview (``X-Veil-Preview-Guest: <id>``)."""
    raw = request.headers.get(PREVIEW_HEADER)
    if raw is None:
        return None
    if not principal.is_owner:
        raise APIError(
            403,
            ErrorCode.GUEST_FORBIDDEN,
            f"only the owner can preview a guest's view; leave the {PREVIEW_HEADER} header out",
        )
    if not raw.strip().isdigit() or not raw.strip().isascii():
        raise APIError(
            400,
            ErrorCode.INVALID_REQUEST,
            f"{PREVIEW_HEADER} must be a guest key's id (a number, as GET /v1/keys lists "
            f"them); got {raw[:40]!r}",
        )
    key = keys.get(int(raw.strip()))
    if key is None:
        raise APIError(404, ErrorCode.NOT_FOUND, f"no guest key with id {raw.strip()}")
    if key.status() != "active":
        raise APIError(
            403,
            ErrorCode.KEY_REVOKED if key.status() == "revoked" else ErrorCode.KEY_EXPIRED,
            f"guest key {key.id} is {key.status()}: its holder gets no answer, so there is "
            "nothing to preview",
        )
    return key


def _charge(plan: AnswerPlan, keys: Any) -> None:
    """A guest key pays the answer's calibrated epsilon before it is generated (403 if spent);
    the owner's preview of a key's view charges nothing."""
    if plan.guest is not None and not plan.preview:
        plan.guest = charge_guest(keys, plan.guest, plan.defense, plan.max_tokens)


def _completion(
    plan: AnswerPlan, model_id: str, result: Any, veil: dict[str, Any], usage: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": plan.id,
        "object": "chat.completion",
        "created": plan.created,
        "model": model_id,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.text},
                "finish_reason": answer_result.finish_reason(result),
                "logprobs": None,
            }
        ],
        "usage": usage,
        "veil": veil,
    }


QUEUE_KEEPALIVE_S = 10.0  # a waiting stream says where it stands at least this often


async def _wait_for_slot(engine: Engine, held: contextlib.AsyncExitStack) -> AsyncIterator[str]:
    """Take the model slot into ``held``; while waiting, yield SSE comments
    (``: queued, 2 ahead``) each time the queue moves, and at least every
    QUEUE_KEEPALIVE_S. OpenAI clients skip comment lines."""
    positions: asyncio.Queue[int] = asyncio.Queue()
    entering = asyncio.ensure_future(held.enter_async_context(engine.slot(positions.put_nowait)))
    told: int | None = None
    told_at = time.monotonic()
    try:
        while True:
            await asyncio.wait({entering}, timeout=0.1)
            if entering.done():
                break
            ahead = told
            while not positions.empty():
                ahead = positions.get_nowait()
            if ahead != told or time.monotonic() - told_at >= QUEUE_KEEPALIVE_S:
                told, told_at = ahead, time.monotonic()
                yield f": queued, {ahead} ahead\n\n"
        entering.result()  # the slot, or its 503
    finally:
        if not entering.done():  # the client went away while waiting: leave the queue
            entering.cancel()
            with contextlib.suppress(BaseException):
                await entering


def _event(payload: dict[str, Any] | str) -> str:
    """One server-sent event (``[DONE]`` as it is)."""
    return "data: " + (payload if isinstance(payload, str) else json.dumps(payload)) + "\n\n"


def _chunk(
    plan: AnswerPlan, model_id: str, delta: dict[str, Any], finish: str | None
) -> dict[str, Any]:
    return {
        "id": plan.id,
        "object": "chat.completion.chunk",
        "created": plan.created,
        "model": model_id,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


async def _sse(
    plan: AnswerPlan,
    engine: Engine,
    answer: _Answer,
    model_id: str,
    conversations: Any,
    replace_from: int | None = None,
    remember: Any = None,
) -> AsyncIterator[str]:
    yield _event(_chunk(plan, model_id, {"role": "assistant", "content": ""}, None))
    try:
        async with contextlib.AsyncExitStack() as held:
            async for comment in _wait_for_slot(engine, held):
                yield comment
            async for delta in engine.run_stream(answer.work):
                yield _event(_chunk(plan, model_id, {"content": delta}, None))
    except APIError as exc:
        yield _event(envelope(exc.status, exc.code, exc.message))
        yield _event("[DONE]")
        return
    except VeilError as exc:
        yield _event(envelope(400, ErrorCode.INVALID_REQUEST, str(exc)))
        yield _event("[DONE]")
        return
    except Exception as exc:  # never a dropped connection: an error event, then [DONE]
        message = internal_error_message(exc, "POST /v1/chat/completions (stream)")
        yield _event(envelope(500, ErrorCode.INTERNAL, message))
        yield _event("[DONE]")
        return
    result, veil, usage = answer.parts()
    if remember is not None:
        await run_in_threadpool(remember, result, veil, usage)
    final = _chunk(plan, model_id, {}, answer_result.finish_reason(result))
    final["veil"] = veil
    try:
        kept = await run_in_threadpool(_save, conversations, plan, replace_from, result.text, veil)
    except Exception as exc:  # a full disk: the answer is shown, the event says it was not kept
        stored = storage_error_response(exc)
        if stored is None:
            raise
        yield _event(final | {"usage": usage})
        yield _event(json.loads(bytes(stored.body)))
        yield _event("[DONE]")
        return
    final["usage"] = usage
    if kept is not None:  # the stored messages' ids (the page's regenerate and edit)
        final["conversation"] = kept
    yield _event(final)
    yield _event("[DONE]")


@router.get(
    "/v1/chat/settings",
    summary="The chat defaults the page uses (the same as the API's): collection, tokens, "
    "retrieval, defense, accepted files",
)
def chat_settings(settings: SettingsDep, engine: EngineDep) -> dict[str, Any]:
    """One source for the page and the API: what a request that leaves a field out gets."""
    from companion.conversations.query import QUERY_MODES
    from companion.decoding.registry import DEFAULT_DEFENSE
    from companion.rag.ingest import SUPPORTED_SUFFIXES

    return {
        "model": engine.model_id,
        "default_collection": settings.default_collection,
        "retrieval_top_k": settings.retrieval_top_k,
        "retrieval_mode": settings.retrieval_mode,
        "retrieval_modes": ["hybrid", "vector", "bm25"],
        "retrieval_min_score": settings.retrieval_min_score,
        "default_max_tokens": settings.default_max_tokens,
        "max_tokens_limit": settings.max_tokens_limit,
        "followup_query": settings.followup_query,
        "followup_query_modes": list(QUERY_MODES),
        "defense": settings.owner_defense,  # the owner's; a guest's is the key's
        "guest_defense": DEFAULT_DEFENSE,
        "upload": {
            "extensions": list(SUPPORTED_SUFFIXES),
            "max_upload_bytes": settings.max_upload_bytes,
            "max_upload_files": settings.max_upload_files,
        },
    }


@router.get("/chat/setup", include_in_schema=False)  # public, like the page itself
def chat_setup(settings: SettingsDep) -> dict[str, Any]:
    """Where this server's token is, in words: the page shows it before it has the token."""
    import os

    home = settings.resolved_home()
    if settings.token_path:
        why = "the token file was set with VEIL_TOKEN_PATH"
    elif os.environ.get("VEIL_HOME") and Path(os.environ["VEIL_HOME"]) == home:
        why = f"this server's home folder {home} was set with VEIL_HOME"
    elif settings.home:
        why = f"this server was started with the home folder {home}"
    else:
        why = f"the default home folder {home} (set VEIL_HOME to use another)"
    token = settings.resolved_token_path()
    return {
        "token_file": str(token),
        "home": str(home),
        "explanation": f"The access token is the line in the file {token}: {why}. "
        "'veil serve' also prints it when it starts.",
    }
