"""Guest keys: who may chat with the companion besides its owner, and on what terms.

The owner's token (``<veil home>/token``) can do everything.  A **guest key**,
created by the owner (``veil keys create``, ``POST /v1/keys`` or the chat page),
can only chat over one collection with one fixed defense and its parameters; the
API never shows it chunk text (see :mod:`companion.api.keys`).

Storage: ``<veil home>/keys.sqlite3`` (mode 0600, like the token), apart from the
document store, so credentials are never copied or shared along with documents,
and ``veil keys`` works without opening the store or loading the embedder.

* A key is ``veil_guest_`` + ``secrets.token_urlsafe(32)`` (256 random bits),
  shown once at creation.  Only its SHA-256 is stored.  A key that holds 256
  random bits needs no slow password hash (bcrypt, scrypt): those exist to slow
  down guessing of *low-entropy* secrets, and no amount of guessing finds a
  256-bit preimage.
* :meth:`KeyStore.authenticate` compares the presented key's digest with every
  stored digest using :func:`hmac.compare_digest`, without stopping at a match,
  so the time taken does not depend on which key (if any) matched.
* Every request reads the table again, so ``veil keys revoke`` (another process)
  and expiry take effect on the very next request.
* A request writes nothing that it needs: ``last_used`` is written at most once a
  minute per key (:data:`LAST_USED_EVERY_S`), and a write that fails (a full disk) is
  logged and skipped, so guests keep authenticating on a full disk.
* A key's ``budget`` is a lifetime cap on ε: every answer under a formal defense
  is charged its calibrated ε (the guarantee, known before generation) before it
  is generated, atomically, and an answer that would go over the cap is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from companion import db
from py_core.errors import InvalidParameterError, StateError

log = logging.getLogger("veil.keys")

KEY_PREFIX = "veil_guest_"
KEYS_FILE = "keys.sqlite3"
# How stale a key's ``last_used`` may get before a request writes it again (seconds).
LAST_USED_EVERY_S = 60.0

# What a guest key may call: (method, path).  Everything else under /v1 is the owner's.
# /healthz and the pages are public (no token at all).
GUEST_ROUTES: frozenset[tuple[str, str]] = frozenset(
    {
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/models"),
        ("GET", "/v1/defenses"),
    }
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS guest_keys (
    id INTEGER PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,      -- SHA-256 (hex) of the whole key
    label TEXT NOT NULL DEFAULT '',
    collection TEXT NOT NULL,
    defense TEXT NOT NULL,
    params TEXT NOT NULL,               -- JSON: every parameter, defaults filled in
    allow_titles INTEGER NOT NULL DEFAULT 0,
    budget REAL,                        -- lifetime epsilon cap; NULL: none
    spent REAL NOT NULL DEFAULT 0,      -- calibrated epsilon charged so far
    answers INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    expires REAL,                       -- unix time; NULL: never
    revoked_at REAL,
    last_used REAL
);
"""


def keys_path(home: Path) -> Path:
    return Path(home) / KEYS_FILE


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def looks_like_guest_key(value: str) -> bool:
    return value.startswith(KEY_PREFIX)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_expiry(value: str | None, now: float | None = None) -> float | None:
    """Unix time from '30d', '12h', '90m', '2w', '45s', or an ISO date/datetime (UTC if naive)."""
    if value is None or value == "" or value == "never":
        return None
    now = time.time() if now is None else now
    match = _DURATION.match(value)
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        if seconds <= 0:
            raise InvalidParameterError(f"expiry must be in the future; got {value!r}")
        return now + seconds
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidParameterError(
            f"expiry must be a duration (30d, 12h, 90m, 2w) or an ISO date such as "
            f"2026-12-31 or 2026-12-31T18:00; got {value!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    stamp = when.timestamp()
    if stamp <= now:
        raise InvalidParameterError(f"expiry {value!r} is in the past")
    return stamp


def _check_budget(budget: float | None) -> float | None:
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int | float):
        raise InvalidParameterError(f"budget must be a number (epsilon); got {budget!r}")
    if not math.isfinite(budget) or budget <= 0:
        raise InvalidParameterError(f"budget must be a finite epsilon > 0; got {budget!r}")
    return float(budget)


