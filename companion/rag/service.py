"""Ingest and retrieval on top of the store and the sentence embedder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from companion.rag.chunking import chunk_text
from companion.rag.ingest import extract_text
from companion.rag.store import DocumentInfo, DocumentStore, Hit, validate_collection_name


@dataclass
class RagService:
    """Documents in, cited chunks out.  ``embedder`` is a SentenceTransformer-like object."""

    store: DocumentStore
    embedder: Any
    chunk_size: int = 120
    chunk_overlap: int = 30

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
        extracted = extract_text(name, data)
        chunks = chunk_text(extracted.text, size=self.chunk_size, overlap=self.chunk_overlap)
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
