"""Untrusted documents are parsed in a separate, limited process.

:func:`parse_document` (async) starts ``python -m companion.rag.parse_worker`` in a
session of its own, writes the file to its stdin and reads one JSON answer from its
stdout.  The child, before reading anything, lowers its priority and sets its own
limits (``RLIMIT_AS``: ``memory_bytes``; ``RLIMIT_CPU``: the wall-clock budget, so a
parser that spins is stopped by the kernel too), then calls
:func:`companion.rag.ingest.extract_text`.  The parent never waits on a parser: it
polls, and kills the whole session (the child and any Tesseract it started) with
SIGKILL when the wall-clock budget is spent, when ``cancelled()`` says the client
left, or when the awaiting task is cancelled.  A child that dies (a memory limit hit
inside C code, a signal) is a refusal naming the limit, never a 500.

:class:`ParserSlots` bounds how many parsers run at once (each may use
``memory_bytes``); a request waiting for a slot also stops when its client leaves.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from companion.rag.chunking import Section
from companion.rag.ingest import (
    DEFAULT_MAX_CHARS,
    DocumentLimitError,
    DocumentLimits,
    DocumentTooLargeError,
    ExtractedText,
    OcrUnavailableError,
    ParserMemoryError,
    extract_text,
)
from companion.rag.limits import MIB
from py_core.errors import InvalidParameterError

# The child lowers its priority before it imports anything (its start costs CPU too).
CHILD_START = (
    "import os, runpy; os.nice(10); runpy.run_module('companion.rag.parse_worker', "
    "run_name='__main__')"
)
POLL_S = 0.1  # how often the parent looks at the child, the clock and the client
ROOT = Path(__file__).resolve().parents[2]  # the folder that holds companion/ and py_core/
# What the child's environment keeps of the server's (nothing else: no tokens, no paths).
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TESSDATA_PREFIX", "TMPDIR", "VIRTUAL_ENV")


class ClientGoneError(Exception):
    """The client left while its document was parsed or stored; nothing is kept."""


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """One parse: the text limit, what reading may cost, and the process's own limits."""

    max_chars: int = DEFAULT_MAX_CHARS
    document: DocumentLimits = field(default_factory=DocumentLimits)
    memory_bytes: int = 512 * MIB  # RLIMIT_AS of the child (address space, Tesseract's too)
    timeout_s: float = 120.0  # wall clock; RLIMIT_CPU is the same many seconds

    def __post_init__(self) -> None:
        if self.memory_bytes < 64 * MIB:
            raise InvalidParameterError(
                f"memory_bytes must be at least 64 MiB, got {self.memory_bytes!r}"
            )
        if not self.timeout_s > 0:
            raise InvalidParameterError(f"timeout_s must be positive, got {self.timeout_s!r}")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ParseLimits:
        raw = json.loads(text)
        return cls(
            max_chars=int(raw["max_chars"]),
            document=DocumentLimits(**raw["document"]),
            memory_bytes=int(raw["memory_bytes"]),
            timeout_s=float(raw["timeout_s"]),
        )


def out_of_time(name: str, limits: ParseLimits) -> DocumentLimitError:
    return DocumentLimitError(
        f"{name}: reading the file took longer than {limits.timeout_s:g} s (parse_timeout_s); "
        "split it into smaller files, or save its text and upload that"
    )


def out_of_memory(name: str, limits: ParseLimits, *, damaged: bool = False) -> DocumentLimitError:
    why = " (or the file is damaged)" if damaged else ""
    return DocumentLimitError(
        f"{name}: reading the file needs more than {limits.memory_bytes // MIB} MB of memory "
        f"(parse_memory_mb){why}; split it into smaller files, or save its text and upload "
        "that"
    )


# -- the parent --------------------------------------------------------------------------


