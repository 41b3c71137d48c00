"""What a question names that has one spelling: found in the passages, or in file names.

:func:`unmentioned` says which of the question's identifiers, package names and other
coined words no passage has (the prompt then tells the model, companion/rag/prompt.py);
:func:`named_documents` finds the documents whose *name* has one (retrieval ranks their
chunks first, companion/rag/retrieval.py).  Both compare token by token, as FTS5 does,
with retrieval's word parsing (:func:`companion.rag.retrieval.identifiers`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from companion.rag.retrieval import _TOKEN, _WORD, _fold, identifiers

if TYPE_CHECKING:
    from companion.rag.store import DocumentStore

_LETTERS_DIGITS = re.compile(r"^([^\W\d_]{3,})(\d+)$")  # "libgles1", "python3"


def _coined(token: str) -> bool:
    """A coined word: one with a letter and no entry in the English or French tables
    (``libtirpc``, ``dbus``, ``libgles1``) -- a name with one spelling, unlike "well"
    and "known" or "peut" and "être"."""
    from py_core.wordfreq import zipf_frequency

    return (
        len(token) >= 3
        and any(c.isalpha() for c in token)
        and zipf_frequency(token, "en") is None
        and zipf_frequency(token, "fr") is None
    )


def _spellings(tokens: list[str]) -> list[str]:
    """A name's token phrase, and the same with its letters and trailing digits apart
    ("python3" is also "python 3")."""
    split = [" ".join(m.groups()) if (m := _LETTERS_DIGITS.match(t)) else t for t in tokens]
    return list(dict.fromkeys([" ".join(tokens), " ".join(split)]))


def one_spelling_terms(question: str) -> list[tuple[str, list[str]]]:
    """What the question names that has one spelling, as written with its token phrases:
    the strict identifiers (:func:`identifiers`), compounds with a coined part, and coined
    words ending in digits (:func:`unmentioned` says which)."""
    found = list(identifiers(question, strict=True))
    for m in _WORD.finditer(question):
        word = m.group().strip(".-_/\\|~=+&#%$?!,;:").lower()
        tokens = _TOKEN.findall(_fold(word))
        compound = len(tokens) > 1 and any(_coined(t) for t in tokens)
        single = len(tokens) == 1 and bool(_LETTERS_DIGITS.match(tokens[0]))
        if (compound or (single and _coined(tokens[0]))) and sum(map(str.isdigit, word)) < 3:
            found.append((m.group().strip(".,;:!?\"'()"), _spellings(tokens)))
    return found


MAX_NAMED_DOCUMENTS = 5  # a word in more documents' names does not say which one is meant


def name_tokens(name: str) -> str:
    """A document's name as FTS5-like tokens, padded: "libmagic1.copyright.txt" is
    " libmagic1 copyright txt " ("_" apart too: "perl_1.20-3" is "perl 1 20 3")."""
    return " " + " ".join(_TOKEN.findall(_fold(name.replace("_", " ")).lower())) + " "


def named_documents(store: DocumentStore, collection: str, question: str) -> list[int]:
    """The documents whose *name* has what the question names with one spelling
    (:func:`one_spelling_terms`, or a coined word of four letters or more), when at most
    ``MAX_NAMED_DOCUMENTS`` names have it: "the copyright of libmagic1" is the file
    ``libmagic1.copyright.txt`` even where its text says only "file"."""
    terms = [p for _w, phrases in one_spelling_terms(question) for p in phrases]
    for m in _WORD.finditer(question):
        tokens = _TOKEN.findall(_fold(m.group().strip(".,;:!?\"'()")).lower())
        if len(tokens) == 1 and len(tokens[0]) >= 4 and _coined(tokens[0]):
            terms.append(tokens[0])
    if not terms or not hasattr(store, "document_names"):
        return []
    names = [(doc_id, name_tokens(name)) for doc_id, name in store.document_names(collection)]
    out: list[int] = []
    for phrase in dict.fromkeys(_fold(t).lower() for t in terms):
        having = [doc_id for doc_id, words in names if f" {phrase} " in words]
        if 0 < len(having) <= MAX_NAMED_DOCUMENTS:
            out += [d for d in having if d not in out]
    return out


def unmentioned(question: str, passages: Sequence[str]) -> list[str]:
    """The identifiers the question names that none of ``passages`` has, as the question
    writes them: an e-mail address, a word with at least three digits (a bug or record
    number, a version, a phone number in any grouping), a compound with a coined part
    (a package or product name: "libtirpc-common", "libz3-4"), or a coined word ending in
    digits ("libgles1").

    Compared as FTS5 compares them, token by token, case and accents folded: "#209157"
    is in "Closes: #209157", "1.2.0-9" is not in "1.2.0-90".  What a passage writes in
    other words (a name, a paraphrase) is not looked for: only what has one spelling.
    """
    found = one_spelling_terms(question)
    if not found:
        return []
    words = " " + " ".join(" ".join(_TOKEN.findall(_fold(p).lower())) for p in passages) + " "
    return list(
        dict.fromkeys(
            written
            for written, phrases in found
            if not any(f" {_fold(p).lower()} " in words for p in phrases)
        )
    )