@dataclass(frozen=True, slots=True)
class GuestKey:
    """One guest key as stored (never the key itself)."""

    id: int
    label: str
    collection: str
    defense: str
    params: dict[str, Any]
    allow_titles: bool
    budget: float | None
    spent: float
    answers: int
    created: float
    expires: float | None
    revoked_at: float | None
    last_used: float | None

    @property
    def remaining(self) -> float | None:
        return None if self.budget is None else max(self.budget - self.spent, 0.0)

    def status(self, now: float | None = None) -> Literal["active", "revoked", "expired"]:
        now = time.time() if now is None else now
        if self.revoked_at is not None:
            return "revoked"
        if self.expires is not None and now >= self.expires:
            return "expired"
        return "active"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "label": self.label,
            "collection": self.collection,
            "defense": self.defense,
            "defense_params": dict(self.params),
            "allow_titles": self.allow_titles,
            "budget": self.budget,
            "spent": self.spent,
            "remaining": self.remaining,
            "answers": self.answers,
            "created": self.created,
            "expires": self.expires,
            "revoked_at": self.revoked_at,
            "last_used": self.last_used,
            "status": self.status(),
        }


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request: the owner, a guest (with its key), or nobody (public routes)."""

    kind: Literal["owner", "guest", "public"]
    key: GuestKey | None = None

    @property
    def is_owner(self) -> bool:
        return self.kind == "owner"


OWNER = Principal("owner")
PUBLIC = Principal("public")


def validate_terms(
    collection: str, defense: str, params: dict[str, Any] | None, budget: float | None
) -> tuple[str, dict[str, Any], float | None]:
    """The key's defense and full parameters (validated by the registry) and its budget."""
    from companion.decoding.config import DefenseConfig
    from companion.rag.store import validate_collection_name

    validate_collection_name(collection)
    config = DefenseConfig.from_options(defense, params or {})
    budget = _check_budget(budget)
    if budget is not None and not config.defense.guarantee.formal:
        from companion.decoding.registry import all_defenses

        formal = ", ".join(d.name for d in all_defenses() if d.guarantee.formal)
        raise InvalidParameterError(
            f"a budget caps formal epsilon, and the defense {defense!r} gives no formal "
            f"guarantee, so nothing would ever be charged; choose a formal defense "
            f"({formal}) or leave the budget out"
        )
    return config.name, config.to_dict()["params"], budget


MIGRATIONS = (db.Migration(1, "guest_keys", lambda conn: db.run_script(conn, SCHEMA)),)