class ParserSlots:
    """At most ``size`` parsers at once; waiting polls (no loop-bound primitives), so one
    instance serves every event loop the app runs on (tests start several)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise InvalidParameterError(f"parser slots must be at least 1, got {size!r}")
        self.size = size
        self.busy = 0

    @contextlib.asynccontextmanager
    async def slot(self, cancelled: Callable[[], Awaitable[bool]] | None = None) -> Any:
        import asyncio

        while self.busy >= self.size:
            if cancelled is not None and await cancelled():
                raise ClientGoneError("the client left while waiting for a parser")
            await asyncio.sleep(POLL_S)
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1


def _child_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env["PYTHONPATH"] = str(ROOT)
    env["OMP_THREAD_LIMIT"] = "1"  # Tesseract: one thread, the server keeps the other cores
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


async def parse_document(
    name: str,
    data: bytes,
    limits: ParseLimits,
    *,
    cancelled: Callable[[], Awaitable[bool]] | None = None,
    stats: dict[str, Any] | None = None,
) -> ExtractedText:
    """The text of one file, read by a limited child process (see the module doc).

    Raises what :func:`~companion.rag.ingest.extract_text` raises (the same classes and
    messages), :class:`DocumentLimitError` when the child runs out of time or memory,
    and :class:`ClientGoneError` when ``cancelled()`` turns true.  ``stats`` receives
    the child's peak memory (``peak_rss_bytes``) and the wall time (``seconds``).
    """
    import asyncio  # here, so the child (this module as __main__) does not import it

    started = time.monotonic()
    # Popen in a worker thread: CPython starts the child with vfork, where the event loop's
    # own subprocess support (uvloop's libuv) forks -- copying the page tables of a server
    # holding a model, a pause of the loop on every upload.
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-s", "-c", CHILD_START, limits.to_json()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: Tesseract dies with it
        cwd=str(ROOT),
        env=_child_env(),
    )
    cap = 16 * limits.max_chars + 4 * MIB  # JSON of the text, its sections and metadata
    header = json.dumps({"name": name}).encode() + b"\n"  # JSON: no newline inside
    work = asyncio.ensure_future(asyncio.to_thread(_exchange, proc, header + data, cap))
    try:
        deadline = started + limits.timeout_s
        while True:
            done, _ = await asyncio.wait({work}, timeout=POLL_S)
            if done:
                break
            if time.monotonic() > deadline:
                raise out_of_time(name, limits)
            if cancelled is not None and await cancelled():
                raise ClientGoneError(f"{name}: the client left while the file was read")
        output = work.result()
    finally:
        if proc.poll() is None:
            _kill(proc)
        with contextlib.suppress(BaseException):
            await work  # the thread ends once the killed child's pipe closes
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(proc.wait, 10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
    if stats is not None:
        stats["seconds"] = time.monotonic() - started
    return _answer(name, limits, proc.returncode, output, stats)


def _exchange(proc: Any, data: bytes, cap: int) -> bytes:
    """Write the file to the child (a thread), read its answer (at most ``cap`` bytes),
    wait for it; in a worker thread."""

    def feed() -> None:
        try:
            proc.stdin.write(data)
        except OSError:
            pass  # the child stopped reading: its answer (or death) says why
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    feeder = threading.Thread(target=feed, name="veil-parse-feed", daemon=True)
    feeder.start()
    out = bytearray()
    while chunk := proc.stdout.read1(65536):
        out += chunk
        if len(out) > cap:
            _kill(proc)
            raise DocumentLimitError("the parser's answer passed its size limit")
    feeder.join()
    proc.wait()
    return bytes(out)


def _kill(proc: Any) -> None:
    """SIGKILL the child's whole process group (the child and Tesseract)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


_ERRORS: dict[str, type[InvalidParameterError]] = {
    "invalid": InvalidParameterError,
    "too_large": DocumentTooLargeError,
    "limit": DocumentLimitError,
    "ocr_unavailable": OcrUnavailableError,
}


def _answer(
    name: str, limits: ParseLimits, returncode: int | None, output: bytes, stats: Any
) -> ExtractedText:
    try:
        answer = json.loads(output.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        answer = None
    if not isinstance(answer, dict):  # the child died: the kernel's limits, or a crash
        if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
            raise out_of_time(name, limits)
        raise out_of_memory(name, limits, damaged=True)
    if stats is not None:
        stats["peak_rss_bytes"] = answer.get("peak_rss_bytes")
    if "error" in answer:
        kind = answer["error"]
        if kind == "memory":
            raise out_of_memory(name, limits)
        if kind == "time":
            raise out_of_time(name, limits)
        raise _ERRORS.get(kind, InvalidParameterError)(str(answer.get("message")))
    return ExtractedText(
        text=answer["text"],
        kind=answer["kind"],
        metadata=answer["metadata"],
        sections=tuple(Section(*s) for s in answer["sections"]),
    )


# -- the child ---------------------------------------------------------------------------


def _limit_self(limits: ParseLimits) -> None:
    """The limits: address space, CPU seconds, no core files (the priority is already
    down: :data:`CHILD_START`)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    cpu = int(limits.timeout_s) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _peak_rss() -> int:
    """This process's peak resident memory since its exec, in bytes.

    Linux's ``VmHWM`` is per address space, so it starts afresh at exec; ``ru_maxrss``
    is kept across exec, and a child started by vfork would report the server's own
    peak (2.2 GB seen in the test run next to loaded models) -- only a fallback.
    """
    import resource

    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError):
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def _child(name: str, limits: ParseLimits, data: bytes) -> dict[str, Any]:
    try:
        result = extract_text(name, data, max_chars=limits.max_chars, limits=limits.document)
    except (MemoryError, ParserMemoryError):
        return {"error": "memory"}
    except DocumentLimitError as exc:
        return {"error": "limit", "message": str(exc)}
    except DocumentTooLargeError as exc:
        return {"error": "too_large", "message": str(exc)}
    except OcrUnavailableError as exc:
        return {"error": "ocr_unavailable", "message": str(exc)}
    except InvalidParameterError as exc:
        return {"error": "invalid", "message": str(exc)}
    return {
        "text": result.text,
        "kind": result.kind,
        "metadata": result.metadata,
        "sections": [[s.start, s.end, s.page, s.heading] for s in result.sections],
    }


def main() -> None:
    """``python -m companion.rag.parse_worker LIMITS_JSON`` (run by :data:`CHILD_START`); stdin: a JSON line with the
    file's name, then the file; stdout: one JSON object (the text, or the refusal)."""
    limits = ParseLimits.from_json(sys.argv[1])
    _limit_self(limits)
    signal.signal(signal.SIGXCPU, _cpu_spent)
    stdin = sys.stdin.buffer
    name = str(json.loads(stdin.readline())["name"])
    data = stdin.read()
    try:
        answer = _child(name, limits, data)
    except MemoryError:
        answer = {"error": "memory"}
    answer["peak_rss_bytes"] = _peak_rss()
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()


def _cpu_spent(signum: int, frame: Any) -> None:
    sys.stdout.write(json.dumps({"error": "time", "peak_rss_bytes": _peak_rss()}))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
