"""``POST /v1/chat/completions``: OpenAI-compatible chat with retrieval and a defense."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from companion.api.deps import EngineDep, KeysDep, PrincipalDep, RagDep, SettingsDep
from companion.api.keys import charge_guest, guest_key, guest_request, guest_veil
from companion.errors import APIError, ErrorCode, envelope, internal_error_message
from companion.protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    ChatCompletionResponse,
    Choice,
    Citation,
    Usage,
    VeilInfo,
)
from companion.settings import Settings
from py_core.errors import VeilError

if TYPE_CHECKING:
    from companion.rag.service import RagService

router = APIRouter(tags=["chat"])


def _where(hit: Any) -> dict[str, Any]:
    """The page and heading of a chunk, where the store and the citation model know them."""
    return {
        name: getattr(hit, name)
        for name in ("page", "heading")
        if name in Citation.model_fields and getattr(hit, name, None) is not None
    }


def citations_for(hits: list[Any]) -> list[Citation]:
    return [
        Citation(
            **_where(h),
            n=i + 1,
            chunk_id=h.chunk_id,
            document_id=h.document_id,
            document=h.document,
            collection=h.collection,
            chunk_index=h.index,
            start=h.start,
            end=h.end,
            score=round(h.score, 6),
            text=h.text,
        )
        for i, h in enumerate(hits)
    ]


class _Prepared:
    """Everything a generation needs, computed before the model is held."""

    guest: Any = None  # the guest key (companion.keys.GuestKey) when a guest asks

    def __init__(
        self,
        settings: Settings,
        rag: RagService,
        body: ChatCompletionRequest,
        history: list[dict[str, str]] | None = None,
        model: Any = None,
        is_guest: bool = False,
    ) -> None:
        from companion.decoding.config import DefenseConfig

        self.body = body
        self.model = model  # companion.models.ModelEntry; None: the engine's default
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
        self.max_tokens = (
            body.max_completion_tokens or body.max_tokens or settings.default_max_tokens
        )
        if self.max_tokens > settings.max_tokens_limit:
            raise APIError(
                400,
                ErrorCode.INVALID_REQUEST,
                f"max_tokens {self.max_tokens} is over this companion's limit of "
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
        try:
            self.defense = DefenseConfig.from_options(body.defense, body.defense_params)
        except VeilError as exc:
            raise APIError(400, ErrorCode.INVALID_REQUEST, str(exc), "defense_params") from exc
        self.temperature = body.temperature or 0.0
        self.hits: list[Any] = []  # the context, set by admit()
        self.budget: dict[str, Any] | None = None  # veil.budget, set by admit()
        self.citations = citations_for(self.hits)
        self.new_messages = [{"role": _role(m.role), "content": m.text()} for m in body.messages]
        self.messages = [*history, *self.new_messages]
        self.collection = _collection(settings, rag, body, is_guest)
        self.query_mode = body.retrieval_query or settings.followup_query
        self.layout = settings.prompt_layout
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.prefill_chunk = settings.prefill_chunk_tokens
        self.context_texts: list[str] = []  # the retrieved context after the token budget
        self.context: dict[str, Any] | None = None  # what the budget kept and cut

    def check_length(self, settings: Settings, engine: Any) -> None:
        """400 when the conversation alone (no context) is over ``max_prompt_tokens``."""
        from companion.rag.prompt import build_messages, encode_chat

        tokenizer = _lm(engine, self.model).tokenizer
        count = len(encode_chat(tokenizer, build_messages(self.messages, "")))
        if count > settings.max_prompt_tokens:
            raise APIError(
                400,
                ErrorCode.PROMPT_TOO_LONG,
                f"the conversation has {count:,} tokens; this companion's limit is "
                f"{settings.max_prompt_tokens:,} (max_prompt_tokens): send fewer or shorter "
                "messages",
                "messages",
            )

    def fit_context(self, settings: Settings, engine: Any) -> None:
        """Keep the retrieved chunks, best first, within ``context_token_budget`` tokens."""
        from companion.rag.prompt import fit_context, near_best

        if not self.hits:
            return
        fitted = fit_context(
            _lm(engine, self.model).tokenizer,
            [h.text for h in self.hits],
            settings.context_token_budget,
            keep=near_best([h.score for h in self.hits], settings.context_relative_score),
        )
        self.context_texts = fitted.texts
        self.context = fitted.report()
        for citation, kept in zip(self.citations, fitted.kept, strict=False):
            citation.included = kept.included
            citation.included_chars = kept.chars

    def admit(self, settings: Settings, rag: RagService, is_guest: bool) -> None:
        """Retrieve the context and charge its documents' lifetime budgets, before generation."""
        from companion.conversations.query import retrieval_query
        from companion.rag.budget import DocumentBudget
        from companion.rag.retrieval import request_options

        if not self.collection:
            return
        admission = DocumentBudget.for_settings(rag.store, settings).retrieve(
            rag,
            retrieval_query(self.messages, self.query_mode),
            self.collection,
            self.body.retrieval_top_k or settings.retrieval_top_k,
            defense=self.defense,
            max_tokens=self.max_tokens,
            is_guest=is_guest,
            answer_id=self.id,
            options=request_options(settings, self.body),
        )
        self.hits = admission.hits
        self.context_texts = [h.text for h in self.hits]
        self.budget = admission.to_dict(is_guest=is_guest)
        if not is_guest:  # a guest's answer never carries chunk text
            self.citations = citations_for(self.hits)


