"""Document endpoints: upload (ingest), list, delete, collections and search."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Path, Request, UploadFile
from fastapi.concurrency import run_in_threadpool

from companion.answer.context import citations_for
from companion.api.deps import RagDep, SettingsDep
from companion.errors import APIError, ErrorCode
from companion.protocol import (
    CollectionOut,
    DocumentOut,
    SearchRequest,
    SearchResponse,
    UploadResponse,
    UploadResult,
)
from companion.rag.ingest import (
    DocumentLimitError,
    DocumentLimits,
    DocumentTooLargeError,
    ExtractedText,
)
from companion.rag.parse_worker import (
    POLL_S,
    ClientGoneError,
    ParseLimits,
    ParserSlots,
    parse_document,
)
from companion.rag.store import validate_collection_name
from companion.settings import Settings

router = APIRouter(tags=["documents"])
log = logging.getLogger("veil.documents")

DocId = Annotated[int, Path(ge=1, le=2**63 - 1, description="a document id")]


def _doc(info: Any) -> DocumentOut:
    return DocumentOut(
        id=info.id,
        collection=info.collection,
        name=info.name,
        sha256=info.sha256,
        kind=info.kind,
        size=info.size,
        chunks=info.chunks,
        metadata=info.metadata,
        created=info.created,
    )


class UploadBudgetError(Exception):
    """The request's files took longer than ``upload_timeout_s`` to read and store."""


class _Watch:
    """Whether the request's client is still there, and whether the request is within its
    time (``upload_timeout_s``, for all its files together): asked on the event loop while
    a file is read, and by the ingest thread between batches of embeddings (before
    storing); past the time either raises :class:`UploadBudgetError`."""

    def __init__(self, request: Request, budget_s: float) -> None:
        self.request = request
        self.gone = False
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _over(self) -> None:
        if self.remaining() <= 0:
            raise UploadBudgetError(
                f"reading and storing this upload's files took longer than {self.budget_s:g} s "
                "all together (upload_timeout_s); nothing of it was kept -- upload the files "
                "in several requests, a few at a time"
            )

    async def cancelled(self) -> bool:
        """Whether the client left; past the request's time, UploadBudgetError."""
        self._over()
        return await self.left()

    async def left(self) -> bool:
        if not self.gone and await self.request.is_disconnected():
            self.gone = True
        return self.gone

    def check(self, _count: int = 0) -> None:
        if self.gone:
            raise ClientGoneError("the client left before the document was stored")
        self._over()

    async def follow(self) -> None:
        """Poll until the client leaves (runs beside the ingest thread, which checks the
        request's time itself)."""
        while not await self.left():
            await asyncio.sleep(POLL_S)


def parse_limits(settings: Settings, max_chars: int) -> ParseLimits:
    """The limits an upload is read under, from the settings of the same names."""
    return ParseLimits(
        max_chars=max_chars,
        document=DocumentLimits(
            max_unpacked_bytes=settings.max_unpacked_bytes,
            max_compression_ratio=settings.max_compression_ratio,
            max_archive_members=settings.max_archive_members,
            max_xml_elements=settings.max_xml_elements,
            ocr_max_images=settings.ocr_max_images,
            ocr_timeout_s=settings.ocr_timeout_s,
        ),
        memory_bytes=settings.parse_memory_mb * 2**20,
        timeout_s=settings.parse_timeout_s,
    )


def _slots(request: Request, settings: Settings) -> ParserSlots:
    slots = getattr(request.app.state, "parse_slots", None)
    if slots is None:
        slots = request.app.state.parse_slots = ParserSlots(settings.parse_workers)
    return slots


