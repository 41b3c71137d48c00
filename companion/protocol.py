"""Request and response models of the companion's API (OpenAI-compatible where it can be).

Veil's additions to the chat request are ``collection``, ``retrieval_top_k``,
``defense`` and ``defense_params``; its additions to the response are the
``veil`` object (receipt and citations) on the completion and on the final
streamed chunk.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from companion.decoding.registry import DEFAULT_DEFENSE, DEFENSES, check_name
from companion.errors import APIError, ErrorCode

# Retrieval options, the same for chat and search (defaults: the companion's settings).
RetrievalMode = Annotated[
    Literal["vector", "bm25", "hybrid"] | None,
    Field(description="vector, bm25 or hybrid (default: the companion's retrieval_mode)"),
]
MinScore = Annotated[
    float | None,
    Field(
        ge=-1.0,
        le=1.0,
        description="relevance threshold on the cosine score: chunks under it are not "
        "retrieved (default: the companion's retrieval_min_score)",
    ),
]


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[ContentPart]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


# Fields OpenAI clients send that the companion accepts and does not act on: the
# response says which in its ``X-Veil-Ignored`` header (and never refuses them).
OPENAI_IGNORED = (
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "functions",
    "function_call",
    "response_format",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "user",
    "metadata",
    "store",
    "reasoning_effort",
    "reasoning",
    "modalities",
    "audio",
    "prediction",
    "service_tier",
    "web_search_options",
    "verbosity",
    "prompt_cache_key",
    "safety_identifier",
)
# Veil's own fields: an unknown field that looks like one of these (a typo such as
# "colection" or "defence") is a 400, so a misspelled privacy setting never passes silently.
VEIL_FIELDS = (
    "collection",
    "conversation_id",
    "replace_from",
    "retrieval_query",
    "retrieval_top_k",
    "retrieval_mode",
    "retrieval_min_score",
    "defense",
    "defense_params",
    "budget_confirm",
    "fresh",
)
_VEIL_PREFIXES = ("veil", "retrieval", "defen", "collection", "conversation")


def looks_like_veil_field(name: str) -> str | None:
    """The Veil field an unknown request field was probably meant to be, or None."""
    lowered = name.lower()
    close = difflib.get_close_matches(lowered, VEIL_FIELDS, n=1, cutoff=0.75)
    if close:
        return close[0]
    if lowered.startswith(_VEIL_PREFIXES):
        return next((f for f in VEIL_FIELDS if lowered.startswith(f[:5])), "defense")
    return None


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat request and Veil's fields.

    Real clients send more than the companion uses (Open WebUI its default ``tools``,
    the SDKs ``stream_options``, ``user``, ``metadata`` ...): every field the companion
    does not act on -- OpenAI's (:data:`OPENAI_IGNORED`), a sampling knob it does not
    implement (``top_p`` other than 1, non-zero penalties) or a client's own extra field --
    is accepted and named in the ``X-Veil-Ignored`` response header. Only an unknown
    field that looks like one of Veil's own (a typo of ``collection``, ``defense``,
    ``retrieval_*`` ...) is a 400: a misspelled privacy setting must not pass silently.
    """

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": True})
    _ignored: list[str] = PrivateAttr(default_factory=list)

    model: str | None = Field(
        None,
        description="a model id from GET /v1/models (left out: the companion's default); an "
        "unknown one is a 404",
    )
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(
        None, gt=0.0, le=1.0, description="accepted; only 1 is applied (else ignored)"
    )
    n: int | None = Field(None, ge=1, le=1, description="only n=1 is supported")
    stream: bool = False
    stream_options: dict[str, Any] | None = Field(
        None, description="accepted; the final streamed chunk always carries usage"
    )
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    frequency_penalty: float | None = Field(
        None, description="accepted; only 0 is applied (else ignored)"
    )
    presence_penalty: float | None = Field(
        None, description="accepted; only 0 is applied (else ignored)"
    )
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    tools: list[Any] | None = Field(None, description="accepted and ignored (no tool calls)")
    tool_choice: Any = Field(None, description="accepted and ignored")
    parallel_tool_calls: bool | None = Field(None, description="accepted and ignored")
    response_format: Any = Field(None, description="accepted and ignored (plain text)")
    logprobs: bool | None = Field(None, description="accepted and ignored (logprobs: null)")
    top_logprobs: int | None = Field(None, description="accepted and ignored")
    reasoning_effort: str | None = Field(None, description="accepted and ignored")
    # Veil's extensions
    collection: str | None = Field(
        None,
        description="retrieve context from this document collection. Left out: the "
        "companion's default collection (Settings.default_collection, 'default'; no retrieval "
        "while it has no documents), the same default as the chat page; null: no retrieval; "
        "a collection that does not exist: 404",
    )
    conversation_id: str | None = Field(
        None,
        description="continue this stored conversation (/v1/conversations): its earlier "
        "messages are put before `messages` (send only the new ones), and the question and the "
        "answer are appended to it; owner only",
    )
    fresh: bool = Field(
        False,
        description="a guest key's Regenerate: answer afresh (charged as any answer) even "
        "when this key was released an answer to this question before, which is otherwise "
        "served again at no cost",
    )
    replace_from: int | None = Field(
        None,
        ge=1,
        description="with conversation_id: answer in place of this stored user message and "
        "everything after it (regenerate: send the same question; edit: send the edited "
        "one); the earlier messages are the history, and the stored turns from this one "
        "on are replaced by the question and the new answer only once it is complete "
        "(a stopped or failed answer leaves the conversation as it was)",
    )
    retrieval_query: Literal["last", "user_turns", "turns"] | None = Field(
        None,
        description="what a follow-up retrieves with: the last user message alone, joined "
        "after the previous user messages, or also the last answer (default: "
        "Settings.followup_query)",
    )
    retrieval_top_k: int | None = Field(None, ge=1, le=20)
    retrieval_mode: RetrievalMode = None
    retrieval_min_score: MinScore = None
    defense: str = Field(DEFAULT_DEFENSE, description="one of " + ", ".join(DEFENSES))
    defense_params: dict[str, Any] = Field(default_factory=dict)
    budget_confirm: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="the 'confirm' of POST /v1/budget/estimate for this request: the answer "
        "charges the documents' lifetime budgets exactly what that estimate said, or it is a "
        "409 and nothing is charged (the budgets changed in between); owner only",
    )

    @field_validator("defense")
    @classmethod
    def _defense(cls, value: str) -> str:
        return check_name(value)

    @model_validator(mode="after")
    def _unused(self) -> ChatCompletionRequest:
        """Refuse a misspelled Veil field; list every field that is accepted and not used."""
        extra = dict(self.__pydantic_extra__ or {})
        for name in extra:
            meant = looks_like_veil_field(name)
            if meant is not None:  # an APIError passes pydantic through, with its param
                raise APIError(
                    400,
                    ErrorCode.INVALID_REQUEST,
                    f"unknown field {name!r}: did you mean {meant!r}? (Veil's fields are "
                    + ", ".join(VEIL_FIELDS)
                    + ")",
                    name,
                )
        ignored = [
            name
            for name in self.model_fields_set
            if name in OPENAI_IGNORED and getattr(self, name) not in (None, False, [], {})
        ]
        if self.top_p is not None and self.top_p != 1.0:
            ignored.append("top_p")
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                ignored.append(name)
        ignored += sorted(extra)
        order = {name: i for i, name in enumerate(OPENAI_IGNORED)}
        self._ignored = sorted(set(ignored), key=lambda n: (order.get(n, len(order)), n))
        return self

    def ignored_fields(self) -> list[str]:
        """The request's fields the companion accepted and did not act on."""
        return list(self._ignored)

    @model_validator(mode="after")
    def _last_is_user(self) -> ChatCompletionRequest:
        if not any(m.role == "user" for m in self.messages):
            raise ValueError("messages must contain at least one 'user' message")
        return self

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def last_user_text(self) -> str:
        return next(m.text() for m in reversed(self.messages) if m.role == "user")


