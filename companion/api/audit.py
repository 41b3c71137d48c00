"""``/v1/audit``: the hidden-state inversion auditor over HTTP.

* ``POST /v1/audit/inversion`` starts a job (202).  JSON body with ``text``, or a
  ``multipart/form-data`` upload with a ``file`` field (.pt, .npy, .safetensors)
  and the same options as form fields.  Shape, dtype and model mismatches are
  refused at once with 400 and a message saying what to fix.
* ``GET /v1/audit/inversion/{id}/events`` streams progress as server-sent events
  (``event: setup|position|done|error``); ``Last-Event-ID`` resumes a stream.
* ``GET /v1/audit/inversion/{id}`` returns the status and, when done, the result:
  recovered text, per-position proof (discrete loss, rank found at, candidates
  checked), flagged positions and timings.
* ``DELETE /v1/audit/inversion/{id}`` cancels a running job.
* ``GET /v1/audit/setup`` says whether the fast path is set up for a model.

Security (token, Host and Origin checks) comes from the app's middleware.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from companion.api.deps import AuditJobsDep, SettingsDep
from companion.audit import PUBLISHED
from companion.errors import APIError, ErrorCode
from py_core.errors import VeilError

router = APIRouter(prefix="/v1/audit", tags=["audit"])


class InversionBody(BaseModel):
    """Options of one audit (JSON body, or the form fields of an upload)."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(default=None, max_length=20_000)
    model: str | None = None
    layer: int = -1
    method: Literal["fast", "gradient"] = "fast"
    sigma: float = Field(default=0.0, ge=0.0)
    noisy: bool | None = None
    tolerance: float | None = Field(default=None, gt=0.0)
    max_candidates: int | None = Field(default=None, ge=1)
    steps: int = Field(default=PUBLISHED.steps, ge=0, le=100_000)
    candidates: int = Field(default=PUBLISHED.candidates, ge=1)
    learning_rate: float = Field(default=PUBLISHED.learning_rate, gt=0.0)
    seed: int | None = None
    key: str | None = None
    allow_setup: bool = True


def _bad_request(
    message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST, status: int = 400
) -> APIError:
    return APIError(status, code, message)


async def _read_body(
    request: Request, max_upload_bytes: int
) -> tuple[InversionBody, bytes | None, str | None]:
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        async with request.form() as form:
            upload = form.get("file")
            fields: dict[str, Any] = {}
            for name, value in form.multi_items():
                if name == "file" or not isinstance(value, str) or value == "":
                    continue
                fields[name] = value
            body = _parse(fields)
            if upload is None or isinstance(upload, str):
                if body.text is None:
                    raise _bad_request("the upload has no 'file' field (and no text)")
                return body, None, None
            data = await upload.read()
            filename = upload.filename or "upload"
        if len(data) > max_upload_bytes:
            raise _bad_request(
                f"the file is larger than the upload limit of {max_upload_bytes:,} bytes",
                ErrorCode.PAYLOAD_TOO_LARGE,
                413,
            )
        return body, data, filename
    if content_type.startswith("application/json") or not content_type:
        try:
            raw = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _bad_request(f"the body is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise _bad_request("the JSON body must be an object")
        return _parse(raw), None, None
    raise _bad_request(
        f"unsupported content type {content_type!r}: send JSON or multipart/form-data",
        ErrorCode.UNSUPPORTED_MEDIA,
        415,
    )


def _parse(fields: dict[str, Any]) -> InversionBody:
    try:
        return InversionBody.model_validate(fields)
    except Exception as exc:  # pydantic.ValidationError: list every problem
        errors = getattr(exc, "errors", None)
        if callable(errors):
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors()
            )
            raise _bad_request(f"invalid options: {problems}") from exc
        raise


