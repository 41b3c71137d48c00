"""Released DP answers kept and served again: a repeat or a paraphrase costs no budget.

A formal defense's released answer is a differentially private output; serving it
again is post-processing, *provided that the decision to serve it depends only on
public data*.  So an entry is looked up by what a guest sends and what was released
before, never by the documents:

* the key is the collection's name, the defense with its parameters, the model, and
  the conversation's messages normalised (NFKC, case, spaces, end punctuation);
* a one-question conversation also matches a cached one-question conversation whose
  question is a close paraphrase: cosine of the public embedder's vectors at least
  ``similarity``, and the same *marked words* -- words with a digit or a capital
  letter after the first word (names, codes, numbers) -- on both sides;
* nothing about the documents enters the key or the decision: not the retrieved set,
  not their hashes, not whether the collection changed.  A key that named the
  documents would make a hit or a miss -- a fresh answer -- depend on them: adding
  one relevant document would turn the repeat of a cached answer into a fresh draw,
  which tells a guest that a document was added (an unbounded privacy loss).

Whose entries: the chat route scopes them to one guest key (``principal``).  Shared
between keys, a hit -- instant, and charged nothing -- would tell one guest that another
had asked the same question; per key, a hit tells a guest only what they asked before.

The chat route (companion/api/chat.py) looks a guest's formal answer up before anything
is charged, returns a hit with its stored ``veil`` (the key's budget as it is now, and a
``cache`` note saying it was served again at no cost) and keeps a fresh answer once its
generation has finished (a cancelled one is not kept: it was not released whole).  The
owner's own answers and answers under a defense with no formal guarantee are not kept
(there is no budget to save, and they read the documents as they are now); the owner's
preview of a key looks up but never keeps (it charged nothing, so it is no release the
key paid for).

What ends an entry: its age (``ttl_seconds``, public: the clock), the owner's explicit
clear (``clear``), and deleting a document of the collection or the collection itself
(issue 24's "deleted means gone": a released answer may quote the deleted document, so
no entry of that collection is served again).  Deleting is the owner's act, and it
clears every entry of the collection whichever document went, so what a guest can learn
from it -- the next ask is a fresh answer -- is that the owner deleted something, not
what or whether it mattered to the question.  Uploading does not clear: a new document
reaches a cached question once its entry expires (clearing on upload would add nothing
the guarantee needs and would spend budget again on every upload).

Persistence: one SQLite file beside the store (``<store>.answers.sqlite3``), written
before the answer is returned, so a restart serves it again rather than spending
budget again.  Fail closed: an entry that cannot be read is not served (the question
is answered afresh, charged as any answer); an answer that cannot be stored is
still returned (it was paid for), and the next ask pays again.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from companion import db

SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    id INTEGER PRIMARY KEY,
    scope TEXT NOT NULL,
    conversation TEXT NOT NULL,
    question TEXT,
    marked TEXT,
    vector BLOB,
    answer TEXT NOT NULL,
    veil TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS answers_key ON answers(scope, conversation);
"""
DEFAULT_TTL_SECONDS = 7 * 24 * 3600.0
DEFAULT_SIMILARITY = 0.9

_MARKED = re.compile(r"\w*\d[\w\-]*|[A-Z][\w\-]*")


def normalise_text(text: str) -> str:
    line = unicodedata.normalize("NFKC", text).casefold()
    line = re.sub(r"\s+", " ", line).strip()
    return line.rstrip(" .?!")


def marked_words(question: str) -> list[str]:
    """The words a paraphrase must keep: with a digit anywhere, or a capital after the
    first word (a name, a code, a number) -- the question's subject, case-folded."""
    words = unicodedata.normalize("NFKC", question).split()
    found = {
        w.strip(".,;:?!\"'()").casefold()
        for w in words[1:]
        if _MARKED.fullmatch(w.strip(".,;:?!\"'()"))
    }
    found |= {w.strip(".,;:?!\"'()").casefold() for w in words[:1] if re.search(r"\d", w)}
    return sorted(f for f in found if f)


