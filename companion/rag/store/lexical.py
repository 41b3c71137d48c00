"""The lexical index of the document store: SQLite FTS5 over the chunks, ranked by BM25.

An external-content table over ``chunks(text, heading)`` kept in sync by triggers --
foreign-key cascades (a deleted document or collection) fire them too.  FTS5 keeps a
deleted row's terms in its segments until they are merged, so :meth:`LexicalIndex.purge`
merges them all (``optimize``) after every delete: the deleted words are then in no
segment, and ``secure_delete`` (:func:`companion.db.connect`) zeroes the pages they were in.
"""

from __future__ import annotations

import sqlite3
import threading

from companion.db import run_script, storage_problem, transaction
from companion.rag.store.records import validate_collection_name
from py_core.errors import InvalidParameterError

FTS_TOKENIZERS = {
    # Words of letters and digits in any script, diacritics folded: an e-mail address or
    # an id becomes a run of tokens that a phrase query matches in order.
    "unicode61": "unicode61 remove_diacritics 2",
    # Every 3-character substring: matches inside words (stems, glued ids), bigger index.
    "trigram": "trigram",
    # English stemming on top of unicode61.
    "porter": "porter unicode61 remove_diacritics 2",
}
DEFAULT_FTS_TOKENIZER = "unicode61"
FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, heading, content='chunks', content_rowid='id', tokenize='{tokenize}'
);
CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text, heading) VALUES (new.id, new.text, new.heading);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, heading)
    VALUES ('delete', old.id, old.text, old.heading);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_update AFTER UPDATE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, heading)
    VALUES ('delete', old.id, old.text, old.heading);
    INSERT INTO chunks_fts (rowid, text, heading) VALUES (new.id, new.text, new.heading);
END;
"""


def check_tokenizer(name: str) -> str:
    if name not in FTS_TOKENIZERS:
        raise InvalidParameterError(
            f"unknown FTS tokenizer {name!r}; one of " + ", ".join(sorted(FTS_TOKENIZERS))
        )
    return name


class LexicalIndex:
    """The FTS5 index ``chunks_fts`` on the store's connection (and under its lock)."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock, tokenizer: str) -> None:
        self.conn = conn
        self.lock = lock
        self.tokenizer = check_tokenizer(tokenizer)

    def ensure(self) -> None:
        """The index, made (and filled from the chunks) when missing.

        The tokenizer is fixed when the index is made; another one asked for rebuilds it.
        Nothing is written when the index is there with this tokenizer (a store opens on
        a full disk).
        """
        with self.lock, transaction(self.conn, "DEFERRED"):
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'fts_tokenizer'").fetchone()
            exists = self.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chunks_fts'"
            ).fetchone()
            if exists is not None and (row is None or row["value"] != self.tokenizer):
                self.conn.execute("DROP TABLE chunks_fts")
                exists = None
            # the triggers too: a rebuilt chunks table lost them
            run_script(self.conn, FTS_SCHEMA.format(tokenize=FTS_TOKENIZERS[self.tokenizer]))
            if exists is None:
                self.conn.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild')")
                self.conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('fts_tokenizer', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (self.tokenizer,),
                )

    def purge(self) -> None:
        """Merge every segment into one, so deleted chunks' terms are in none.

        Called inside the deleting transaction: a delete whose purge fails (a full disk)
        is rolled back with it.
        """
        self.conn.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('optimize')")

    def ranking(self, collection: str, match: str, n: int) -> list[tuple[int, float]]:
        """(chunk id, BM25 score, higher better) of the ``n`` best FTS5 matches of ``match``.

        ``match`` is an FTS5 query (companion/rag/retrieval.py builds it from the words).
        """
        validate_collection_name(collection)
        if not match:
            return []
        with self.lock:
            names = self.conn.execute("SELECT name FROM collections LIMIT 2").fetchall()
            try:
                if [r[0] for r in names] == [collection]:  # the store's only collection
                    rows = self.conn.execute(
                        "SELECT rowid, bm25(chunks_fts, 1.0, 0.5) AS s FROM chunks_fts "
                        "WHERE chunks_fts MATCH ? ORDER BY s LIMIT ?",
                        (match, n),
                    ).fetchall()
                else:
                    rows = self.conn.execute(
                        "SELECT f.rowid, bm25(chunks_fts, 1.0, 0.5) AS s FROM chunks_fts f "
                        "JOIN chunks k ON k.id = f.rowid JOIN documents d "
                        "ON d.id = k.document_id JOIN collections c ON c.id = d.collection_id "
                        "WHERE chunks_fts MATCH ? AND c.name = ? ORDER BY s LIMIT ?",
                        (match, collection, n),
                    ).fetchall()
            except sqlite3.OperationalError as exc:
                if storage_problem(exc) is not None:
                    raise
                raise InvalidParameterError(f"the lexical query could not be run ({exc})") from None
        return [(int(r[0]), -float(r[1])) for r in rows]
