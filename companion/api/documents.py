"""Document endpoints: upload (ingest), list, delete, collections and search."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Path, UploadFile
from fastapi.concurrency import run_in_threadpool

from companion.api.chat import citations_for
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
from companion.rag.ingest import DocumentTooLargeError
from companion.rag.store import validate_collection_name

router = APIRouter(tags=["documents"])

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


@router.post("/v1/documents", response_model=UploadResponse, summary="Upload and ingest files")
async def upload_documents(
    rag: RagDep,
    files: Annotated[list[UploadFile], File(description=".txt .md .html .eml .pdf .docx")],
    collection: Annotated[str, Form()] = "default",
) -> UploadResponse:
    validate_collection_name(collection)
    results = []
    for upload in files:
        name = upload.filename or "upload.txt"
        data = await upload.read()
        if not data:
            raise APIError(400, ErrorCode.INVALID_REQUEST, f"{name}: the file is empty", "files")
        try:
            info, created = await run_in_threadpool(rag.ingest, name, data, collection)
        except DocumentTooLargeError as exc:
            raise APIError(400, ErrorCode.DOCUMENT_TOO_LARGE, str(exc), "files") from None
        results.append(UploadResult(document=_doc(info), created=created))
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


@router.delete("/v1/documents/{doc_id}", summary="Delete a document and its chunks")
def delete_document(rag: RagDep, doc_id: DocId) -> dict[str, Any]:
    if not rag.store.delete_document(doc_id):
        raise APIError(404, ErrorCode.NOT_FOUND, f"no document with id {doc_id}")
    return {"deleted": True, "id": doc_id}


@router.get("/v1/collections", response_model=list[CollectionOut], summary="List collections")
def list_collections(rag: RagDep) -> list[CollectionOut]:
    return [CollectionOut(**c) for c in rag.store.collections()]


@router.delete("/v1/collections/{name}", summary="Delete a collection and all its documents")
def delete_collection(rag: RagDep, name: str) -> dict[str, Any]:
    if not rag.store.delete_collection(name):
        raise APIError(404, ErrorCode.NOT_FOUND, f"no collection named {name!r}")
    return {"deleted": True, "name": name}


@router.post("/v1/search", response_model=SearchResponse, summary="Top-k chunks for a query")
def search(rag: RagDep, settings: SettingsDep, body: SearchRequest) -> SearchResponse:
    """The ``top_k`` best chunks by ``retrieval_mode`` (vector, bm25 or hybrid; default the
    companion's ``retrieval_mode``), none under ``retrieval_min_score`` (the cosine
    relevance threshold).  Each hit carries its ``page`` and ``heading`` where known."""
    from companion.rag.retrieval import request_options

    hits = rag.search(body.query, body.collection, body.top_k, request_options(settings, body))
    return SearchResponse(hits=citations_for(hits))
