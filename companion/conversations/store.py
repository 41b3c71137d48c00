"""The conversation store: one SQLite file, one connection behind a lock.

A conversation has an id (random, 96 bits, so ids cannot be guessed or
enumerated), a title, the settings the page chose for it (model, collection,
defense and its parameters) and its messages in order.  An assistant message
keeps the ``veil`` object of its answer (receipt, citations, budget) so the page
can show them again after a reload.

Regenerate and edit replace a question and everything after it
(:meth:`ConversationStore.replace_from`); :meth:`ConversationStore.search` finds
conversations by their titles and their messages' words
(:mod:`companion.conversations.search`, whose index forgets what is deleted).

When a document is deleted, :meth:`ConversationStore.forget_document` replaces what
the stored answers kept of it -- each citation's passage, heading, page and the
document's name, in the citations and the budget -- by a "deleted" mark, and empties
the WAL: the passage is then in no file (``secure_delete`` zeroes the old rows).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from companion import db
from companion.conversations import search as message_search
from py_core.errors import InvalidParameterError

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    settings TEXT NOT NULL,      -- JSON: model, collection, defense, defense_params, ...
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    veil TEXT,                   -- JSON: the answer's receipt, citations and budget
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_conversation ON messages(conversation_id, id);
"""

MIGRATIONS = (
    db.Migration(1, "conversations", lambda conn: db.run_script(conn, SCHEMA)),
    db.Migration(2, "message_search", message_search.install),  # FTS5 over the messages
)
# What a stored answer keeps of a deleted document in place of its name.
DELETED_DOCUMENT = "(deleted document)"

MAX_TITLE = 200
DEFAULT_TITLE = "New conversation"  # replaced by the first question (title_from) when asked
TITLE_CHARS = 60


def title_from(question: str) -> str:
    """A conversation's title from its first question: one line, at most TITLE_CHARS."""
    text = " ".join(question.split()) or DEFAULT_TITLE
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[: TITLE_CHARS - 1]
    if " " in cut[TITLE_CHARS // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:") + "…"


SETTING_KEYS = frozenset(
    {
        "model",
        "collection",
        "use_documents",
        "defense",
        "defense_params",
        "max_tokens",
        "retrieval_mode",
        "retrieval_min_score",
    }
)
ROLES = ("system", "user", "assistant")


@dataclass
class Message:
    id: int
    role: str
    content: str
    created: float
    veil: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "role": self.role,
            "content": self.content,
            "created": self.created,
            "veil": self.veil,
        }


@dataclass
class Conversation:
    id: str
    title: str
    settings: dict[str, Any]
    created: float
    updated: float
    message_count: int = 0
    messages: list[Message] = field(default_factory=list)

    def to_dict(self, *, messages: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "settings": self.settings,
            "created": self.created,
            "updated": self.updated,
            "messages": self.message_count,
        }
        if messages:
            out["messages"] = [m.to_dict() for m in self.messages]
        return out


def check_title(title: str) -> str:
    title = " ".join(str(title).split())
    if not 1 <= len(title) <= MAX_TITLE:
        raise InvalidParameterError(f"a conversation's title must be 1-{MAX_TITLE} characters")
    return title


def check_settings(settings: dict[str, Any]) -> dict[str, Any]:
    unknown = set(settings) - SETTING_KEYS
    if unknown:
        raise InvalidParameterError(
            f"unknown conversation settings {', '.join(sorted(unknown))}; "
            f"allowed: {', '.join(sorted(SETTING_KEYS))}"
        )
    return dict(settings)


