"""``POST /v1/chat/completions``: OpenAI-compatible chat with retrieval and a defense."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
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


def citations_for(hits: list[Any]) -> list[Citation]:
    return [
        Citation(
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

    def __init__(self, settings: Settings, rag: RagService, body: ChatCompletionRequest) -> None:
        from companion.decoding.config import DefenseConfig

        self.body = body
        if len(body.messages) > settings.max_messages:
            raise APIError(
                400,
                ErrorCode.PROMPT_TOO_LONG,
                f"the request has {len(body.messages)} messages; this companion's limit is "
                f"{settings.max_messages} (max_messages)",
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
        self.messages = [{"role": _role(m.role), "content": m.text()} for m in body.messages]
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.prefill_chunk = settings.prefill_chunk_tokens
        self.context_texts: list[str] = []  # the retrieved context after the token budget
        self.context: dict[str, Any] | None = None  # what the budget kept and cut

    def check_length(self, settings: Settings, engine: Any) -> None:
        """400 when the conversation alone (no context) is over ``max_prompt_tokens``."""
        from companion.rag.prompt import build_messages, encode_chat

        tokenizer = engine.load().tokenizer
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
        from companion.rag.prompt import fit_context

        if not self.hits:
            return
        fitted = fit_context(
            engine.load().tokenizer, [h.text for h in self.hits], settings.context_token_budget
        )
        self.context_texts = fitted.texts
        self.context = fitted.report()
        for citation, kept in zip(self.citations, fitted.kept, strict=False):
            citation.included = kept.included
            citation.included_chars = kept.chars

    def admit(self, settings: Settings, rag: RagService, is_guest: bool) -> None:
        """Retrieve the context and charge its documents' lifetime budgets, before generation."""
        from companion.rag.budget import DocumentBudget

        if not self.body.collection:
            return
        admission = DocumentBudget.for_settings(rag.store, settings).retrieve(
            rag,
            self.body.last_user_text(),
            self.body.collection,
            self.body.retrieval_top_k or settings.retrieval_top_k,
            defense=self.defense,
            max_tokens=self.max_tokens,
            is_guest=is_guest,
            answer_id=self.id,
        )
        self.hits = admission.hits
        self.context_texts = [h.text for h in self.hits]
        self.budget = admission.to_dict(is_guest=is_guest)
        if not is_guest:  # a guest's answer never carries chunk text
            self.citations = citations_for(self.hits)


def _role(role: str) -> str:
    return "system" if role == "developer" else role


def _make_work(engine: Any, prep: _Prepared, result: Any) -> Any:
    def work(cancel: threading.Event) -> Iterator[str]:
        from companion.decoding.generate import generate_tokens
        from companion.decoding.noise import secure_generator
        from companion.rag.prompt import build_prompt

        lm = engine.load()
        pieces = build_prompt(lm.tokenizer, prep.messages, prep.context_texts)
        generator = secure_generator(lm.device, prep.body.seed)
        yield from generate_tokens(
            lm.model,
            lm.tokenizer,
            pieces.prompt_ids,
            defense=prep.defense,
            generator=generator,
            context_text=pieces.context_text,
            public_prompt_ids=pieces.public_prompt_ids,
            max_new_tokens=prep.max_tokens,
            temperature=prep.temperature,
            stop=prep.body.stop_list(),
            cancel=cancel,
            result=result,
            prefill_chunk=prep.prefill_chunk,
        )

    return work


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletionResponse,
    summary="Chat completion (OpenAI-compatible) with retrieval and a privacy-aware decoding defense",
)
async def chat_completions(
    body: ChatCompletionRequest,
    settings: SettingsDep,
    rag: RagDep,
    engine: EngineDep,
    principal: PrincipalDep,
    keys: KeysDep,
) -> Any:
    from companion.decoding.generate import GenerationResult

    key = guest_key(principal)
    if key is not None:  # the key's collection, defense and parameters, or 403
        body = guest_request(body, key, settings)
    prep = await run_in_threadpool(_Prepared, settings, rag, body)
    _as_guest(prep, key)
    await run_in_threadpool(prep.check_length, settings, engine)  # 400 before any charge
    result = GenerationResult()
    work = _make_work(engine, prep, result)
    if not body.stream:
        async with engine.slot():
            _charge_guest(prep, keys)
            await run_in_threadpool(prep.admit, settings, rag, key is not None)
            await run_in_threadpool(prep.fit_context, settings, engine)
            async for _ in engine.run_stream(work):
                pass
        return _completion(prep, engine.model_id, result)
    # A full queue is a proper 503 before the stream starts; the model itself is taken
    # inside the stream, so a client that never reads the stream cannot hold it.
    engine.check_queue()
    _charge_guest(prep, keys)
    await run_in_threadpool(prep.admit, settings, rag, key is not None)
    await run_in_threadpool(prep.fit_context, settings, engine)
    return StreamingResponse(
        _sse(prep, engine, work, result),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _receipt(prep: _Prepared, result: Any) -> dict[str, Any]:
    """The answer's receipt, with what the context budget cut (``context``) when it retrieved."""
    receipt: dict[str, Any] = result.receipt.to_dict() if result.receipt else {}
    if prep.context is not None:
        receipt["context"] = prep.context
    return receipt


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


async def _sse(prep: _Prepared, engine: Any, work: Any, result: Any) -> AsyncIterator[str]:
    model_id = engine.model_id
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
    completion = len(result.token_ids)
    final["usage"] = {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": result.prompt_tokens + completion,
    }
    yield "data: " + json.dumps(final) + "\n\n"
    yield "data: [DONE]\n\n"