def conversation_key(messages: Sequence[dict[str, str]]) -> str:
    return json.dumps(
        [[m["role"], normalise_text(m["content"])] for m in messages], ensure_ascii=False
    )


def scope_key(
    collection: str, defense: dict[str, Any], model: str, principal: str | None = None
) -> str:
    """The public part of an entry's key; ``principal`` (a guest key) keeps entries apart."""
    parts: list[Any] = [collection, defense, model]
    if principal is not None:
        parts.append(principal)
    return json.dumps(parts, sort_keys=True, ensure_ascii=False)


SERVED_AGAIN_NOTE = (
    "Served again: this answer was released earlier to this key for the same question (or "
    "a close paraphrase of it). Nothing was charged, neither the key's budget nor the "
    "documents' lifetime budgets; serving a released answer again reveals nothing new."
)


def answer_scope(plan: Any, model_id: str) -> str | None:
    """The scope a guest's formal answer is kept under, or None when it is not kept.

    Everything that makes two answers draws of the same mechanism: the collection, the
    defense and its parameters, the generation settings, the model -- and the key."""
    if plan.guest is None or not plan.collection:
        return None
    if not plan.defense.defense.guarantee.formal:
        return None
    how = {
        "defense": plan.defense.to_dict(),
        "max_tokens": plan.max_tokens,
        "temperature": plan.temperature,
        "top_k": plan.top_k,
        "stop": list(plan.stop),
        "layout": plan.layout,
        "query_mode": plan.query_mode,
    }
    return scope_key(plan.collection, how, model_id, principal=f"key:{plan.guest.id}")


def kept_veil(veil: dict[str, Any], usage: dict[str, int], finish_reason: str) -> dict[str, Any]:
    """What an entry keeps of a released answer: its ``veil``, usage and finish reason."""
    return {**veil, "served": {"usage": dict(usage), "finish_reason": finish_reason}}


def served_again(
    hit: CachedAnswer, key: Any, *, preview_note: str | None = None
) -> tuple[dict[str, Any], dict[str, int], str]:
    """(veil, usage, finish reason) of a hit: the released veil with the key's budget as it
    is now (nothing was charged) and a ``cache`` note."""
    veil = {k: v for k, v in hit.veil.items() if k not in ("served", "preview", "cache")}
    served = hit.veil.get("served") or {}
    if "guest" in veil and key is not None:
        veil["guest"] = {
            "key_id": key.id,
            "collection": key.collection,
            "budget": key.budget,
            "spent": key.spent,
            "remaining": key.remaining,
        }
    veil["cache"] = {
        "served_again": True,
        "matched": hit.matched,
        "similarity": round(hit.similarity, 4),
        "released_at": hit.created,
        "note": SERVED_AGAIN_NOTE,
    }
    if preview_note is not None:
        veil["preview"] = preview_note
    usage = {k: int(v) for k, v in (served.get("usage") or {}).items()}
    usage = usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return veil, usage, str(served.get("finish_reason") or "stop")


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    answer: str
    veil: dict[str, Any]
    created: float
    matched: str  # "exact" or "paraphrase"
    similarity: float