class ConversationStore:
    """Conversations in ``path`` (SQLite); every method is safe from worker threads."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = db.connect(self.path)
        try:
            db.migrate(self._db, MIGRATIONS, label=f"the conversations {self.path}")
        except BaseException:
            self._db.close()
            raise
        db.private(self.path)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def create(
        self, title: str = DEFAULT_TITLE, settings: dict[str, Any] | None = None
    ) -> Conversation:
        now = time.time()
        conv = Conversation(
            id="conv_" + secrets.token_hex(12),
            title=check_title(title),
            settings=check_settings(settings or {}),
            created=now,
            updated=now,
        )
        with self._lock:
            self._db.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
                (conv.id, conv.title, json.dumps(conv.settings), now, now),
            )
        return conv

    def list(self) -> list[Conversation]:
        """Newest activity first, without the messages."""
        with self._lock:
            rows = self._db.execute(
                "SELECT c.*, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) "
                "AS n FROM conversations c ORDER BY c.updated DESC, c.created DESC"
            ).fetchall()
        return [self._conversation(r, r["n"]) for r in rows]

    def get(self, conv_id: str) -> Conversation | None:
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM conversations WHERE id = ?", (conv_id,)
            ).fetchone()
            if row is None:
                return None
            rows = self._db.execute(
                "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conv_id,)
            ).fetchall()
        conv = self._conversation(row, len(rows))
        conv.messages = [
            Message(
                id=r["id"],
                role=r["role"],
                content=r["content"],
                created=r["created"],
                veil=json.loads(r["veil"]) if r["veil"] else None,
            )
            for r in rows
        ]
        return conv

    def update(
        self, conv_id: str, *, title: str | None = None, settings: dict[str, Any] | None = None
    ) -> Conversation | None:
        """Rename and/or change settings (merged into the stored ones)."""
        conv = self.get(conv_id)
        if conv is None:
            return None
        if title is not None:
            conv.title = check_title(title)
        if settings is not None:
            conv.settings = {**conv.settings, **check_settings(settings)}
        conv.updated = time.time()
        with self._lock:
            self._db.execute(
                "UPDATE conversations SET title = ?, settings = ?, updated = ? WHERE id = ?",
                (conv.title, json.dumps(conv.settings), conv.updated, conv_id),
            )
        return conv

    def search(self, query: str) -> builtins.list[tuple[Conversation, message_search.Hit]]:
        """The conversations whose title, or one of whose messages, has every word of
        ``query`` (newest activity first), each with where it matched."""
        with self._lock:
            hits = message_search.search(self._db, query)
        return [(c, hits[c.id]) for c in self.list() if c.id in hits]

    def delete(self, conv_id: str) -> bool:
        """Delete a conversation and its messages, from the WAL and the search index too
        (``secure_delete``, the index's segments merged)."""
        with self._lock:
            with db.transaction(self._db):
                cursor = self._db.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))
                if cursor.rowcount > 0:
                    message_search.purge(self._db)
            if cursor.rowcount > 0:
                with contextlib.suppress(sqlite3.Error):  # truncated at the next delete
                    db.forget_deleted(self._db)
        return cursor.rowcount > 0

    def replace_from(
        self,
        conv_id: str,
        message_id: int,
        turns: Iterable[tuple[str, str, dict[str, Any] | None]],
    ) -> builtins.list[Message]:
        """Replace the message ``message_id`` and every later one by ``turns`` (role,
        content, veil), in one transaction: regenerate (the same question again) and edit
        (another question in its place).  The replaced messages go from the file, the WAL
        and the search index as a deleted conversation does.  KeyError when the
        conversation or the message is not there."""
        turns = list(turns)
        for role, _content, _veil in turns:
            self._check_role(role)
        now = time.time()
        with self._lock:
            with db.transaction(self._db):
                row = self._db.execute(
                    "SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?",
                    (message_id, conv_id),
                ).fetchone()
                if row is None:
                    raise KeyError(message_id)
                self._db.execute(
                    "DELETE FROM messages WHERE conversation_id = ? AND id >= ?",
                    (conv_id, message_id),
                )
                message_search.purge(self._db)
                kept = [self._insert(conv_id, *turn, now) for turn in turns]
            with contextlib.suppress(sqlite3.Error):  # truncated at the next delete
                db.forget_deleted(self._db)
        return kept

    @staticmethod
    def _check_role(role: str) -> None:
        if role not in ROLES:
            raise InvalidParameterError(f"role must be one of {', '.join(ROLES)}, got {role!r}")

    def _insert(
        self, conv_id: str, role: str, content: str, veil: dict[str, Any] | None, now: float
    ) -> Message:
        """One message at the end of ``conv_id`` (in the caller's transaction and lock)."""
        cursor = self._db.execute(
            "INSERT INTO messages (conversation_id, role, content, veil, created) "
            "SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM conversations WHERE id = ?)",
            (conv_id, role, content, json.dumps(veil) if veil else None, now, conv_id),
        )
        if cursor.rowcount == 0:
            raise KeyError(conv_id)
        self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conv_id))
        return Message(
            id=int(cursor.lastrowid or 0), role=role, content=content, created=now, veil=veil
        )

    def append(
        self, conv_id: str, role: str, content: str, veil: dict[str, Any] | None = None
    ) -> Message:
        self._check_role(role)
        now = time.time()
        with self._lock, db.transaction(self._db):
            message = self._insert(conv_id, role, content, veil, now)
            if role == "user":  # an untitled conversation is titled by its first question
                self._db.execute(
                    "UPDATE conversations SET title = ? WHERE id = ? AND title = ? AND "
                    "(SELECT COUNT(*) FROM messages WHERE conversation_id = ?) = 1",
                    (title_from(content), conv_id, DEFAULT_TITLE, conv_id),
                )
        return message

    def forget_document(self, document_id: int) -> int:
        """Mark the deleted document's passages in every stored answer; how many changed."""
        return self.forget_documents([document_id])

    def forget_documents(self, document_ids: Iterable[int]) -> int:
        """Mark the deleted documents' passages in every stored answer; how many changed.

        Each citation of it keeps its number and ids but loses its passage (``text``
        null, as a guest's citations have none), heading, page and the document's name,
        and says ``deleted``; its entries in the answer's budget lose the name too.  The
        answers' own words are kept.  Document ids are never reused, so the id is enough.
        """
        ids = {str(int(i)) for i in document_ids}
        changed = 0
        if not ids:
            return 0
        with self._lock:
            with db.transaction(self._db):
                rows = self._db.execute(
                    "SELECT id, veil FROM messages WHERE veil IS NOT NULL AND veil LIKE ?",
                    ("%document_id%",),
                ).fetchall()
                for row in rows:
                    veil = json.loads(row["veil"])
                    if _forget(veil, ids):
                        self._db.execute(
                            "UPDATE messages SET veil = ? WHERE id = ?",
                            (json.dumps(veil), row["id"]),
                        )
                        changed += 1
            if changed:
                with contextlib.suppress(sqlite3.Error):  # truncated at the next delete
                    db.forget_deleted(self._db)
        return changed

    @staticmethod
    def _conversation(row: sqlite3.Row, count: int) -> Conversation:
        return Conversation(
            id=row["id"],
            title=row["title"],
            settings=json.loads(row["settings"]),
            created=row["created"],
            updated=row["updated"],
            message_count=count,
        )


