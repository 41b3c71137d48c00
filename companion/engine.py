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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from companion.errors import APIError, ErrorCode


@dataclass
class ModelEngine:
    spec: str | None
    device: str = "auto"
    dtype: str = "auto"
    queue_size: int = 8
    queue_timeout_s: float = 60.0
    generation_timeout_s: float = 300.0
    loaded: Any = None  # companion.models.LoadedModel
    _semaphore: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    _waiting: int = 0
    _load_lock: threading.Lock = field(default_factory=threading.Lock)
    _holder: _Holder | None = None
    _closing: bool = False

    @property
    def model_id(self) -> str:
        from companion.models import DEFAULT_MODEL

        return self.spec or DEFAULT_MODEL

    def load(self) -> Any:
        with self._load_lock:
            if self.loaded is None:
                from companion.models import load_causal_lm

                self.loaded = load_causal_lm(self.spec, device=self.device, dtype=self.dtype)
            return self.loaded

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

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold the model; 503 when the queue is full or the wait times out.

        When the holder leaves while its worker thread still runs (a timeout, a
        client that went away), the worker is cancelled and the slot passes to the
        next request only when that thread has ended.
        """
        self.check_queue()
        self._waiting += 1
        try:
            await asyncio.wait_for(self._semaphore.acquire(), timeout=self.queue_timeout_s)
            if self._closing:
                self._semaphore.release()
                raise APIError(503, ErrorCode.BUSY, "the companion is stopping; try again later")
        except TimeoutError:
            raise APIError(
                503,
                ErrorCode.BUSY,
                f"waited {self.queue_timeout_s:g} s for the model without getting it; try again",
            ) from None
        finally:
            self._waiting -= 1
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
        """Server shutdown: cancel the running generation and admit no new one."""
        self._closing = True
        holder = self._holder
        if holder is not None and holder.cancel is not None:
            holder.cancel.set()

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
                    yield value
                elif kind == "done":
                    return
                else:
                    raise value
        finally:
            cancel.set()
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