def _role(role: str) -> str:
    return "system" if role == "developer" else role


def _lm(engine: Any, model: Any) -> Any:
    """The loaded model: the engine's default, or ``model`` (loaded now if it is not yet)."""
    return engine.load() if model is None else engine.load(model)


def _collection(
    settings: Settings, rag: RagService, body: ChatCompletionRequest, is_guest: bool = False
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


def _resolve_model(settings: Settings, body: ChatCompletionRequest, engine: Any) -> Any:
    """The catalog entry a request names; None for the default model (or no ``model``)."""
    from companion.api.models import find_model

    if body.model is None or body.model == engine.model_id:
        return None
    return find_model(settings, body.model)


def _history(request: Request, body: ChatCompletionRequest, is_guest: bool) -> list[Any]:
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
    from companion.api.conversations import get_conversations

    conv = get_conversations(request).get(body.conversation_id)
    if conv is None:
        raise APIError(
            404,
            ErrorCode.NOT_FOUND,
            f"no conversation with id {body.conversation_id}",
            "conversation_id",
        )
    return [{"role": m.role, "content": m.content} for m in conv.messages]


def _save(request: Request, prep: _Prepared, answer: str, veil: dict[str, Any]) -> None:
    """Append this request's messages and the answer to its conversation, if it has one."""
    conv_id = prep.body.conversation_id
    if conv_id is None:
        return
    from companion.api.conversations import get_conversations

    store = get_conversations(request)
    try:
        for m in prep.new_messages:
            store.append(conv_id, m["role"], m["content"])
        store.append(conv_id, "assistant", answer, veil)
    except KeyError:  # deleted while the answer was generated: nothing to keep it in
        return


def _make_work(engine: Any, prep: _Prepared, result: Any) -> Any:
    def work(cancel: threading.Event) -> Iterator[str]:
        from companion.decoding.generate import generate_tokens
        from companion.decoding.noise import secure_generator
        from companion.rag.prompt import build_prompt

        lm = _lm(engine, prep.model)
        pieces = build_prompt(lm.tokenizer, prep.messages, prep.context_texts, prep.layout)
        generator = secure_generator(lm.device, prep.body.seed)
        own: dict[str, Any] = {}
        if not prep.defense.defense.private_pass:  # dp_vote: one prompt per document group
            own = _group_inputs(lm.tokenizer, prep)
        yield from generate_tokens(
            lm.model,
            lm.tokenizer,
            own.get("public_prompt_ids", pieces.prompt_ids),
            defense=prep.defense,
            generator=generator,
            context_text=pieces.context_text,
            public_prompt_ids=own.get("public_prompt_ids", pieces.public_prompt_ids),
            max_new_tokens=prep.max_tokens,
            temperature=prep.temperature,
            stop=[*prep.body.stop_list(), *getattr(lm, "stops", ())],
            cancel=cancel,
            result=result,
            prefill_chunk=prep.prefill_chunk,
            documents=own.get("documents", ()),
            prompt_for=own.get("prompt_for"),
        )

    return work


def _group_inputs(tokenizer: Any, prep: _Prepared) -> dict[str, Any]:
    """For a defense that runs its own passes (dp_vote): documents, group prompts, public prompt.

    The documents are the retrieved chunks with their document's id (every chunk of a
    document lands in the same group); the public prompt is the grounded one whether or
    not anything was retrieved, so it never depends on the documents.
    """
    from companion.rag.prompt import build_messages, build_prompt, encode_chat

    def prompt_for(context: str) -> list[int]:
        chunks = [context] if context else []
        return build_prompt(tokenizer, prep.messages, chunks, prep.layout).prompt_ids

    public = encode_chat(
        tokenizer, build_messages(prep.messages, "", layout=prep.layout, grounded=True)
    )
    return {
        "documents": [(str(h.document_id), h.text) for h in prep.hits],
        "prompt_for": prompt_for,
        "public_prompt_ids": public,
    }


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
) -> Any:
    """Without ``collection`` the answer retrieves from the default collection
    (``Settings.default_collection``, ``default``) when it has documents -- the chat
    page's default too; ``collection: null`` answers from no documents. The defense
    defaults to ``copy_aware`` with the registry's parameters (``GET /v1/defenses``),
    the same as the page. An unknown collection, model or conversation is a 404."""
    from companion.decoding.generate import GenerationResult

    key = guest_key(principal)
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
    history = await run_in_threadpool(_history, request, body, key is not None)
    prep = await run_in_threadpool(_Prepared, settings, rag, body, history, model, key is not None)
    _as_guest(prep, key)
    # 400 before any charge; loads a model that is not loaded yet, in a worker thread
    await run_in_threadpool(prep.check_length, settings, engine)
    result = GenerationResult()
    work = _make_work(engine, prep, result)
    model_id = model.id if model is not None else engine.model_id
    if not body.stream:
        async with engine.slot():
            _charge_guest(prep, keys)
            await run_in_threadpool(prep.admit, settings, rag, key is not None)
            await run_in_threadpool(prep.fit_context, settings, engine)
            async for _ in engine.run_stream(work):
                pass
        response = _completion(prep, model_id, result)
        await run_in_threadpool(
            _save, request, prep, result.text, _veil(prep, _receipt(prep, result))
        )
        return response
    # A full queue is a proper 503 before the stream starts; the model itself is taken
    # inside the stream, so a client that never reads the stream cannot hold it.
    engine.check_queue()
    _charge_guest(prep, keys)
    await run_in_threadpool(prep.admit, settings, rag, key is not None)
    await run_in_threadpool(prep.fit_context, settings, engine)
    return StreamingResponse(
        _sse(prep, engine, work, result, model_id, request),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _receipt(prep: _Prepared, result: Any) -> dict[str, Any]:
    """The answer's receipt, with what the context budget cut (``context``) when it retrieved."""
    receipt: dict[str, Any] = result.receipt.to_dict() if result.receipt else {}
    if prep.context is not None:
        receipt["context"] = prep.context
    details = getattr(result, "details", None) or {}
    if details:  # dp_vote: counts of what its vote did (functions of its noisy releases only)
        receipt["votes"] = {k: details[k] for k in _VOTE_FIELDS if k in details}
    return receipt


_VOTE_FIELDS = (
    "released_tokens",
    "released_tokens_allowed",
    "agreed_tokens",
    "weak_vote_tokens",
    "public_fallback_tokens",
    "budget_spent",
    "epsilon_store_level",
    "note",
)


def _completion(prep: _Prepared, model_id: str, result: Any) -> JSONResponse:
    receipt = _receipt(prep, result)
    response = ChatCompletionResponse(
        id=prep.id,
        created=prep.created,
        model=model_id,
        choices=[
            Choice(
                message=AssistantMessage(content=result.text),
                finish_reason=_finish(result.finish_reason),
            )
        ],
        usage=Usage(
            prompt_tokens=result.prompt_tokens,
            completion_tokens=len(result.token_ids),
            total_tokens=result.prompt_tokens + len(result.token_ids),
        ),
        veil=VeilInfo(receipt=receipt, citations=prep.citations, budget=prep.budget),
    )
    payload = response.model_dump()
    if prep.guest is not None:
        payload["veil"] = _veil(prep, receipt)
    return JSONResponse(payload)


def _as_guest(prep: _Prepared, key: Any) -> None:
    """A guest's answer never carries the chunks' text (see companion.api.keys)."""
    if key is not None:
        prep.guest = key
        prep.citations = []


def _charge_guest(prep: _Prepared, keys: Any) -> None:
    """A guest key pays the answer's calibrated epsilon before it is generated (403 if spent)."""
    if prep.guest is not None:
        prep.guest = charge_guest(keys, prep.guest, prep.defense, prep.max_tokens)


def _veil(prep: _Prepared, receipt: dict[str, Any]) -> dict[str, Any]:
    """The ``veil`` object: receipt and citations (a guest's: no text, titles if allowed)."""
    if prep.guest is not None:
        return {**guest_veil(receipt, prep.hits, prep.guest), "budget": prep.budget}
    return VeilInfo(receipt=receipt, citations=prep.citations, budget=prep.budget).model_dump()


def _finish(reason: str) -> str:
    return reason if reason in ("stop", "length") else "stop"


def _chunk(prep: _Prepared, model_id: str, delta: dict[str, Any], finish: str | None) -> str:
    payload = {
        "id": prep.id,
        "object": "chat.completion.chunk",
        "created": prep.created,
        "model": model_id,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    return "data: " + json.dumps(payload) + "\n\n"


async def _sse(
    prep: _Prepared, engine: Any, work: Any, result: Any, model_id: str, request: Request
) -> AsyncIterator[str]:
    yield _chunk(prep, model_id, {"role": "assistant", "content": ""}, None)
    try:
        async with engine.slot():
            async for delta in engine.run_stream(work):
                yield _chunk(prep, model_id, {"content": delta}, None)
    except APIError as exc:
        yield "data: " + json.dumps(envelope(exc.status, exc.code, exc.message)) + "\n\n"
        yield "data: [DONE]\n\n"
        return
    except VeilError as exc:
        yield "data: " + json.dumps(envelope(400, ErrorCode.INVALID_REQUEST, str(exc))) + "\n\n"
        yield "data: [DONE]\n\n"
        return
    except Exception as exc:  # never a dropped connection: an error event, then [DONE]
        message = internal_error_message(exc, "POST /v1/chat/completions (stream)")
        yield "data: " + json.dumps(envelope(500, ErrorCode.INTERNAL, message)) + "\n\n"
        yield "data: [DONE]\n\n"
        return
    final = json.loads(_chunk(prep, model_id, {}, _finish(result.finish_reason))[6:])
    final["veil"] = _veil(prep, _receipt(prep, result))
    await run_in_threadpool(_save, request, prep, result.text, final["veil"])
    completion = len(result.token_ids)
    final["usage"] = {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": result.prompt_tokens + completion,
    }
    yield "data: " + json.dumps(final) + "\n\n"
    yield "data: [DONE]\n\n"


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
        "defense": DEFAULT_DEFENSE,
        "upload": {
            "extensions": list(SUPPORTED_SUFFIXES),
            "max_upload_bytes": settings.max_upload_bytes,
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
