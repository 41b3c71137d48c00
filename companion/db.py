"""One way to open SQLite for every store of the companion: documents, guest keys, conversations.

* :func:`connect` gives a connection with Veil's settings: autocommit (transactions are
  explicit, :func:`transaction`), rows by name, a busy timeout, WAL, ``synchronous =
  FULL`` (a budget charge survives a power cut, not only a killed process), foreign keys
  on, and ``secure_delete`` on (deleted rows are overwritten with zeros, not left in
  free space).  The file is created 0600 before SQLite opens it, so its -wal and -shm
  files (SQLite gives them the database's mode) are the person's alone too.
* :func:`migrate` applies a store's numbered :class:`Migration` s in order, each in one
  transaction with ``PRAGMA user_version`` set to its number: a store written before
  numbered migrations has version 0, so every step must also accept the shapes those
  stores had (``IF NOT EXISTS``, checks before rebuilding).
* :func:`forget_deleted` moves the WAL into the database and truncates it: after a
  delete, the deleted rows' old pages are in neither file.
* :func:`storage_problem` says whether an error is the disk being full (507) or the
  storage failing otherwise (503); :mod:`companion.errors` answers with it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from py_core.errors import InvalidParameterError

BUSY_TIMEOUT_S = 10.0

# Primary result codes (the low byte of an extended code), https://sqlite.org/rescode.html
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_NOMEM = 7
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14


@dataclass(frozen=True, slots=True)
class Migration:
    """Step ``version`` of a store's schema: ``apply(conn)`` runs inside one transaction.

    ``foreign_keys_off``: the step rebuilds tables the way SQLite's documentation
    prescribes (foreign keys off around the transaction, checked before it commits).
    """

    version: int
    name: str
    apply: Callable[[sqlite3.Connection], None]
    foreign_keys_off: bool = False


def statements(script: str) -> list[str]:
    """The SQL statements of ``script``, one by one (triggers kept whole).

    ``executescript`` commits any open transaction first, so a migration runs its
    script through ``execute`` statement by statement instead.
    """
    out: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                out.append(current.strip())
            current = ""
    if current.strip() and not current.strip().startswith("--"):
        raise InvalidParameterError(f"an incomplete SQL statement: {current.strip()[:80]!r}")
    return out


def run_script(conn: sqlite3.Connection, script: str) -> None:
    """Every statement of ``script`` on ``conn``, inside whatever transaction is open."""
    for statement in statements(script):
        conn.execute(statement)


def _create_private(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    private(path)


def private(path: Path) -> None:
    """The database and its WAL files are the person's alone (0600), whatever the umask."""
    for suffix in ("", "-wal", "-shm"):
        file = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(file).st_mode & 0o077:
                os.chmod(file, 0o600)


def connect(path: Path, *, check_same_thread: bool = False) -> sqlite3.Connection:
    """A connection to ``path`` (created 0600 if missing) with Veil's settings."""
    path = Path(path)
    if not path.exists():
        _create_private(path)
    conn = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT_S,
        isolation_level=None,
        check_same_thread=check_same_thread,
    )
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA secure_delete = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if one is still open.

    SQLite rolls a transaction back by itself after some errors (a full disk, an I/O
    error); a second ROLLBACK would then fail with "no transaction is active" and hide
    the error that matters, so it is only sent while a transaction is open, and its own
    failure is not raised over the first one.
    """
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
    """``BEGIN <mode>`` ... ``COMMIT``: all or nothing; any error rolls back and is raised."""
    if mode not in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE"):
        raise InvalidParameterError(f"unknown transaction mode {mode!r}")
    conn.execute(f"BEGIN {mode}")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration], *, label: str) -> int:
    """Apply the steps of ``migrations`` newer than the store's ``user_version``; the version.

    A store of a newer Veil (a version above the last step) is refused unchanged.
    """
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(migrations) + 1)):
        raise InvalidParameterError(f"migrations must be numbered 1, 2, ...; got {versions}")
    current = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if current > len(migrations):
        raise InvalidParameterError(
            f"{label} has schema version {current}, newer than this Veil's "
            f"{len(migrations)}; upgrade Veil or use another home"
        )
    for step in migrations[current:]:
        if step.foreign_keys_off:
            conn.execute("PRAGMA foreign_keys = OFF")
        try:
            with transaction(conn):
                step.apply(conn)
                if step.foreign_keys_off:
                    problems = conn.execute("PRAGMA foreign_key_check").fetchall()
                    if problems:
                        raise InvalidParameterError(
                            f"{label} has {len(problems)} broken references; it was left "
                            f"unchanged (migration {step.version:03d}_{step.name})"
                        )
                conn.execute(f"PRAGMA user_version = {int(step.version)}")
        finally:
            if step.foreign_keys_off:
                conn.execute("PRAGMA foreign_keys = ON")
    return len(migrations)


def forget_deleted(conn: sqlite3.Connection) -> bool:
    """Checkpoint the WAL into the database and truncate it to 0 bytes; True if it was.

    With ``secure_delete`` on, the database's copies of deleted rows are zeros; the WAL
    may still hold the pages as they were before, until this.  False when a reader kept
    part of the WAL (it is truncated at the next call).
    """
    row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return row is not None and int(row[0]) == 0


StorageProblem = Literal["full", "unavailable"]

_UNAVAILABLE = (
    SQLITE_BUSY,
    SQLITE_LOCKED,
    SQLITE_NOMEM,
    SQLITE_READONLY,
    SQLITE_IOERR,
    SQLITE_CANTOPEN,
)


def storage_problem(exc: BaseException) -> StorageProblem | None:
    """What ``exc`` says about the storage: "full" (the disk), "unavailable" (an I/O error,
    a locked or read-only database), or None (not a storage problem)."""
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "full"
        return "unavailable" if exc.errno in (errno.EIO, errno.EROFS) else None
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else int(code) & 0xFF
    text = str(exc).lower()
    if primary == SQLITE_FULL or "database or disk is full" in text:
        return "full"
    if primary in _UNAVAILABLE or any(
        phrase in text for phrase in ("disk i/o error", "database is locked", "readonly database")
    ):
        return "unavailable"
    return None
