"""A companion whose answers are scripted, for tests of the page and the API's plumbing.

The chat model is the tiny random model (companion.audit.tiny); the answer's text is
replaced by a script: the real generation runs first (so the receipt, usage and budget
are the pipeline's own), then the script's text is streamed piece by piece, ``delay``
seconds apart, checking the engine's cancel flag before every piece.  ``Script.cancelled``
records, per answer, when the generation saw the cancel flag (time.monotonic()).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.companion.fakes import tiny_chat_model  # noqa: F401 - its tests import it here


@dataclass
class Script:
    """What the next answers say: ``answers`` in turn (the last one repeats)."""

    answers: list[str] = field(default_factory=lambda: ["Hello."])
    delay: float = 0.0
    pieces: int = 0  # pieces streamed so far, over every answer
    asked: list[str] = field(default_factory=list)  # each answer's last user message
    started: list[float] = field(default_factory=list)
    cancelled: list[float] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)

    def next_text(self) -> str:
        n = len(self.started) - 1
        return self.answers[min(n, len(self.answers) - 1)]


class _Run:
    def __init__(self, real: Any, script: Script, cancel: threading.Event | None) -> None:
        self.real = real
        self.script = script
        self.cancel = cancel
        self.result = real.result

    def __iter__(self) -> Any:
        for _ in self.real:  # the real generation: receipt, token counts, finish reason
            pass
        self.result = self.real.result
        text = self.script.next_text()
        out = ""
        try:
            for piece in _pieces(text):
                if self.cancel is not None and self.cancel.is_set():
                    self.script.cancelled.append(time.monotonic())
                    self.result.finish_reason = "cancelled"
                    return
                if self.script.delay:
                    time.sleep(self.script.delay)
                out += piece
                self.result.text = out
                self.script.pieces += 1
                yield piece
            self.result.finish_reason = "stop"
        finally:
            self.script.finished.append(time.monotonic())


def _pieces(text: str) -> list[str]:
    """The text in pieces of a few characters (one word or its spaces), as tokens come."""
    import re

    return re.findall(r"\s*\S{1,6}|\s+", text) or [text]


def install(monkeypatch: Any, script: Script) -> Script:
    """Make every answer of the companion follow ``script``."""
    import companion.api.chat as chat

    real_start = chat.start

    def start(plan: Any, context: Any, lm: Any, cancel: Any = None, **kw: Any) -> Any:
        script.started.append(time.monotonic())
        script.asked.append(
            next((m["content"] for m in reversed(plan.messages) if m["role"] == "user"), "")
        )
        return _Run(real_start(plan, context, lm, cancel, **kw), script, cancel)

    monkeypatch.setattr(chat, "start", start)
    return script