@router.post("/v1/documents", response_model=UploadResponse, summary="Upload and ingest files")
async def upload_documents(
    request: Request,
    rag: RagDep,
    settings: SettingsDep,
    files: Annotated[list[UploadFile], File(description=".txt .md .html .eml .pdf .docx")],
    collection: Annotated[str, Form()] = "default",
) -> UploadResponse:
    """Read every file in a limited child process (:mod:`companion.rag.parse_worker`),
    then chunk, embed and store them.  A file past a reading limit (a decompression bomb,
    too much OCR, the parser's memory or time) gets 413 naming the limit; its text or
    chunks past ``max_document_chars`` / ``max_document_chunks`` get 400.  One request
    holds at most ``max_upload_files`` files, ``max_upload_bytes`` in all (the security
    middleware) and ``upload_timeout_s`` of reading and storing them all (413 naming the
    limit; nothing of the request is kept).  When the client leaves before the last file
    is stored, nothing this request created is kept."""
    validate_collection_name(collection)
    if len(files) > settings.max_upload_files:
        raise APIError(
            413,
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"this upload has {len(files)} files; at most {settings.max_upload_files} are read "
            "in one request (max_upload_files) -- upload them in several requests",
            "files",
        )
    watch = _Watch(request, settings.upload_timeout_s)
    limits = parse_limits(settings, rag.max_chars)
    slots = _slots(request, settings)
    read: list[tuple[str, bytes, ExtractedText]] = []
    created_ids: list[int] = []
    try:
        for upload in files:
            name = upload.filename or "upload.txt"
            data = await upload.read()
            if not data:
                raise APIError(
                    400, ErrorCode.INVALID_REQUEST, f"{name}: the file is empty", "files"
                )
            try:
                async with slots.slot(watch.cancelled):
                    # the file's own limit, or what is left of the request's time if less
                    # (past that, watch.cancelled raises UploadBudgetError)
                    timeout = min(limits.timeout_s, max(watch.remaining(), 0.0) + 1.0)
                    extracted = await parse_document(
                        name,
                        data,
                        dataclasses.replace(limits, timeout_s=timeout),
                        cancelled=watch.cancelled,
                    )
            except DocumentLimitError as exc:
                raise APIError(413, ErrorCode.DOCUMENT_TOO_LARGE, str(exc), "files") from None
            except DocumentTooLargeError as exc:
                raise APIError(400, ErrorCode.DOCUMENT_TOO_LARGE, str(exc), "files") from None
            read.append((name, data, extracted))
        results = []
        for name, data, extracted in read:
            follower = asyncio.ensure_future(watch.follow())
            try:
                info, created = await run_in_threadpool(
                    functools.partial(rag.ingest, progress=watch.check, extracted=extracted),
                    name,
                    data,
                    collection,
                )
            except DocumentTooLargeError as exc:
                raise APIError(400, ErrorCode.DOCUMENT_TOO_LARGE, str(exc), "files") from None
            finally:
                follower.cancel()
            if created:
                created_ids.append(info.id)
            results.append(UploadResult(document=_doc(info), created=created))
        if await watch.left():
            raise ClientGoneError("the client left before the answer was sent")
    except UploadBudgetError as exc:
        for doc_id in created_ids:  # the person is told nothing was kept
            await run_in_threadpool(rag.store.delete_document, doc_id)
        raise APIError(413, ErrorCode.PAYLOAD_TOO_LARGE, str(exc), "files") from None
    except ClientGoneError:
        for doc_id in created_ids:  # the person was told it failed: keep none of it
            await run_in_threadpool(rag.store.delete_document, doc_id)
        log.warning(
            "an upload of %d file(s) was abandoned by its client; nothing was stored", len(files)
        )
        raise APIError(
            400,
            ErrorCode.INVALID_REQUEST,
            "the client went away before the upload was stored; nothing was kept",
            "files",
        ) from None
    return UploadResponse(documents=results)


@router.get("/v1/documents", response_model=list[DocumentOut], summary="List documents")
def list_documents(rag: RagDep, collection: str | None = None) -> list[DocumentOut]:
    return [_doc(d) for d in rag.store.documents(collection)]


@router.get("/v1/documents/{doc_id}", response_model=DocumentOut, summary="One document")
def get_document(rag: RagDep, doc_id: DocId) -> DocumentOut:
    info = rag.store.document(doc_id)
    if info is None:
        raise APIError(404, ErrorCode.NOT_FOUND, f"no document with id {doc_id}")
    return _doc(info)


@router.delete("/v1/documents/{doc_id}", summary="Delete a document, from every file Veil keeps")
def delete_document(rag: RagDep, request: Request, doc_id: DocId) -> dict[str, Any]:
    """Its chunks, vectors and index entries, and its passages in stored conversations
    (marked deleted there).  After a full disk (507), deleting again finishes the job."""
    from companion.api.deps import get_conversations

    info = rag.store.document(doc_id)
    if info is not None:  # released answers may quote it: none of its collection is served
        _forget_answers(rag, info.collection)
    deleted = rag.store.delete_document(doc_id)
    get_conversations(request).forget_document(doc_id)  # also when a retry finds it gone
    if not deleted:
        raise APIError(404, ErrorCode.NOT_FOUND, f"no document with id {doc_id}")
    return {"deleted": True, "id": doc_id}


def _forget_answers(rag: Any, collection: str, *, collection_deleted: bool = False) -> None:
    """Every released answer kept for ``collection`` (companion/answer/cache.py) and its
    digest (companion/rag/digest.py): a deleted document is gone from what guests are
    served again too."""
    from companion.rag.digest import drop_digest

    if rag.answers is not None:
        rag.answers.clear(collection)
    drop_digest(rag.store, collection, collection_deleted=collection_deleted)


@router.get("/v1/collections", response_model=list[CollectionOut], summary="List collections")
def list_collections(rag: RagDep) -> list[CollectionOut]:
    return [CollectionOut(**c) for c in rag.store.collections()]


@router.delete("/v1/collections/{name}", summary="Delete a collection and all its documents")
def delete_collection(rag: RagDep, request: Request, name: str) -> dict[str, Any]:
    """Its documents go as :func:`delete_document`'s do, passages in conversations too."""
    from companion.api.deps import get_conversations

    ids = [d.id for d in rag.store.documents(name)]
    _forget_answers(rag, name, collection_deleted=True)
    if not rag.store.delete_collection(name):
        raise APIError(404, ErrorCode.NOT_FOUND, f"no collection named {name!r}")
    get_conversations(request).forget_documents(ids)
    return {"deleted": True, "name": name}


@router.post("/v1/search", response_model=SearchResponse, summary="Top-k chunks for a query")
def search(rag: RagDep, settings: SettingsDep, body: SearchRequest) -> SearchResponse:
    """The ``top_k`` best chunks by ``retrieval_mode`` (vector, bm25 or hybrid; default the
    companion's ``retrieval_mode``), none under ``retrieval_min_score`` (the cosine
    relevance threshold).  Each hit carries its ``page`` and ``heading`` where known."""
    from companion.rag.retrieval import request_options

    hits = rag.search(body.query, body.collection, body.top_k, request_options(settings, body))
    return SearchResponse(hits=citations_for(hits))
