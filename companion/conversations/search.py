"""Search in the conversations: their titles and every message's words (SQLite FTS5).

``messages_fts`` is an external-content FTS5 table over ``messages(content)`` kept in sync
by triggers (a deleted conversation's messages go by a foreign-key cascade, which fires
them too).  Only the messages' own text is indexed -- what the person asked and what was
answered -- never an answer's ``veil`` object, so a cited passage's words are in no index
of the conversations, before or after its document is deleted.

Deleted means gone: FTS5 keeps a deleted row's terms in its segments until they are
merged, so :func:`purge` merges them all (``optimize``) in the deleting transaction; the
deleted words are then in no segment, and ``secure_delete`` (:func:`companion.db.connect`)
zeroes the pages they were in (tests/companion/test_conversation_search.py scans the files).

A query is words, not FTS5 syntax: each word (letters and digits, any script) must occur,
as a word or the start of one ("tenan" finds "tenancy"), in the title or in one message.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from companion import db

SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
"""

MAX_QUERY_WORDS = 12
MAX_RESULTS = 100
MARK_START, MARK_END = "\x02", "\x03"  # around each matched word in a snippet (the page marks it)
_WORD = re.compile(r"\w+", re.UNICODE)


def install(conn: sqlite3.Connection) -> None:
    """Migration 2: the index and its triggers, filled from the messages already there."""
    db.run_script(conn, SCHEMA)
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")


def purge(conn: sqlite3.Connection) -> None:
    """Merge every segment into one, so deleted messages' words are in none (inside the
    deleting transaction: a delete whose purge fails is rolled back with it)."""
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")


def words(query: str) -> list[str]:
    """The query's words (lower case, each once, at most MAX_QUERY_WORDS)."""
    seen: list[str] = []
    for word in _WORD.findall(query.lower()):
        if word not in seen:
            seen.append(word)
    return seen[:MAX_QUERY_WORDS]


@dataclass
class Hit:
    """A conversation that matches: by its title, or by one message (the best one)."""

    conversation_id: str
    message_id: int | None = None
    role: str | None = None
    snippet: str | None = None  # the message's words around the matches, MARK_START/END

    def to_dict(self) -> dict[str, object]:
        return {
            "message_id": self.message_id,
            "role": self.role,
            "snippet": self.snippet,
            "in": "message" if self.message_id is not None else "title",
        }


def search(conn: sqlite3.Connection, query: str) -> dict[str, Hit]:
    """Conversation id -> why it matches, for the conversations whose title has every word
    of ``query``, or one of whose messages has every word; empty for a query of no words."""
    terms = words(query)
    if not terms:
        return {}
    hits: dict[str, Hit] = {}
    # A title has every word (as a word's start, case-insensitively): few rows, no index.
    for row in conn.execute("SELECT id, title FROM conversations").fetchall():
        title_words = _WORD.findall(row["title"].lower())
        if all(any(w.startswith(t) for w in title_words) for t in terms):
            hits[row["id"]] = Hit(row["id"])
    match = " ".join('"' + t.replace('"', '""') + '"*' for t in terms)
    rows = conn.execute(
        "SELECT m.id, m.conversation_id, m.role, "
        f"snippet(messages_fts, 0, '{MARK_START}', '{MARK_END}', '…', 12) AS snippet "
        "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
        "WHERE messages_fts MATCH ? ORDER BY bm25(messages_fts) LIMIT ?",
        (match, MAX_RESULTS * 5),
    ).fetchall()
    for row in rows:
        hit = hits.get(row["conversation_id"])
        if hit is None or hit.message_id is None:  # the best message of each; a title hit
            hits[row["conversation_id"]] = Hit(  # also shows where the words are said
                row["conversation_id"], int(row["id"]), row["role"], row["snippet"]
            )
    return dict(list(hits.items())[:MAX_RESULTS])