def _forget(value: Any, ids: set[str]) -> bool:
    """Scrub, in place, every dict under ``value`` that names a document of ``ids``."""
    changed = False
    if isinstance(value, dict):
        ref = value.get("document_id")
        if ref is not None and str(ref) in ids and not value.get("deleted"):
            for name, blank in (("text", None), ("heading", None), ("page", None)):
                if name in value:
                    value[name] = blank
            for name in ("document", "name"):
                if name in value:
                    value[name] = DELETED_DOCUMENT
            value["deleted"] = True
            changed = True
        for item in value.values():
            changed = _forget(item, ids) or changed
    elif isinstance(value, list):
        for item in value:
            changed = _forget(item, ids) or changed
    return changed


def to_markdown(conv: Conversation) -> str:
    """A conversation as Markdown: title, settings, each turn, and each answer's sources."""
    lines = [f"# {conv.title}", ""]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(conv.created))
    lines.append(f"Started {when}.")
    for key in ("model", "collection", "defense"):
        if conv.settings.get(key):
            lines.append(f"- {key}: {conv.settings[key]}")
    lines.append("")
    for m in conv.messages:
        speaker = {"user": "You", "assistant": "Assistant", "system": "System"}[m.role]
        lines += [f"## {speaker}", "", m.content.strip() or "(empty)", ""]
        veil = m.veil or {}
        receipt = veil.get("receipt") or {}
        if receipt.get("headline"):
            lines += [f"*{receipt['headline']}*", ""]
        for c in veil.get("citations") or []:
            where = str(c.get("document", ""))
            if c.get("page"):
                where += f", p. {c['page']}"
            if c.get("heading"):
                where += f" ({c['heading']})"
            excerpt = " ".join(str(c.get("text") or "").split())
            excerpt = excerpt[:200] + ("…" if len(excerpt) > 200 else "")
            lines.append(f"{c.get('n', '')}. {where}" + (f": “{excerpt}”" if excerpt else ""))
        if veil.get("citations"):
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