def _start(service: Any, body: InversionBody, data: bytes | None, filename: str | None) -> Any:
    from companion.audit.service import InversionRequest, prepare_states

    if (body.text is None) == (data is None):
        raise _bad_request("give exactly one input: 'text', or a hidden-state 'file' upload")
    request = InversionRequest(
        text=body.text,
        states_bytes=data,
        states_filename=filename,
        states_key=body.key,
        method=body.method,
        sigma=body.sigma,
        noisy=body.noisy,
        tolerance=body.tolerance,
        max_candidates=body.max_candidates,
        steps=body.steps,
        candidates=body.candidates,
        learning_rate=body.learning_rate,
        seed=body.seed,
        allow_setup=body.allow_setup,
    )
    try:
        request.validate()
        target, _ = service.pool.get(body.model, body.layer)
        states, truth = prepare_states(target, request)
    except VeilError as exc:
        raise _bad_request(str(exc)) from exc
    return service.submit(request, states, truth, model=body.model, layer=body.layer)


@router.post("/inversion", status_code=202)
async def start_inversion(
    request: Request, service: AuditJobsDep, settings: SettingsDep
) -> JSONResponse:
    """Start an inversion job; 202 with its id and where to follow it."""
    body, data, filename = await _read_body(request, settings.max_upload_bytes)
    job = await asyncio.to_thread(_start, service, body, data, filename)
    base = f"/v1/audit/inversion/{job.id}"
    return JSONResponse(
        status_code=202,
        content={"id": job.id, "status": job.status, "events": f"{base}/events", "result": base},
    )


def _job(service: Any, job_id: str) -> Any:
    job = service.get(job_id)
    if job is None:
        raise _bad_request(
            f"no inversion job {job_id!r} (results are kept in memory)", ErrorCode.NOT_FOUND, 404
        )
    return job


@router.get("/inversion/{job_id}")
def get_inversion(job_id: str, service: AuditJobsDep) -> dict[str, Any]:
    """Status of a job and, once done, its result."""
    return dict(_job(service, job_id).summary())


@router.delete("/inversion/{job_id}")
def cancel_inversion(job_id: str, service: AuditJobsDep) -> dict[str, Any]:
    """Ask a queued or running job to stop (it stops at the next position)."""
    job = _job(service, job_id)
    job.cancel.set()
    return {"id": job.id, "status": job.status, "cancel_requested": True}


@router.get("/inversion")
def list_inversions(service: AuditJobsDep) -> dict[str, Any]:
    """Jobs kept in memory (without their results)."""
    jobs = service.jobs()
    return {"jobs": [{k: v for k, v in j.summary().items() if k != "result"} for j in jobs]}


@router.get("/inversion/{job_id}/events")
async def inversion_events(
    job_id: str, request: Request, service: AuditJobsDep
) -> StreamingResponse:
    """Progress as server-sent events, ending with a ``done`` or ``error`` event."""
    job = _job(service, job_id)
    last = request.headers.get("last-event-id")
    start = int(last) + 1 if last and last.isdigit() else 0

    async def stream() -> AsyncIterator[str]:
        index = start
        idle = 0.0
        while True:
            events = job.events[index:]
            for event in events:
                yield f"id: {event['index']}\nevent: {event['kind']}\ndata: {json.dumps(event)}\n\n"
                index = event["index"] + 1
                if event["kind"] in ("done", "error"):
                    return
            if job.finished and index >= len(job.events):
                return
            if await request.is_disconnected():
                return
            await asyncio.sleep(0.1)
            idle = 0.0 if events else idle + 0.1
            if idle >= 15.0:
                idle = 0.0
                yield ": keep-alive\n\n"

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/setup")
def setup_status(
    service: AuditJobsDep, model: str | None = None, layer: int = -1
) -> dict[str, Any]:
    """Whether the fast path is set up for a model (the first fast job sets it up if not)."""
    from companion.audit.ranker import is_ready, setup_dir

    try:
        target, _ = service.pool.get(model, layer)
    except VeilError as exc:
        raise _bad_request(str(exc)) from exc
    ready = is_ready(target)
    meta: dict[str, Any] | None = None
    if ready:
        meta = json.loads((setup_dir(target) / "done.json").read_text())
    return {
        "model": target.identity,
        "layer": target.layer,
        "hidden_size": target.hidden_size,
        "vocab_size": target.vocab_size,
        "ready": ready,
        "setup": meta,
    }
