"""Ingest and retrieval on top of the store and the sentence embedder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from companion.rag.chunking import TooManyChunksError, chunk_text
from companion.rag.ingest import DEFAULT_MAX_CHARS, extract_text, too_large
from companion.rag.store import DocumentInfo, DocumentStore, Hit, validate_collection_name


@dataclass
class RagService:
    """Documents in, cited chunks out.  ``embedder`` is a SentenceTransformer-like object."""

    store: DocumentStore
    embedder: Any
    chunk_size: int = 120
    chunk_overlap: int = 30
    max_chars: int = DEFAULT_MAX_CHARS  # extracted characters per file
    max_chunks: int = 2500  # chunks per document
    chunk_max_tokens: int = 1024  # UTF-8 bytes per chunk, so tokens of a byte-level tokenizer

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        vectors = self.embedder.encode(
            texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)

    def ingest(
        self,
        name: str,
        data: bytes,
        collection: str = "default",
        progress: Callable[[int], None] | None = None,
    ) -> tuple[DocumentInfo, bool]:
        """Extract, chunk, embed and store one file; (document, newly created)."""
        validate_collection_name(collection)
        extracted = extract_text(name, data, max_chars=self.max_chars)
        try:
            chunks = chunk_text(
                extracted.text,
                size=self.chunk_size,
                overlap=self.chunk_overlap,
                max_bytes=self.chunk_max_tokens,
                max_chunks=self.max_chunks,
            )
        except TooManyChunksError as exc:
            raise too_large(name, exc.limit, "chunks") from None
        texts = [c.text for c in chunks]
        parts = []
        for i in range(0, len(texts), 32):
            parts.append(self.embed(texts[i : i + 32]))
            if progress is not None:
                progress(min(32, len(texts) - i))
        vectors = np.concatenate(parts) if parts else np.zeros((0, 384), np.float32)
        return self.store.add_document(
            collection,
            name,
            data,
            extracted.kind,
            extracted.metadata,
            [(c.text, c.start, c.end) for c in chunks],
            vectors,
        )

    def search(self, query: str, collection: str = "default", k: int = 4) -> list[Hit]:
        return self.store.search(collection, self.embed([query])[0], k)
