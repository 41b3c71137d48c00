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
* ``DELETE /v1/audit/inversion/{id}`` cancels a queued or running job (a running
  one stops within about a second; a cancelled setup keeps its resumable progress).
* ``GET /v1/audit/inversion`` lists the jobs in memory (running and queued first),
  so a reopened page can reattach to their progress.
* ``GET /v1/audit/setup`` says whether the fast path is set up for a model (read
  without waiting for any job) and which setup job is running, if any.
* ``POST /v1/audit/setup`` starts the per-model setup as a job (202; its progress
  streams like an inversion's).  Setup never starts implicitly: a fast job for a
  model that is not set up gets 409 ``setup_required``.

Jobs wait in a bounded queue (``audit_max_queued``; 429 with ``Retry-After``
when full) and run one per model at a time; no handler waits for a job.

Security (token, Host and Origin checks) comes from the app's middleware.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from companion.api.deps import AuditJobsDep, SettingsDep
from companion.audit import PUBLISHED, QueueFullError
from companion.errors import APIError, ErrorCode, veil_error_status
from py_core.errors import VeilError

router = APIRouter(prefix="/v1/audit", tags=["audit"])


# What is audited at the layer: its hidden states, or the block's cached keys or values
# (what a shared or leaked KV cache holds).
Source = Literal["hidden", "keys", "values"]


class InversionBody(BaseModel):
    """Options of one audit (JSON body, or the form fields of an upload)."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(default=None, max_length=20_000)
    model: str | None = None
    layer: int = -1
    source: Source = "hidden"
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
            raw = json.loads(await request.body())
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, nesting
            raise _bad_request(
                "the body is not valid JSON (or is nested too deeply)"
                if isinstance(exc, RecursionError)
                else f"the body is not valid JSON: {_json_problem(exc)}"
            ) from None
        if not isinstance(raw, dict):
            raise _bad_request("the JSON body must be an object")
        return _parse(raw), None, None
    raise _bad_request(
        f"unsupported content type {content_type!r}: send JSON or multipart/form-data",
        ErrorCode.UNSUPPORTED_MEDIA,
        415,
    )


def _json_problem(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return "it is not UTF-8 text"


def _parse(fields: dict[str, Any]) -> InversionBody:
    try:
        return InversionBody.model_validate(fields)
    except ValidationError as exc:  # list every problem
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise _bad_request(f"invalid options: {problems}") from None


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
        allow_setup=False,  # setup is its own job (POST /v1/audit/setup), never implicit
    )
    request.validate()
    target = service.pool.get(body.model, body.layer, body.source)
    states, truth = prepare_states(target, request)  # a bad file is a 400 before all else
    if request.method == "fast":
        from companion.audit.ranker import is_ready
        from companion.audit.service import setup_required

        if not is_ready(target):
            raise setup_required(target)
    return request, states, truth


def _queue_full(exc: QueueFullError) -> APIError:
    return APIError(
        429,
        ErrorCode.QUEUE_FULL,
        str(exc),
        headers={"Retry-After": str(exc.retry_after)},
    )


def _veil_error(exc: VeilError) -> APIError:
    from companion.audit.service import SetupRequiredError

    if isinstance(exc, SetupRequiredError):
        return APIError(409, ErrorCode.SETUP_REQUIRED, str(exc))
    status, code = veil_error_status(exc)
    return APIError(status, code, str(exc))


_INVERSION_BODY = {
    "requestBody": {
        "content": {
            "application/json": {"schema": InversionBody.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        **InversionBody.model_json_schema()["properties"],
                    },
                }
            },
        }
    }
}


@router.post("/inversion", status_code=202, openapi_extra=_INVERSION_BODY)
async def start_inversion(
    request: Request, service: AuditJobsDep, settings: SettingsDep
) -> JSONResponse:
    """Queue an inversion job; 202 with its id and where to follow it.

    409 ``setup_required`` when the fast path is not set up for the model; 429
    with ``Retry-After`` when the queue is full.
    """
    body, data, filename = await _read_body(request, settings.max_upload_bytes)
    try:
        prepared = await asyncio.to_thread(_start, service, body, data, filename)
    except VeilError as exc:
        raise _veil_error(exc) from None
    if await request.is_disconnected():  # the client gave up while its states were prepared
        raise _bad_request("the client went away before the job was queued")
    try:
        job = service.submit(*prepared, model=body.model, layer=body.layer, source=body.source)
    except QueueFullError as exc:
        raise _queue_full(exc) from None
    except VeilError as exc:
        raise _veil_error(exc) from None
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
    job = _job(service, job_id)
    job.touch()
    return dict(job.summary())


@router.delete("/inversion/{job_id}")
def cancel_inversion(job_id: str, service: AuditJobsDep) -> dict[str, Any]:
    """Cancel a job: a queued one at once, a running one within about a second."""
    job = service.cancel(job_id) or _job(service, job_id)  # 404 when unknown
    return {"id": job.id, "status": job.status, "cancel_requested": True}


@router.get("/inversion")
def list_inversions(service: AuditJobsDep) -> dict[str, Any]:
    """Jobs kept in memory, running and queued first (without their results)."""
    order = {"running": 0, "queued": 1}
    jobs = sorted(service.jobs(), key=lambda j: (order.get(j.status, 2), -j.created))
    return {"jobs": [{k: v for k, v in j.summary().items() if k != "result"} for j in jobs]}


_EVENT_ID = re.compile(r"[0-9]{1,9}")


def _resume_from(last_event_id: str | None) -> int:
    """The index after ``Last-Event-ID`` (plain decimal digits only), else 0."""
    if last_event_id is None or not last_event_id.strip():
        return 0
    value = last_event_id.strip()
    if not _EVENT_ID.fullmatch(value):
        raise _bad_request(
            "Last-Event-ID must be the decimal id of an event this stream sent (at most 9 digits)"
        )
    return int(value) + 1


@router.get("/inversion/{job_id}/events")
async def inversion_events(
    job_id: str, request: Request, service: AuditJobsDep
) -> StreamingResponse:
    """Progress as server-sent events, ending with a ``done`` or ``error`` event."""
    job = _job(service, job_id)
    start = _resume_from(request.headers.get("last-event-id"))

    async def stream() -> AsyncIterator[str]:
        index = start
        idle = 0.0
        job.watchers += 1
        try:
            while True:
                job.touch()
                events = job.events[index:]
                for event in events:
                    data = json.dumps(event)
                    yield f"id: {event['index']}\nevent: {event['kind']}\ndata: {data}\n\n"
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
        finally:
            job.watchers -= 1

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _target(service: Any, model: str | None, layer: int, source: str) -> Any:
    try:
        return service.pool.get(model, layer, source)
    except VeilError as exc:
        raise _veil_error(exc) from None


@router.get("/models")
async def audit_models(settings: SettingsDep) -> dict[str, Any]:
    """Every model the companion offers, with the layers the auditor is set up for (read
    from the setup folders; no model is loaded)."""
    from companion.audit.catalog import auditable_models

    models = await asyncio.to_thread(
        auditable_models, settings.model, tuple(settings.model_paths), settings.resolved_home()
    )
    return {"object": "list", "data": [m.to_dict() for m in models]}


@router.get("/setup")
async def setup_status(
    service: AuditJobsDep, model: str | None = None, layer: int = -1, source: Source = "hidden"
) -> dict[str, Any]:
    """Whether the fast path is set up for a model, and its running setup job if any.

    Read from the setup folder without waiting for any job (opening the model the
    first time takes a few seconds, in a worker thread).
    """
    return await asyncio.to_thread(_setup_status, service, model, layer, source)


def _setup_status(service: Any, model: str | None, layer: int, source: str) -> dict[str, Any]:
    """What GET /setup answers, read in a worker thread (files, the model's first opening)."""
    from companion.audit.ranker import is_ready, setup_dir

    target = _target(service, model, layer, source)
    ready = is_ready(target)
    meta: dict[str, Any] | None = None
    if ready:
        try:
            meta = json.loads((setup_dir(target) / "done.json").read_text())
        except (OSError, ValueError):
            ready = False
    job = service.active_setup(model, layer, source)
    estimate = None
    if not ready and job is None:  # what the first setup will cost, before it starts
        from companion.audit.catalog import estimate_setup_seconds

        estimate = estimate_setup_seconds(target, service.setup_config)
    return {
        "model": target.identity,
        "layer": target.layer,
        "source": target.source,
        "hidden_size": target.hidden_size,
        "vocab_size": target.vocab_size,
        "ready": ready,
        "setup": meta,
        "estimate": estimate,
        "job": None if job is None else {k: v for k, v in job.summary().items() if k != "result"},
    }


class SetupBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    layer: int = -1
    source: Source = "hidden"
    force: bool = False


@router.post("/setup", status_code=202)
async def start_setup(service: AuditJobsDep, body: SetupBody | None = None) -> JSONResponse:
    """Queue the per-model setup (or return the one already queued or running); 202."""
    body = body or SetupBody()

    def submit() -> Any:  # in a worker thread: opening the model, the job manager's locks
        _target(service, body.model, body.layer, body.source)
        return service.submit_setup(
            model=body.model, layer=body.layer, source=body.source, force=body.force
        )

    try:
        job = await asyncio.to_thread(submit)
    except QueueFullError as exc:
        raise _queue_full(exc) from None
    except VeilError as exc:
        raise _veil_error(exc) from None
    base = f"/v1/audit/inversion/{job.id}"
    return JSONResponse(
        status_code=202,
        content={"id": job.id, "status": job.status, "events": f"{base}/events", "result": base},
    )
