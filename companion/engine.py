"""The model behind the API: one generation at a time, a bounded queue, timeouts.

Generation runs in a worker thread so the event loop stays free; streamed text
crosses back through an ``asyncio.Queue``.  A request that waits longer than
``queue_timeout_s`` for the model, or finds ``queue_size`` requests already
waiting, gets 503; a generation that runs longer than ``generation_timeout_s``
is cancelled and reported as 504 (or as a final error event when streaming).

Cancellation really stops the work: the generation loop checks the cancel flag
between prefill chunks and before every decoding step, and the model slot is
released only once the worker thread has ended -- never while a cancelled
prefill is still computing -- so "one generation at a time" holds even after a
timeout or a client that went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from companion.errors import APIError, ErrorCode


@dataclass
class LoadState:
    """Where loading one model stands, for ``GET /v1/models/{id}`` and the chat page.

    ``stage`` is the loading stage the loader reported last (finding the files,
    dequantizing a GGUF, reading a saved copy, moving to the device); there is no
    percentage because the loaders do not report one.
    """

    model: str
    state: str = "not_loaded"  # not_loaded | loading | loaded | failed
    stage: str = ""
    started: float | None = None
    finished: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        now = time.time()
        elapsed = None
        if self.started is not None:
            elapsed = round((self.finished or now) - self.started, 1)
        return {
            "model": self.model,
            "state": self.state,
            "stage": self.stage,
            "elapsed_s": elapsed,
            "error": self.error,
        }


@dataclass
class ModelEngine:
    spec: str | None
    device: str = "auto"
    dtype: str = "auto"
    backend: str = "auto"  # companion.models.pick_backend
    queue_size: int = 8
    queue_timeout_s: float = 60.0
    generation_timeout_s: float = 300.0
    loaded: Any = None  # companion.models.LoadedModel
    _semaphore: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    _waiting: int = 0
    # The fair queue (slot()): waiting requests' tickets in arrival order, their progress
    # listeners, and when the queue last moved (time.monotonic()).
    _next_ticket: int = 0
    _tickets: list[int] = field(default_factory=list)
    _progress: dict[int, Callable[[int], Any]] = field(default_factory=dict)
    _last_move: float = field(default_factory=time.monotonic)
    _load_lock: threading.Lock = field(default_factory=threading.Lock)
    _holder: _Holder | None = None
    _closing: bool = False
    # What close() ends at once, from any thread: each open stream's and each waiting
    # request's (loop, callback); see close().
    _on_close: dict[int, tuple[asyncio.AbstractEventLoop, Callable[[], Any]]] = field(
        default_factory=dict
    )
    # Models other than the default, loaded on request (most recently used last); at most
    # max_loaded - 1 of them are kept next to the default one.
    max_loaded: int = 2
    others: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    states: dict[str, LoadState] = field(default_factory=dict)
    _other_locks: dict[str, threading.Lock] = field(default_factory=dict)
    _states_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def model_id(self) -> str:
        from companion.models import default_model

        return self.spec or default_model()

    def _state(self, model_id: str) -> LoadState:
        with self._states_lock:
            return self.states.setdefault(model_id, LoadState(model_id))

    def _open(self, spec: str | None, progress: Callable[[str], None]) -> Any:
        """``spec`` loaded for answering (an engine on another runtime opens it there)."""
        from companion.models import load_causal_lm

        return load_causal_lm(
            spec, device=self.device, dtype=self.dtype, progress=progress, backend=self.backend
        )

    def _tracked(self, model_id: str, spec: str | None) -> Any:
        """Open ``spec`` with its stages recorded in ``states[model_id]``."""
        state = self._state(model_id)
        state.state, state.error, state.started, state.finished = "loading", None, time.time(), None

        def progress(text: str) -> None:
            state.stage = text

        try:
            loaded = self._open(spec, progress)
        except BaseException as exc:
            state.state, state.finished = "failed", time.time()
            state.error = str(exc) or type(exc).__name__
            raise
        state.state, state.stage, state.finished = "loaded", "ready", time.time()
        return loaded

    def load(self, model: Any = None) -> Any:
        """The default model, or ``model`` (a companion.models.ModelEntry), loaded if needed.

        Blocking: call it from a worker thread (chat does), or use :meth:`start_load`.
        """
        if model is None or model.id == self.model_id:
            with self._load_lock:
                if self.loaded is None:
                    self.loaded = self._tracked(self.model_id, self.model_id)
                return self.loaded
        with self._states_lock:
            lock = self._other_locks.setdefault(model.id, threading.Lock())
        with lock:
            loaded = self.others.get(model.id)
            if loaded is None:
                loaded = self._tracked(model.id, model.spec)
                self.others[model.id] = loaded
                while len(self.others) > max(self.max_loaded - 1, 1):
                    dropped, _ = self.others.popitem(last=False)  # freed once no answer uses it
                    self._state(dropped).state = "not_loaded"
            self.others.move_to_end(model.id)
            return loaded

    def is_loaded(self, model_id: str) -> bool:
        if model_id == self.model_id:
            return self.loaded is not None
        return model_id in self.others

    def load_state(self, model_id: str) -> dict[str, Any]:
        state = self._state(model_id).to_dict()
        if self.is_loaded(model_id):
            state["state"] = "loaded"
        elif state["state"] == "loaded":  # dropped to make room for another model
            state["state"] = "not_loaded"
        return state

    def start_load(self, model: Any) -> dict[str, Any]:
        """Load ``model`` in a background thread (the server keeps answering); its state."""
        state = self._state(model.id)
        if not self.is_loaded(model.id) and state.state != "loading":
            state.state, state.stage, state.error = "loading", "queued", None
            state.started, state.finished = time.time(), None

            def run() -> None:
                with contextlib.suppress(BaseException):  # recorded in the state
                    self.load(model)

            threading.Thread(target=run, name=f"veil-load-{model.id}", daemon=True).start()
        return self.load_state(model.id)

    def engine_for(self, plan: Any) -> ModelEngine:
        """The engine that generates this answer (the in-process loop runs every defense);
        a 400 for one no engine here can run."""
        return self

    def check_queue(self) -> None:
        """503 when the model is busy and the queue is full, or the server is stopping."""
        if self._closing:
            raise APIError(503, ErrorCode.BUSY, "the companion is stopping; try again later")
        if self._semaphore.locked() and self._waiting >= self.queue_size:
            raise APIError(
                503,
                ErrorCode.BUSY,
                f"the model is busy and {self._waiting} requests are already waiting; "
                "try again shortly",
            )

    def queue_position(self, ticket: int) -> int:
        """How many requests are before ``ticket``: the one generating and those waiting."""
        ahead = sum(1 for t in self._tickets if t < ticket)
        return ahead + (1 if self._semaphore.locked() else 0)

    def _moved(self) -> None:
        """The queue moved (a request got the model, left the queue or made progress)."""
        self._last_move = time.monotonic()
        for ticket, progress in list(self._progress.items()):
            with contextlib.suppress(Exception):  # a listener's failure is not the queue's
                progress(self.queue_position(ticket))

    @contextlib.asynccontextmanager
    async def slot(self, progress: Callable[[int], Any] | None = None) -> AsyncIterator[None]:
        """Hold the model; wait in a fair first-come, first-served queue for it.

        ``progress(ahead)`` is called when the request starts waiting and whenever the
        queue moves, with the number of requests before it. A waiting request is never
        refused while the queue moves: 503 only when ``queue_size`` requests already
        wait, or when nothing happened for ``queue_timeout_s`` -- no request got the
        model and the one holding it produced nothing (a stuck model).

        When the holder leaves while its worker thread still runs (a timeout, a
        client that went away), the worker is cancelled and the slot passes to the
        next request only when that thread has ended.
        """
        self.check_queue()
        self._waiting += 1
        self._next_ticket += 1
        ticket = self._next_ticket
        self._tickets.append(ticket)
        if progress is not None:
            self._progress[ticket] = progress
            with contextlib.suppress(Exception):
                progress(self.queue_position(ticket))
        # asyncio.Semaphore wakes its waiters in arrival order (and lets no newcomer
        # overtake one that was woken): first come, first served.
        acquire = asyncio.ensure_future(self._semaphore.acquire())
        stopping: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def stop() -> None:  # close(), in this loop
            if not stopping.done():
                stopping.set_result(None)

        self._on_close[id(stopping)] = (asyncio.get_running_loop(), stop)
        got = False
        try:
            while True:
                since = self._last_move
                either: set[asyncio.Future[Any]] = {acquire, stopping}
                await asyncio.wait(
                    either, timeout=self.queue_timeout_s, return_when="FIRST_COMPLETED"
                )
                if stopping.done() and not acquire.done():
                    raise APIError(
                        503, ErrorCode.BUSY, "the companion is stopping; try again later"
                    )
                if acquire.done():
                    acquire.result()
                    got = True
                    break
                if self._last_move == since:  # nothing moved for queue_timeout_s
                    raise APIError(
                        503,
                        ErrorCode.BUSY,
                        f"waited {self.queue_timeout_s:g} s for the model while the queue did "
                        "not move (no answer ended, the running one produced nothing); try "
                        "again",
                    )
            if self._closing:
                self._semaphore.release()
                got = False
                raise APIError(503, ErrorCode.BUSY, "the companion is stopping; try again later")
        finally:
            self._on_close.pop(id(stopping), None)
            if not got:
                if acquire.done() and not acquire.cancelled() and acquire.exception() is None:
                    if not self._closing:  # granted just as this request gave up: pass it on
                        self._semaphore.release()
                else:
                    acquire.cancel()
            self._waiting -= 1
            self._tickets.remove(ticket)
            self._progress.pop(ticket, None)
            self._moved()
        holder = _Holder(asyncio.get_running_loop(), self._semaphore)
        self._holder = holder
        try:
            yield
        finally:
            if self._holder is holder:
                self._holder = None
            holder.leave()

    @property
    def busy(self) -> bool:
        """Whether a generation holds the model (or its cancelled thread is still ending)."""
        return self._semaphore.locked()

    def close(self) -> None:
        """Server shutdown: cancel the running generation, admit no new one, and end every
        open stream and waiting request now (a 503 "stopping"), without waiting for the
        worker thread: a forward pass in progress (a prefill chunk, seconds on a busy CPU)
        cannot be interrupted, and the server's exit should not wait for it.  Safe from any
        thread."""
        self._closing = True
        holder = self._holder
        if holder is not None and holder.cancel is not None:
            holder.cancel.set()
        for loop, callback in list(self._on_close.values()):
            with contextlib.suppress(RuntimeError):  # that loop is closed already
                loop.call_soon_threadsafe(callback)

    async def run_stream(self, work: Callable[[threading.Event], Any]) -> AsyncIterator[str]:
        """Run ``work(cancel)`` (an iterator of text deltas) in a thread; yield its deltas.

        Cancels the work when the consumer stops early or the timeout passes, and
        waits for the thread to end (inside :meth:`slot`, the slot is released by
        the thread itself if this wait is interrupted).
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()
        holder = self._holder
        ended = threading.Event()

        def runner() -> None:
            try:
                for delta in work(cancel):  # the work itself stops once cancel is set
                    loop.call_soon_threadsafe(queue.put_nowait, ("delta", delta))
                loop.call_soon_threadsafe(queue.put_nowait, ("done", None))
            except BaseException as exc:  # forwarded to the consumer
                with contextlib.suppress(RuntimeError):  # the loop may be closed at shutdown
                    loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))
            finally:
                ended.set()
                if holder is not None:
                    holder.thread_ended()

        thread = threading.Thread(target=runner, name="veil-generate", daemon=True)
        if holder is not None:
            holder.attach(thread, cancel)
        deadline = time.monotonic() + self.generation_timeout_s
        closing = (loop, lambda: queue.put_nowait(("closing", None)))
        self._on_close[id(closing)] = closing
        thread.start()
        try:
            while True:
                remaining = deadline - time.monotonic()
                try:  # asyncio.timeout, not wait_for: it never swallows a cancellation
                    async with asyncio.timeout(max(remaining, 0.0)):
                        kind, value = await queue.get()
                except TimeoutError:
                    cancel.set()
                    raise APIError(
                        504,
                        ErrorCode.TIMEOUT,
                        f"generation took longer than {self.generation_timeout_s:g} s and was "
                        "stopped; ask for fewer tokens (max_tokens) or send a shorter prompt",
                    ) from None
                if kind == "delta":
                    self._last_move = time.monotonic()  # the holder makes progress
                    yield value
                elif kind == "done":
                    return
                elif kind == "closing":
                    raise APIError(
                        503, ErrorCode.BUSY, "the companion is stopping; the answer was cut short"
                    )
                else:
                    raise value
        finally:
            self._on_close.pop(id(closing), None)
            cancel.set()
            if not self._closing:  # stopping: the daemon thread ends with the process
                # Wait for the worker to notice, without blocking the event loop.
                await asyncio.to_thread(ended.wait)


