"""Request and response models of the companion's API (OpenAI-compatible where it can be).

Veil's additions to the chat request are ``collection``, ``retrieval_top_k``,
``defense`` and ``defense_params``; its additions to the response are the
``veil`` object (receipt and citations) on the completion and on the final
streamed chunk.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from companion.decoding.registry import DEFAULT_DEFENSE, DEFENSES, check_name

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


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        None,
        description="a model id from GET /v1/models (left out: the companion's default); an "
        "unknown one is a 404",
    )
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    n: int | None = Field(None, ge=1, le=1, description="only n=1 is supported")
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
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

    @field_validator("defense")
    @classmethod
    def _defense(cls, value: str) -> str:
        return check_name(value)

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, value: float | None) -> float | None:
        if value is not None and value != 1.0:
            raise ValueError("top_p is not supported (only 1); use temperature or a defense")
        return value

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _penalties(cls, value: float | None) -> float | None:
        if value not in (None, 0, 0.0):
            raise ValueError("frequency/presence penalties are not supported (only 0)")
        return value

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


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "veil"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


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
    dtype: str | None = None  # compute precision of the loaded chat model
    documents: int
    defenses: list[str]
