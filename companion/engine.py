"""The model behind the API: one generation at a time, a bounded queue, timeouts.

Generation runs in a worker thread so the event loop stays free; streamed text
crosses back through an ``asyncio.Queue``.  A request that waits longer than
``queue_timeout_s`` for the model, or finds ``queue_size`` requests already
waiting, gets 503; a generation that runs longer than ``generation_timeout_s``
is cancelled and reported as 504 (or as a final error event when streaming).
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
        """503 when the model is busy and the queue is full."""
        if self._semaphore.locked() and self._waiting >= self.queue_size:
            raise APIError(
                503,
                ErrorCode.BUSY,
                f"the model is busy and {self._waiting} requests are already waiting; "
                "try again shortly",
            )

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold the model; 503 when the queue is full or the wait times out."""
        self.check_queue()
        self._waiting += 1
        try:
            await asyncio.wait_for(self._semaphore.acquire(), timeout=self.queue_timeout_s)
        except TimeoutError:
            raise APIError(
                503,
                ErrorCode.BUSY,
                f"waited {self.queue_timeout_s:g} s for the model without getting it; try again",
            ) from None
        finally:
            self._waiting -= 1
        try:
            yield
        finally:
            self._semaphore.release()

    async def run_stream(self, work: Callable[[threading.Event], Any]) -> AsyncIterator[str]:
        """Run ``work(cancel)`` (an iterator of text deltas) in a thread; yield its deltas.

        Cancels the work when the consumer stops early or the timeout passes.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()

        def runner() -> None:
            try:
                for delta in work(cancel):
                    loop.call_soon_threadsafe(queue.put_nowait, ("delta", delta))
                loop.call_soon_threadsafe(queue.put_nowait, ("done", None))
            except BaseException as exc:  # forwarded to the consumer
                loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))

        thread = threading.Thread(target=runner, name="veil-generate", daemon=True)
        deadline = time.monotonic() + self.generation_timeout_s
        thread.start()
        try:
            while True:
                remaining = deadline - time.monotonic()
                try:
                    kind, value = await asyncio.wait_for(queue.get(), timeout=max(remaining, 0.0))
                except TimeoutError:
                    cancel.set()
                    raise APIError(
                        504,
                        ErrorCode.TIMEOUT,
                        f"generation took longer than {self.generation_timeout_s:g} s and was "
                        "stopped; ask for fewer tokens (max_tokens)",
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
            await asyncio.to_thread(thread.join, 30)
