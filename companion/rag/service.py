"""Ingest and retrieval on top of the store and the sentence embedder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from companion.rag.chunking import TooManyChunksError, chunk_document
from companion.rag.ingest import DEFAULT_MAX_CHARS, ExtractedText, extract_text, too_large
from companion.rag.retrieval import RetrievalOptions, retrieve
from companion.rag.store import DocumentInfo, DocumentStore, Hit, validate_collection_name


@dataclass
class RagService:
    """Documents in, cited chunks out.  ``embedder`` is a SentenceTransformer-like object."""

    store: DocumentStore
    embedder: Any
    # Chunks: whole sentences within this many tokens of the embedder's tokenizer
    # (all-MiniLM-L6-v2 reads 256 at most), the last ones up to chunk_overlap repeated.
    chunk_tokens: int = 160
    chunk_overlap: int = 32
    max_chars: int = DEFAULT_MAX_CHARS  # extracted characters per file
    max_chunks: int = 2500  # chunks per document
    chunk_max_tokens: int = 1024  # UTF-8 bytes per chunk, so tokens of a byte-level tokenizer
    retrieval: RetrievalOptions = field(default_factory=RetrievalOptions)
    # Guests' released formal answers, served again at no cost
    # (companion.answer.cache.AnswerCache; None: not kept).
    answers: Any = None

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        vectors = self.embedder.encode(
            texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens(self) -> Callable[[str], int] | None:
        """The embedder's tokenizer as a counter (None: the chunker's approximation)."""
        tokenizer = getattr(self.embedder, "tokenizer", None)
        if tokenizer is None or not callable(getattr(tokenizer, "tokenize", None)):
            return None
        return lambda text: len(tokenizer.tokenize(text))

    def ingest(
        self,
        name: str,
        data: bytes,
        collection: str = "default",
        progress: Callable[[int], None] | None = None,
        *,
        extracted: ExtractedText | None = None,
    ) -> tuple[DocumentInfo, bool]:
        """Extract, chunk, embed and store one file; (document, newly created).

        ``extracted``: the file's text as already read (the upload route reads uploads in
        a limited process, :mod:`companion.rag.parse_worker`); ``progress`` runs after
        each batch of embeddings, the last time just before the document is stored, so
        an exception it raises stores nothing."""
        validate_collection_name(collection)
        if extracted is None:
            extracted = extract_text(name, data, max_chars=self.max_chars)
        try:
            chunks = chunk_document(
                extracted.text,
                extracted.sections,
                max_tokens=self.chunk_tokens,
                overlap_tokens=self.chunk_overlap,
                count_tokens=self.count_tokens(),
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
            [(c.text, c.start, c.end, c.page, c.heading) for c in chunks],
            vectors,
        )

    def options(self, mode: str | None = None, min_score: float | None = None) -> RetrievalOptions:
        """The service's retrieval options with a request's mode / threshold over them."""
        return self.retrieval.override(mode, min_score)

    def search(
        self,
        query: str,
        collection: str = "default",
        k: int = 4,
        options: RetrievalOptions | None = None,
        *,
        vector: np.ndarray | None = None,
    ) -> list[Hit]:
        """The ``k`` best chunks for ``query`` (hybrid, vector or BM25: ``options.mode``)."""
        validate_collection_name(collection)
        opts = options or self.retrieval
        q = self.embed([query])[0] if vector is None else vector
        return retrieve(self.store, query, q, collection, k, opts)
