"""The retrieval query of a question inside a conversation.

A follow-up ("and what dose?") names little of what it is about, so searching
with it alone finds the wrong chunks.  The modes (``Settings.followup_query``,
or ``retrieval_query`` per request):

* ``last``: the last user message alone (what a single question uses);
* ``user_turns``: the last user message after the previous ``FOLLOWUP_TURNS``
  user messages, concatenated (no model call);
* ``turns``: the same plus the assistant's answer to the previous question.

The default was chosen by ``bench/followup_bench.py`` (docs/rag/answers.md has
the table).  The query is used only to retrieve; the model still sees the
messages as they were sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

QueryMode = Literal["last", "user_turns", "turns"]
QUERY_MODES: tuple[str, ...] = get_args(QueryMode)
FOLLOWUP_TURNS = 2  # earlier user messages joined to the question
MAX_QUERY_CHARS = 2000  # the embedder reads 256 word pieces; the rest would be cut anyway


def retrieval_query(messages: Sequence[dict[str, str]], mode: str = "user_turns") -> str:
    """The text to retrieve with for the last user message of ``messages`` (role/content)."""
    if mode not in QUERY_MODES:
        raise ValueError(f"retrieval query mode must be one of {', '.join(QUERY_MODES)}")
    turns = [m for m in messages if m["role"] in ("user", "assistant")]
    last = max(i for i, m in enumerate(turns) if m["role"] == "user")
    question = turns[last]["content"].strip()
    if mode == "last" or last == 0:
        return question
    earlier = [m["content"].strip() for m in turns[:last] if m["role"] == "user"]
    parts = earlier[-FOLLOWUP_TURNS:]
    if mode == "turns":
        answers = [m["content"].strip() for m in turns[:last] if m["role"] == "assistant"]
        if answers:
            parts.append(answers[-1])
    # The question last and whole: if the query is too long, the oldest text goes first.
    context = " ".join(p for p in parts if p)
    room = MAX_QUERY_CHARS - len(question) - 1
    if room <= 0:
        return question
    return (context[-room:] + " " + question).strip()
