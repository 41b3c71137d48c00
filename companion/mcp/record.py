"""The person's RootGuard record on disk, shared by every agent-facing process.

One record per person: the profile, the true values, RootGuard's state (the
noisy cache and its ledger) and a short list of events.  It is the very shape
the extension keeps in ``chrome.storage.local`` under ``rootguard``
(``{profile, trueValues, state, events}``, see ``extension/src/sw/storage.js``),
so one file moves between the browser and the companion unchanged:

* ``veil rootguard export FILE`` writes it with a format tag
  (:data:`RECORD_FORMAT`); ``veil rootguard import FILE`` reads that, the bare
  record the extension stores, or ``{"rootguard": record}`` (what
  ``chrome.storage.local.get("rootguard")`` returns).
* An import that does not extend the record already here (another profile,
  other true values, other draws) is refused with every reason; it is never
  merged.  Only a record that *extends* this one (the same draws, plus roots the
  other side drew later, ledger continued) is taken over.

The companion keeps it in ``<veil home>/rootguard.json`` (mode 0600: it holds the
true values).  :class:`RecordStore` reads and writes it under an exclusive file
lock, re-reading it for every operation, so ``veil mcp serve``, ``veil mcp
proxy`` and the companion's ``/mcp`` endpoint running at the same time never
draw a root twice.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from py_core.errors import StateError
from py_core.rootguard import api

__all__ = [
    "RECORD_FORMAT",
    "Record",
    "RecordStore",
    "compare_records",
    "parse_record",
    "record_path",
]

RECORD_FORMAT = api.RECORD_FORMAT
RECORD_FILE = "rootguard.json"


def record_path(home: Path) -> Path:
    """Where the companion keeps the person's record: ``<veil home>/rootguard.json``."""
    return Path(home) / RECORD_FILE


@dataclass(frozen=True, slots=True)
class Record:
    """A validated record: the profile, the true values, the state, the events."""

    profile: dict[str, Any]
    true_values: dict[str, float]
    state: dict[str, Any]
    events: tuple[dict[str, Any], ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The export format: the extension's stored record with a format tag."""
        return {
            "format": RECORD_FORMAT,
            "version": 1,
            "profile": copy.deepcopy(self.profile),
            "trueValues": dict(self.true_values),
            "state": copy.deepcopy(self.state),
            "events": [dict(e) for e in self.events],
        }

    def with_state(self, state: Mapping[str, Any], event: str, reason: str) -> Record:
        events = (*self.events, {"ts": int(time.time() * 1000), "event": event, "reason": reason})
        return replace(self, state=dict(state), events=events)


def parse_record(data: object, where: str = "the record") -> Record:
    """A :class:`Record` from any accepted shape (:func:`py_core.rootguard.api.check_record`)."""
    checked = api.check_record(data, where)
    return Record(
        profile=checked["profile"],
        true_values=checked["trueValues"],
        state=checked["state"],
        events=tuple(checked["events"]),
    )


def compare_records(here: Record, incoming: Record) -> tuple[str, list[str]]:
    """How ``incoming`` relates to ``here`` (:func:`py_core.rootguard.api.compare_records`)."""
    return api.compare_records(here.to_json(), incoming.to_json())


class RecordStore:
    """The record file, read and written under an exclusive lock (threads and processes)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._thread_lock = threading.Lock()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_path = self.path.with_name(f".{self.path.name}.lock")
        with self._thread_lock:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def exists(self) -> bool:
        return self.path.exists()

    def _read(self) -> Record | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"cannot read {self.path}: {exc.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StateError(f"{self.path} is not JSON ({exc}); it was not used") from None
        return parse_record(data, str(self.path))

    def _write(self, record: Record) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record.to_json(), handle, indent=1)
            handle.write("\n")
        os.replace(tmp, self.path)

    def read(self) -> Record | None:
        """The record, or None when there is none yet."""
        with self._locked():
            return self._read()

    def require(self) -> Record:
        record = self.read()
        if record is None:
            raise StateError(_no_record(self.path))
        return record

    @contextlib.contextmanager
    def update(self) -> Iterator[_Update]:
        """Read the record under the lock; whatever ``.record`` holds at the end is saved.

        Nothing is written when the block raises or leaves ``.record`` unchanged.
        """
        with self._locked():
            current = self._read()
            if current is None:
                raise StateError(_no_record(self.path))
            box = _Update(current)
            yield box
            if box.record is not current and box.record != current:
                self._write(box.record)

    def create(self, record: Record) -> None:
        """Write ``record`` where there is none; refuse if one exists."""
        with self._locked():
            if self.path.exists():
                raise StateError(
                    f"{self.path} already holds a RootGuard record; it is never overwritten "
                    "silently (use 'veil rootguard import --replace' to replace it on purpose)"
                )
            self._write(record)

    def replace_with(self, record: Record) -> Record | None:
        """Write ``record``, keeping the previous file as ``<name>.bak``; the previous record."""
        with self._locked():
            previous = self._read() if self.path.exists() else None
            if self.path.exists():
                os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
            self._write(record)
            return previous


@dataclass(slots=True)
class _Update:
    record: Record


def _no_record(path: Path) -> str:
    return (
        f"no RootGuard record at {path}: import the one from the extension's options page "
        "('veil rootguard import FILE') or create one ('veil rootguard init --values FILE')"
    )
