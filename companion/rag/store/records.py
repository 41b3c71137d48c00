"""What the document store hands out: documents, hits, chunk rows, and valid collection names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from py_core.errors import InvalidParameterError

_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def validate_collection_name(name: str) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 64 or set(name) - _NAME_OK:
        raise InvalidParameterError(
            f"collection name must be 1-64 characters of letters, digits, '-', '_' or '.'; "
            f"got {name!r}"
        )
    return name


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    id: int
    collection: str
    name: str
    sha256: str
    kind: str
    size: int
    chunks: int
    metadata: dict[str, Any]
    created: float


@dataclass(frozen=True, slots=True)
class Hit:
    chunk_id: int
    document_id: int
    document: str
    collection: str
    index: int
    text: str
    start: int
    end: int
    score: float  # exact cosine similarity of the chunk's vector and the query's
    page: int | None = None  # 1-based page of a PDF (None: the format has no pages)
    heading: str | None = None  # "Title > Section > Subsection" (None: no heading)
    # How the hybrid retrieval found it (companion/rag/retrieval.py): 1-based ranks in the
    # vector and the BM25 rankings (None: not among that ranking's candidates), the fused
    # score that ordered the result, and the raw BM25 score (higher is better).
    vector_rank: int | None = None
    lexical_rank: int | None = None
    fused: float | None = None
    bm25: float | None = None
    names_identifier: bool = False  # has an e-mail address / number the question names


ChunkRow = tuple[str, int, int] | tuple[str, int, int, int | None, str | None]