class AnswerCache:
    """The released answers of one store, persisted beside it."""

    def __init__(
        self,
        path: Path,
        *,
        embed: Callable[[list[str]], np.ndarray] | None = None,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        similarity: float = DEFAULT_SIMILARITY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not ttl_seconds > 0:
            raise ValueError(f"ttl_seconds must be > 0; got {ttl_seconds!r}")
        if not 0.0 < similarity <= 1.0:
            raise ValueError(f"similarity must be in (0, 1]; got {similarity!r}")
        self.path = Path(path)
        self.embed = embed
        self.ttl = float(ttl_seconds)
        self.similarity = float(similarity)
        self.clock = clock
        self._lock = threading.Lock()
        self._conn = db.connect(self.path)
        db.run_script(self._conn, SCHEMA)
        db.private(self.path)

    @classmethod
    def beside(cls, store_path: Path, **kw: Any) -> AnswerCache:
        store_path = Path(store_path)
        return cls(store_path.with_name(store_path.name + ".answers.sqlite3"), **kw)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ------------------------------------------------------------------ lookup
    def _vector(self, question: str) -> np.ndarray | None:
        if self.embed is None:
            return None
        v = np.asarray(self.embed([question])[0], dtype=np.float32)
        n = float(np.linalg.norm(v))
        return v / n if n > 0 else None

    def lookup(self, scope: str, messages: Sequence[dict[str, str]]) -> CachedAnswer | None:
        """The cached answer for this conversation (exact, or a one-question paraphrase).

        A function of ``scope``, ``messages``, the earlier released answers and the clock
        only.  None on a miss, and on an entry that cannot be read (fail closed)."""
        now = self.clock()
        key = conversation_key(messages)
        with self._lock:
            self._conn.execute("DELETE FROM answers WHERE created < ?", (now - self.ttl,))
            self._conn.commit()
            row = self._conn.execute(
                "SELECT answer, veil, created FROM answers WHERE scope = ? AND conversation = ?",
                (scope, key),
            ).fetchone()
        if row is not None:
            found = _entry(row, "exact", 1.0)
            if found is not None:
                return found
        single = [m for m in messages if m["role"] != "system"]
        if len(single) != 1 or single[0]["role"] != "user":
            return None
        question = single[0]["content"]
        vector = self._vector(question)
        if vector is None:
            return None
        marked = json.dumps(marked_words(question))
        with self._lock:
            rows = self._conn.execute(
                "SELECT answer, veil, created, vector FROM answers "
                "WHERE scope = ? AND marked = ? AND vector IS NOT NULL",
                (scope, marked),
            ).fetchall()
        best: tuple[float, Any] | None = None
        for r in rows:
            try:
                other = np.frombuffer(r["vector"], dtype=np.float32)
                sim = float(np.dot(other, vector))
            except (ValueError, TypeError):
                continue  # unreadable: not served
            if math.isfinite(sim) and sim >= self.similarity and (best is None or sim > best[0]):
                best = (sim, r)
        if best is None:
            return None
        return _entry(best[1], "paraphrase", best[0])

    # ------------------------------------------------------------------- store
    def store(
        self, scope: str, messages: Sequence[dict[str, str]], answer: str, veil: dict[str, Any]
    ) -> bool:
        """Keep a released answer; False (nothing kept) if it could not be written."""
        single = [m for m in messages if m["role"] != "system"]
        question = (
            single[0]["content"] if len(single) == 1 and single[0]["role"] == "user" else None
        )
        vector = self._vector(question) if question is not None else None
        try:
            with self._lock, db.transaction(self._conn):
                self._conn.execute(
                    "INSERT OR REPLACE INTO answers "
                    "(scope, conversation, question, marked, vector, answer, veil, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        scope,
                        conversation_key(messages),
                        question,
                        json.dumps(marked_words(question)) if question is not None else None,
                        vector.tobytes() if vector is not None else None,
                        answer,
                        json.dumps(veil, ensure_ascii=False),
                        self.clock(),
                    ),
                )
        except Exception:
            return False
        return True

    def clear(self, collection: str | None = None) -> int:
        """The owner's clear: every entry, or a collection's.  The number removed."""
        with self._lock, db.transaction(self._conn):
            if collection is None:
                cur = self._conn.execute("DELETE FROM answers")
            else:
                prefix = json.dumps([collection], ensure_ascii=False)[:-1] + ","
                cur = self._conn.execute(
                    "DELETE FROM answers WHERE substr(scope, 1, ?) = ?", (len(prefix), prefix)
                )
            return int(cur.rowcount)

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0])


def _entry(row: Any, matched: str, similarity: float) -> CachedAnswer | None:
    try:
        veil = json.loads(row["veil"])
        if not isinstance(veil, dict) or not isinstance(row["answer"], str):
            return None
        return CachedAnswer(row["answer"], veil, float(row["created"]), matched, similarity)
    except (ValueError, TypeError, KeyError):
        return None  # fail closed: a damaged entry is not served