@dataclass
class KeyStore:
    """The guest keys table in its own SQLite file (mode 0600).

    One connection (:func:`companion.db.connect`) behind a lock, opened again after
    :meth:`close`; every statement is its own transaction, so the server's middleware,
    its worker threads and ``veil keys`` in another process all see every change at
    once.  Keeping it open keeps the WAL files, so reading needs no new file (a full disk).
    """

    path: Path
    _conn: sqlite3.Connection | None = field(init=False, repr=False, default=None)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        with self._connect() as conn:
            db.migrate(conn, MIGRATIONS, label=f"the guest keys {self.path}")
        db.private(self.path)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                self._conn = db.connect(self.path)
            yield self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @staticmethod
    def _key(row: sqlite3.Row) -> GuestKey:
        return GuestKey(
            id=int(row["id"]),
            label=row["label"],
            collection=row["collection"],
            defense=row["defense"],
            params=json.loads(row["params"]),
            allow_titles=bool(row["allow_titles"]),
            budget=row["budget"],
            spent=float(row["spent"]),
            answers=int(row["answers"]),
            created=float(row["created"]),
            expires=row["expires"],
            revoked_at=row["revoked_at"],
            last_used=row["last_used"],
        )

    def create(
        self,
        *,
        collection: str,
        defense: str,
        params: dict[str, Any] | None = None,
        budget: float | None = None,
        expires: float | None = None,
        allow_titles: bool = False,
        label: str = "",
    ) -> tuple[GuestKey, str]:
        """Store a new key; (the stored key, the key itself -- shown once, never stored)."""
        name, full_params, budget = validate_terms(collection, defense, params, budget)
        if expires is not None and expires <= time.time():
            raise InvalidParameterError("the expiry is in the past")
        if len(label) > 200:
            raise InvalidParameterError(f"label is {len(label)} characters; keep it under 200")
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        with self._connect() as conn:
            cur = conn.execute(
                "INSERT INTO guest_keys (key_hash, label, collection, defense, params, "
                "allow_titles, budget, created, expires) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    hash_key(raw),
                    label,
                    collection,
                    name,
                    json.dumps(full_params, sort_keys=True),
                    int(bool(allow_titles)),
                    budget,
                    time.time(),
                    expires,
                ),
            )
            key_id = int(cur.lastrowid or 0)
        key = self.get(key_id)
        assert key is not None
        return key, raw

    def get(self, key_id: int) -> GuestKey | None:
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM guest_keys WHERE id = ?", (key_id,)).fetchone()
        return None if row is None else self._key(row)

    def list_keys(self) -> list[GuestKey]:
        with self._connect() as conn:
            rows = conn.execute("SELECT * FROM guest_keys ORDER BY id").fetchall()
        return [self._key(r) for r in rows]

    def revoke(self, key_id: int) -> GuestKey | None:
        """Revoke at once (the next request with it is refused); None if there is no such key."""
        with self._connect() as conn:
            conn.execute(
                "UPDATE guest_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (time.time(), key_id),
            )
        return self.get(key_id)

    def authenticate(self, raw: str) -> GuestKey | None:
        """The stored key whose digest equals ``raw``'s (revoked or expired ones too), or None.

        Every stored digest is compared with :func:`hmac.compare_digest` and the loop
        never stops early, so the time does not depend on which key matched.
        """
        digest = hash_key(raw).encode("ascii")
        with self._connect() as conn:
            rows = conn.execute("SELECT id, key_hash FROM guest_keys").fetchall()
            found: int | None = None
            for row in rows:
                if hmac.compare_digest(digest, row["key_hash"].encode("ascii")):
                    found = int(row["id"])
            if found is None:
                return None
            row = conn.execute("SELECT * FROM guest_keys WHERE id = ?", (found,)).fetchone()
        return self._touch(self._key(row))

    def _touch(self, key: GuestKey) -> GuestKey:
        """Write the key's ``last_used`` if it is over a minute old; best effort.

        Authentication needs no write: a failed one (a full disk, a busy database) is
        logged and the request goes on.
        """
        now = time.time()
        if key.last_used is not None and now - key.last_used < LAST_USED_EVERY_S:
            return key
        try:
            with self._connect() as conn:
                conn.execute("UPDATE guest_keys SET last_used = ? WHERE id = ?", (now, key.id))
        except sqlite3.Error as exc:
            if db.storage_problem(exc) is None:
                raise
            log.warning("a guest key's last use was not recorded (%s)", exc)
            return key
        return replace(key, last_used=now)

    def charge(self, key_id: int, epsilon: float) -> GuestKey:
        """Add ``epsilon`` to the key's spend, atomically, unless it would pass the budget.

        Raises :class:`py_core.errors.StateError` (with what is left) if it would.
        """
        if not math.isfinite(epsilon) or epsilon < 0:
            raise InvalidParameterError(f"a charge must be a finite epsilon >= 0; got {epsilon!r}")
        with self._connect() as conn:
            cur = conn.execute(
                "UPDATE guest_keys SET spent = spent + ?, answers = answers + 1 "
                "WHERE id = ? AND (budget IS NULL OR spent + ? <= budget * (1 + 1e-12))",
                (epsilon, key_id, epsilon),
            )
            charged = cur.rowcount == 1
        key = self.get(key_id)
        if key is None:
            raise StateError(f"no guest key with id {key_id}")
        if not charged:
            raise BudgetSpentError(key, epsilon)
        return key


class BudgetSpentError(StateError):
    """The answer would take a guest key over its lifetime epsilon budget."""

    def __init__(self, key: GuestKey, requested: float) -> None:
        self.key = key
        self.requested = requested
        super().__init__(
            f"this guest key's privacy budget is spent: an answer costs epsilon "
            f"{requested:.4g} and the key has {key.remaining or 0.0:.4g} of its "
            f"{key.budget:g} left ({key.spent:.4g} spent over {key.answers} answers); "
            "ask the owner for a new key"
        )
