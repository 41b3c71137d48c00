"""The retrieval query of a question inside a conversation.

A follow-up ("and what dose?") names little of what it is about, so searching
with it alone finds the wrong chunks; a new question ("What is the capital of
France?") names its own subject, and joining the earlier questions to it would
pull their passages in.  So earlier turns are joined only when the last question
refers back (:func:`refers_back`, decided from the last question alone):

* it points back: a pronoun (it, they, she, his, this, those ...), or a
  determiner that needs an antecedent (the same, the other, the next ...);
* it continues: it starts with "and", "or", "but", "also", "what about" ...
  ("and the deposit?", "what about the cat?");
* it is elliptical: no content word of its own ("Why?", "How much?"), or a short
  definite description with no name, number or address of its own and no "of" that
  says whose ("When is the review?", "What was the blood result?").

The modes (``Settings.followup_query``, or ``retrieval_query`` per request):

* ``last``: the last user message alone (what a single question uses);
* ``user_turns``: the last user message after the earlier user messages it refers
  back to (back to the last one that stands on its own, at most ``FOLLOWUP_TURNS``);
* ``turns``: the same plus the assistant's answer to the previous question.

The default was chosen by ``bench/followup_bench.py`` (docs/rag/answers.md has
the table).  The query is used only to retrieve; the model still sees the
messages as they were sent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, get_args

QueryMode = Literal["last", "user_turns", "turns"]
QUERY_MODES: tuple[str, ...] = get_args(QueryMode)
FOLLOWUP_TURNS = 3  # earlier user messages joined to the question, at most
MAX_QUERY_CHARS = 2000  # the embedder reads 256 word pieces; the rest would be cut anyway
MAX_DEFINITE_WORDS = 2  # "the blood result": a definite description this short is elliptical

# Words that point back to something said before (English).
_POINTING = """it its itself they them their theirs themselves he him his himself she her hers
    herself this these those such same other another former latter aforementioned
    previous next above"""
POINTING = frozenset(_POINTING.split())
# How a continuation starts ("and the deposit?", "what about the cat?").
CONTINUING = re.compile(
    r"^(?:and|or|but|also|so|plus|then|too|what about|how about|what else|anything else)\b",
    re.IGNORECASE,
)
# Words that carry no subject of their own: function words, question words, light verbs.
_FUNCTION = """a about above after again all am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each few for from
    further had has have having here how i if in into is just me more most my myself no nor
    not now of off on once only or our ours out over own same should so some than that the
    then there to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves us please tell say said give show
    find know get got much many long often exactly else ok okay well yes thanks thank let
    lets like one ones s t d ll re ve m"""
FUNCTION = frozenset(_FUNCTION.split())
_EXISTENTIAL = frozenset({"is", "are", "was", "were", "be", "been", "being", "will", "would"})
_WORD = re.compile(r"[\w'@.+-]+")
_TOKEN = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    return [w.strip(".'-+") for w in _WORD.findall(text) if w.strip(".'-+")]


def _names_something(words: list[str]) -> bool:
    """A name (a capitalised word past the first), a number of 3+ digits or an address."""
    for i, w in enumerate(words):
        if "@" in w or sum(c.isdigit() for c in w) >= 3:
            return True
        if i > 0 and w[:1].isupper() and w != "I" and w.lower() not in POINTING:
            return True
    return False


def refers_back(question: str) -> bool:
    """Whether ``question`` needs the conversation before it to say what it is about."""
    text = question.strip()
    if not text:
        return False
    if CONTINUING.match(text):
        return True
    words = _words(text)
    lower = [t.lower() for w in words for t in _TOKEN.findall(w)]
    if any(t in POINTING for t in lower):
        return True
    if lower and lower[-1] == "that":  # "what about that?", "why is that"
        return True
    for i, t in enumerate(lower):  # "allowed there", not "is there a deposit?"
        if t == "there" and i > 0 and lower[i - 1] not in _EXISTENTIAL:
            return True
    if _names_something(words):
        return False
    content = [t for t in lower if t not in FUNCTION and not t.isdigit()]
    if not content:  # "Why?", "How much?"
        return True
    # "When is the review?": a thing named as known, nothing else said about it ("the
    # capital of france", "the rent of the flat" say of what: they stand on their own)
    return "the" in lower and "of" not in lower and len(content) <= MAX_DEFINITE_WORDS


def retrieval_query(
    messages: Sequence[dict[str, str]], mode: str = "user_turns", *, always: bool = False
) -> str:
    """The text to retrieve with for the last user message of ``messages`` (role/content).

    ``always``: join the earlier user messages whether or not the question refers back
    (what ``user_turns`` did before; the bench compares both).
    """
    if mode not in QUERY_MODES:
        raise ValueError(f"retrieval query mode must be one of {', '.join(QUERY_MODES)}")
    turns = [m for m in messages if m["role"] in ("user", "assistant")]
    last = max(i for i, m in enumerate(turns) if m["role"] == "user")
    question = turns[last]["content"].strip()
    if mode == "last" or last == 0:
        return question
    if not always and not refers_back(question):
        return question
    earlier = [m["content"].strip() for m in turns[:last] if m["role"] == "user"]
    parts: list[str] = []
    for text in reversed(earlier[-FOLLOWUP_TURNS:] if not always else earlier[-2:]):
        parts.insert(0, text)
        if not always and not refers_back(text):
            break  # the question the chain of follow-ups started from
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
