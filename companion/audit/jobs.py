"""Inversion jobs for the HTTP API: a worker thread each, one at a time per model.

A job's progress is a list of events (setup stages, one event per recovered
position, then ``done`` or ``error``) that any number of readers can follow from
any index; results stay in memory under the job's id until the process ends or
the oldest finished jobs are evicted.
"""

from __future__ import annotations

import secrets
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch

from companion.audit.ranker import SetupConfig
from companion.audit.service import (
    InversionRequest,
    ModelPool,
    invert_prepared,
)
from py_core.errors import VeilError

MAX_KEPT_JOBS = 64


@dataclass
class Job:
    id: str
    model: str | None
    layer: int
    method: str
    status: str = "queued"  # queued | running | done | error | cancelled
    created: float = field(default_factory=time.time)
    events: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def emit(self, event: dict[str, Any]) -> None:
        with self.changed:
            self.events.append({"index": len(self.events), **event})
            self.changed.notify_all()

    @property
    def finished(self) -> bool:
        return self.status in ("done", "error", "cancelled")

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "model": self.model,
            "layer": self.layer,
            "method": self.method,
            "created": self.created,
            "events": len(self.events),
            "error": self.error,
            "result": self.result,
        }


class JobManager:
    """Starts jobs in worker threads and keeps their events and results."""

    def __init__(
        self, pool: ModelPool | None = None, setup_config: SetupConfig | None = None
    ) -> None:
        self.pool = pool or ModelPool()
        self.setup_config = setup_config
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._guard = threading.Lock()

    def submit(
        self,
        request: InversionRequest,
        states: torch.Tensor,
        truth: list[int] | None,
        *,
        model: str | None,
        layer: int,
    ) -> Job:
        job = Job(id=secrets.token_urlsafe(9), model=model, layer=layer, method=request.method)
        with self._guard:
            self._jobs[job.id] = job
            self._evict()
        thread = threading.Thread(
            target=self._run,
            args=(job, request, states, truth),
            name=f"audit-{job.id}",
            daemon=True,
        )
        thread.start()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._guard:
            return self._jobs.get(job_id)

    def jobs(self) -> list[Job]:
        with self._guard:
            return list(self._jobs.values())

    def _evict(self) -> None:
        finished = [j for j in self._jobs.values() if j.finished]
        while len(self._jobs) > MAX_KEPT_JOBS and finished:
            self._jobs.pop(finished.pop(0).id, None)

    def _run(
        self, job: Job, request: InversionRequest, states: torch.Tensor, truth: list[int] | None
    ) -> None:
        try:
            target, lock = self.pool.get(job.model, job.layer)
            job.emit({"kind": "queued"})
            with lock:
                if job.cancel.is_set():
                    raise InterruptedError("cancelled before it started")
                job.status = "running"
                job.emit({"kind": "started", "positions": int(states.shape[0])})
                result = invert_prepared(
                    target,
                    request,
                    states,
                    truth,
                    progress=job.emit,
                    should_stop=job.cancel.is_set,
                    setup_config=self.setup_config,
                )
            job.result = result.to_dict()
            job.status = "done"
            job.emit({"kind": "done", "result": job.result})
        except InterruptedError as exc:
            job.status = "cancelled"
            job.error = {"code": "cancelled", "message": str(exc)}
            job.emit({"kind": "error", **job.error})
        except VeilError as exc:
            job.status = "error"
            job.error = {"code": type(exc).__name__, "message": str(exc)}
            job.emit({"kind": "error", **job.error})
        except Exception as exc:  # a worker must always report how it ended
            job.status = "error"
            job.error = {
                "code": "internal_error",
                "message": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(limit=5),
            }
            job.emit({"kind": "error", **job.error})