class Citation(BaseModel):
    n: int
    chunk_id: int
    document_id: int
    document: str
    collection: str
    chunk_index: int
    start: int
    end: int
    score: float
    text: str
    # Where the chunk came from (companion/rag/ingest.py): the 1-based page of a PDF and
    # the heading path ("Title > Section") of a .md, .html or .docx file; None where the
    # format has none or the chunk was stored before pages were recorded (re-ingest it).
    page: int | None = None
    heading: str | None = None
    # What of the chunk entered the prompt under the context token budget
    # (settings.context_token_budget; the receipt's "context" gives the totals).
    # "dropped": left out for scoring far below the best chunk (context_relative_score).
    included: Literal["whole", "partial", "cut", "dropped"] = "whole"
    included_chars: int | None = None  # characters of its text in the prompt


class VeilInfo(BaseModel):
    receipt: dict[str, Any]
    citations: list[Citation] = Field(default_factory=list)
    # What this answer did to each context document's lifetime budget
    # (companion.rag.budget.Admission.to_dict); None without retrieval.
    budget: dict[str, Any] | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    veil: VeilInfo


class DocumentOut(BaseModel):
    id: int
    collection: str
    name: str
    sha256: str
    kind: str
    size: int
    chunks: int
    metadata: dict[str, Any]
    created: float


class UploadResult(BaseModel):
    document: DocumentOut
    created: bool


class UploadResponse(BaseModel):
    documents: list[UploadResult]


class CollectionOut(BaseModel):
    name: str
    created: float
    documents: int


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(..., min_length=1, max_length=10_000)
    collection: str = "default"
    top_k: int = Field(4, ge=1, le=50)
    retrieval_mode: RetrievalMode = None
    retrieval_min_score: MinScore = None


class SearchResponse(BaseModel):
    hits: list[Citation]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    model: str | None
    model_loaded: bool
    device: str | None
    dtype: str | None = None  # compute precision (torch) or the GGUF's weight type (llama.cpp)
    backend: str | None = None  # what runs the chat model: torch, llama.cpp or vllm
    # which llama.cpp build (companion.llamacpp_runtime): llama-cpp-python (compiled here
    # for this CPU) or cyllama (the prebuilt wheel); None on torch
    runtime: str | None = None
    documents: int
    defenses: list[str]
