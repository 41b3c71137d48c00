"""Audit jobs for the HTTP API: a bounded queue, one running job per model, real cancellation.

Two kinds of job: ``inversion`` (invert prepared states) and ``setup`` (the
per-model setup of the fast path, which never starts implicitly).  Jobs wait in
a FIFO queue bounded by ``max_queued`` (:class:`QueueFullError` when full);
at most ``max_running`` run at once, and never two for the same model.  Every
job runs in its own worker thread, which checks the job's cancel flag between
batches, so :meth:`JobManager.cancel` stops a running job within about a second
and removes a queued one at once.  A queued job that nobody has followed (no
event stream, no status read) for ``abandon_after_s`` is dropped when its turn
comes: its client went away.

No request handler ever waits for a job: submitting, listing, reading status
and cancelling take only this manager's short internal lock.

A job's progress is a list of events (setup stages, one event per recovered
position, then ``done`` or ``error``) that any number of readers can follow from
any index; results stay in memory until the process ends or the oldest finished
jobs are evicted.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from companion.audit import QueueFullError
from companion.audit.ranker import SetupConfig, is_ready, run_setup
from companion.audit.service import InversionRequest, ModelPool, invert_prepared, setup_required
from py_core.errors import VeilError

log = logging.getLogger("veil.audit")

MAX_KEPT_JOBS = 64
SETUP_EVENT_EVERY_S = 0.5  # setup progress is reported at most this often (and at each stage)


@dataclass
class Job:
    id: str
    model: str | None
    layer: int
    method: str  # fast | gradient | setup
    kind: str = "inversion"  # inversion | setup
    source: str = "hidden"  # hidden | keys | values (the block's KV cache)
    status: str = "queued"  # queued | running | done | error | cancelled
    created: float = field(default_factory=time.time)
    started: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    watchers: int = 0  # event streams following the job now
    touched: float = field(default_factory=time.monotonic)  # last time a client looked
    run: Callable[[Job], dict[str, Any]] | None = field(default=None, repr=False)
    thread: threading.Thread | None = field(default=None, repr=False)

    def emit(self, event: dict[str, Any]) -> None:
        with self.changed:
            self.events.append({"index": len(self.events), **event})
            self.changed.notify_all()

    @property
    def where(self) -> tuple[str | None, int, str]:
        """What the job reads: (model, layer, source)."""
        return (self.model, self.layer, self.source)

    def touch(self) -> None:
        self.touched = time.monotonic()

    @property
    def finished(self) -> bool:
        return self.status in ("done", "error", "cancelled")

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "model": self.model,
            "layer": self.layer,
            "source": self.source,
            "method": self.method,
            "created": self.created,
            "started": self.started,
            "events": len(self.events),
            "progress": self.progress(),
            "error": self.error,
            "result": self.result,
        }

    def progress(self) -> dict[str, Any] | None:
        """The latest progress event (setup stage or position), for a list of jobs."""
        for event in reversed(self.events):
            if event["kind"] in ("setup", "position", "started"):
                keep = ("kind", "stage", "done", "total", "position", "positions", "index")
                return {k: v for k, v in event.items() if k in keep}
        return None


class JobManager:
    """Queues audit jobs, starts them in worker threads, keeps their events and results."""

    def __init__(
        self,
        pool: ModelPool | None = None,
        setup_config: SetupConfig | None = None,
        *,
        max_queued: int = 8,
        max_running: int = 1,
        abandon_after_s: float = 120.0,
        max_kept: int = MAX_KEPT_JOBS,
    ) -> None:
        self.pool = pool or ModelPool()
        self.setup_config = setup_config
        self.max_queued = max_queued
        self.max_running = max_running
        self.abandon_after_s = abandon_after_s
        self.max_kept = max_kept
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._queue: list[Job] = []
        self._running: dict[str | None, Job] = {}  # model -> its running job
        self._guard = threading.Lock()
        self._closed = False

    # -- submitting -------------------------------------------------------------------

    def submit(
        self,
        request: InversionRequest,
        states: torch.Tensor,
        truth: list[int] | None,
        *,
        model: str | None,
        layer: int,
        source: str = "hidden",
    ) -> Job:
        """Queue an inversion of prepared states; QueueFullError when the queue is full."""
        target = self.pool.get(model, layer, source)
        if request.method == "fast" and not is_ready(target):
            raise setup_required(target)
        config = self.setup_config

        def run(job: Job) -> dict[str, Any]:
            job.emit({"kind": "started", "positions": int(states.shape[0])})
            result = invert_prepared(
                target,
                request,
                states,
                truth,
                progress=job.emit,
                should_stop=job.cancel.is_set,
                setup_config=config,
            )
            return result.to_dict()

        job = Job(
            id=_new_id(), model=model, layer=layer, source=source, method=request.method, run=run
        )
        return self._enqueue(job)

    def submit_setup(
        self, *, model: str | None, layer: int, source: str = "hidden", force: bool = False
    ) -> Job:
        """Queue the model's setup (or return the setup job already queued or running).

        Looking for that job and queueing a new one happen under one hold of the
        manager's lock, so concurrent requests share one job (they made one each).
        """
        existing = self.active_setup(model, layer, source)
        if existing is not None:
            return existing
        target = self.pool.get(model, layer, source)  # may open the model: outside the lock
        config = self.setup_config

        def run(job: Job) -> dict[str, Any]:
            last: dict[str, Any] = {"at": 0.0, "stage": ""}

            def progress(stage: str, done: int, total: int) -> None:
                now = time.monotonic()
                due = now - last["at"] >= SETUP_EVENT_EVERY_S
                if stage != last["stage"] or done >= total or due:
                    last.update(at=now, stage=stage)
                    job.emit({"kind": "setup", "stage": stage, "done": done, "total": total})

            artifacts = run_setup(
                target, config, progress=progress, force=force, should_stop=job.cancel.is_set
            )
            where = {"model": target.identity, "layer": target.layer, "source": target.source}
            return {"ready": True, **where, **{
                k: artifacts.meta.get(k) for k in ("setup_seconds", "timings", "ranker")
            }}  # fmt: skip

        job = Job(
            id=_new_id(),
            model=model,
            layer=layer,
            source=source,
            method="setup",
            kind="setup",
            run=run,
        )
        return self._enqueue(job, share=True)

    def _enqueue(self, job: Job, *, share: bool = False) -> Job:
        """Queue ``job``; with ``share``, return instead the unfinished job of the same kind,
        model, layer and source if there is one (checked under the same lock as the queueing)."""
        with self._guard:
            if share:
                for other in self._jobs.values():
                    if other.kind == job.kind and not other.finished and other.where == job.where:
                        return other
            if self._closed:
                raise QueueFullError("the server is shutting down; try again after it restarts", 5)
            if len(self._queue) >= self.max_queued:
                raise QueueFullError(
                    f"the audit queue is full ({len(self._queue)} jobs waiting, at most "
                    f"{self.max_queued}); try again when a job has finished",
                    self._retry_hint(),
                )
            self._jobs[job.id] = job
            self._queue.append(job)
            self._evict()
        job.emit({"kind": "queued", "ahead": self._ahead(job)})
        self._dispatch()
        return job

    def _retry_hint(self) -> int:
        return 30

    def _ahead(self, job: Job) -> int:
        with self._guard:
            return self._queue.index(job) if job in self._queue else 0

    # -- reading ----------------------------------------------------------------------

    def get(self, job_id: str) -> Job | None:
        with self._guard:
            return self._jobs.get(job_id)

    def jobs(self) -> list[Job]:
        with self._guard:
            return list(self._jobs.values())

    def active_setup(self, model: str | None, layer: int, source: str = "hidden") -> Job | None:
        with self._guard:
            for job in self._jobs.values():
                if job.kind == "setup" and not job.finished and job.where == (model, layer, source):
                    return job
        return None

    # -- cancelling -------------------------------------------------------------------

    def cancel(self, job_id: str) -> Job | None:
        """Cancel a job: a queued one ends at once, a running one at its next batch."""
        with self._guard:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            job.cancel.set()
            queued = job in self._queue
            if queued:
                self._queue.remove(job)
        if queued:
            self._end(job, "cancelled", {"code": "cancelled", "message": "cancelled while queued"})
        return job

    def shutdown(self, timeout: float = 5.0) -> None:
        """Refuse new jobs, cancel every job, and wait up to ``timeout`` s for workers to end."""
        with self._guard:
            self._closed = True
            queued, self._queue = self._queue, []
            threads = [j.thread for j in self._running.values() if j.thread is not None]
            for job in self._jobs.values():
                job.cancel.set()
        for job in queued:
            self._end(job, "cancelled", {"code": "cancelled", "message": "the server stopped"})
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- running ----------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Start queued jobs while a slot is free; drop jobs whose clients went away."""
        dropped: list[Job] = []
        with self._guard:
            if self._closed:
                return
            for job in list(self._queue):
                if len(self._running) >= self.max_running:
                    break
                if job.model in self._running:
                    continue
                self._queue.remove(job)
                if job.watchers == 0 and time.monotonic() - job.touched > self.abandon_after_s:
                    dropped.append(job)
                    continue
                job.status = "running"
                job.started = time.time()
                self._running[job.model] = job
                job.thread = threading.Thread(
                    target=self._work, args=(job,), name=f"audit-{job.id}", daemon=True
                )
                job.thread.start()
        for job in dropped:
            self._end(
                job,
                "cancelled",
                {
                    "code": "abandoned",
                    "message": "dropped before it started: no client followed it for "
                    f"{self.abandon_after_s:g} s",
                },
            )

    def _work(self, job: Job) -> None:
        status, error = "done", None
        try:
            if job.cancel.is_set():
                raise InterruptedError("cancelled before it started")
            assert job.run is not None
            job.result = job.run(job)
        except InterruptedError as exc:
            status, error = "cancelled", {"code": "cancelled", "message": str(exc)}
        except VeilError as exc:
            status, error = "error", {"code": _code(exc), "message": str(exc)}
        except Exception:  # a worker must always report how it ended; details go to the log
            log.exception("audit job %s failed", job.id)
            status = "error"
            error = {
                "code": "internal_error",
                "message": "the job failed with an internal error (details are in the server log)",
            }
        finally:
            job.run = None  # free the states and the closure
        with self._guard:
            if self._running.get(job.model) is job:
                del self._running[job.model]
        self._end(job, status, error)
        self._dispatch()

    def _end(self, job: Job, status: str, error: dict[str, str] | None) -> None:
        job.error = error
        job.status = status
        if error is None:
            job.emit({"kind": "done", "result": job.result})
        else:
            job.emit({"kind": "error", **error})

    def _evict(self) -> None:
        finished = [j for j in self._jobs.values() if j.finished]
        while len(self._jobs) > self.max_kept and finished:
            self._jobs.pop(finished.pop(0).id, None)


def _new_id() -> str:
    return secrets.token_urlsafe(9)


def _code(exc: VeilError) -> str:
    from companion.audit.service import SetupRequiredError

    return "setup_required" if isinstance(exc, SetupRequiredError) else type(exc).__name__