class _Holder:
    """One holder of the model slot and the worker thread it started.

    The semaphore is released exactly once: by :meth:`leave` when no worker is
    running, else by the worker's own end (:meth:`thread_ended`).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, semaphore: asyncio.Semaphore) -> None:
        self.loop = loop
        self.semaphore = semaphore
        self.lock = threading.Lock()
        self.running = 0
        self.left = False
        self.released = False
        self.cancel: threading.Event | None = None

    def attach(self, thread: threading.Thread, cancel: threading.Event) -> None:
        with self.lock:
            self.running += 1
            self.cancel = cancel

    def thread_ended(self) -> None:
        with self.lock:
            self.running -= 1
            release = self.left and self.running == 0 and not self.released
            if release:
                self.released = True
        if release:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nothing waits on it
                self.loop.call_soon_threadsafe(self.semaphore.release)

    def leave(self) -> None:
        with self.lock:
            self.left = True
            if self.cancel is not None:
                self.cancel.set()
            release = self.running == 0 and not self.released
            if release:
                self.released = True
        if release:
            self.semaphore.release()


class Engine(Protocol):
    """What the answer service and the routes need of an engine (:class:`ModelEngine`)."""

    loaded: Any  # the default model once loaded (companion.models.LoadedModel), else None

    @property
    def model_id(self) -> str: ...

    def load(self, model: Any = None) -> Any: ...

    def is_loaded(self, model_id: str) -> bool: ...

    def load_state(self, model_id: str) -> dict[str, Any]: ...

    def start_load(self, model: Any) -> dict[str, Any]: ...

    def check_queue(self) -> None: ...

    def slot(
        self, progress: Callable[[int], Any] | None = None
    ) -> contextlib.AbstractAsyncContextManager[None]: ...

    def run_stream(self, work: Callable[[threading.Event], Any]) -> AsyncIterator[str]: ...

    @property
    def busy(self) -> bool: ...

    def close(self) -> None: ...
