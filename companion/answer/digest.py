"""A guest's formal answer read from the collection's DP digest, when the digest speaks to it.

The digest (:mod:`companion.rag.digest`) was released once, under every contributing
document's budget.  A guest question whose subject words -- its names, codes and
numbers (:func:`subject_words`) -- all appear in a released statement is answered from the statements that have them: the public model reads them
as its passages, without noise and without reading any document.  Which statements are
read, and whether the digest answers at all, depend on the question and the digest only
(both public to the guest), so the answer is post-processing of the digest's release:
it charges no document and not the guest key.  A question the digest does not speak
to (no marked word, or one no statement has) goes on to the key's defense as before.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from typing import TYPE_CHECKING, Any

from companion.answer.context import AnswerContext, chunks_context
from companion.decoding.defenses.dp_answer import _WORD, last_question  # the same words
from companion.rag.digest import ADD_REMOVE_COLLECTION_DOCUMENT, Digest, Statement, load_digest
from py_core.errors import InvalidParameterError

if TYPE_CHECKING:
    from companion.answer.plan import AnswerPlan
    from companion.rag.service import RagService
    from companion.settings import Settings

MAX_STATEMENTS = 4  # statements one answer reads
# The prompt layout a digest answer is read with: the grounded instruction (answer from the
# passages, copy names and codes as written) and the statements, numbered, before the
# question.  Statements are single sentences with the answer in them; read in the chat's
# default ``system`` layout SmolLM2-135M answered 40 of the lifetime run's 60 distinct
# digest questions right, in this one 50 (docs/methods/dprag.md, "The collection's digest").
DIGEST_LAYOUT = "user"

DIGEST_NOTE = (
    "Answered from the collection's digest: statements that many of its documents share, "
    "released once with differential privacy. Reading them costs no budget, neither the "
    "documents' nor your key's. The digest holds only what many documents write the same "
    "way; a question about what a few documents say goes to your key's defense instead."
)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


_SENTENCE = re.compile(r"(?<=[.!?:;])\s+")


def subject_words(question: str) -> set[str]:
    """What the question names, case-folded: a word with a digit, or with a capital inside
    a sentence -- a name, a code -- and, at a sentence's start, only a coined word (no
    entry in the English or French tables: "Lovuritis" yes, "Reply" or "For" no); the
    pronoun "I" never."""
    from companion.rag.spelling import _coined

    found: set[str] = set()
    for sentence in _SENTENCE.split(unicodedata.normalize("NFKC", question).strip()):
        for i, raw in enumerate(sentence.split()):
            word = raw.strip(".,;:?!\"'()[]")
            if not word or word == "I":
                continue
            folded = word.casefold()
            named = word[0].isupper() and (i > 0 or _coined(folded))
            if named or any(c.isdigit() for c in word):
                found.add(folded)
    return found


def relevant(digest: Digest, question: str) -> list[Statement]:
    """The statements that have every word the question names (:func:`subject_words`),
    most documents first; none when it names no word."""
    marked = subject_words(question)
    if not marked:
        return []
    found = [s for s in digest.statements if marked <= _words(s.text)]
    return found[:MAX_STATEMENTS]


def _build_for_guests(rag: RagService, collection: str, settings: Settings) -> Digest | None:
    """The digest a guest's first dp_answer question builds (the setting's epsilon); None
    when the setting is 0, when the collection had a digest before, or when it costs more
    than a whole budget."""
    from companion.decoding.noise import secure_generator
    from companion.rag.budget import DocumentBudget
    from companion.rag.digest import DigestConfig, build_digest

    if settings.guest_digest_epsilon <= 0:
        return None
    config = DigestConfig(epsilon=settings.guest_digest_epsilon)
    budget = DocumentBudget.for_settings(rag.store, settings)
    try:
        return build_digest(
            budget, collection, config, secure_generator(), label="guests' digest", once=True
        )
    except InvalidParameterError:  # costs more than a whole budget: not built
        return None


def receipt(digest: Digest) -> dict[str, Any]:
    """The answer's receipt, in the fields of :class:`companion.decoding.receipt.Receipt`:
    the digest's guarantee (paid when it was released), and nothing charged now."""
    from companion.decoding.base import MEANINGFUL_EPSILON

    config = digest.config
    epsilon, delta = config.epsilon, config.delta + config.threshold_delta
    return {
        "mechanism": "digest",
        "label": "Collection digest",
        "params": config.to_dict(),
        "formal": True,
        "relation": ADD_REMOVE_COLLECTION_DOCUMENT,
        "epsilon": epsilon,
        "epsilon_text": f"{epsilon:.4g}",
        "delta": delta,
        "epsilon_spent": 0.0,
        "epsilon_spent_text": "0",
        "nominal_epsilon": None,
        "nominal_epsilon_text": None,
        "noise_added": False,
        "gamma": 0.0,
        "protected_tokens": 0,
        "sensitivity": 1.0,
        "best_order": None,
        "meaningful": epsilon <= MEANINGFUL_EPSILON,
        "headline": (
            f"Read from the collection's digest (epsilon {epsilon:g} per document, paid once "
            "when it was released): this answer cost no budget."
        ),
        "statement": (
            f"The digest is ({epsilon:g}, {delta:.2g})-differentially private for "
            f"{ADD_REMOVE_COLLECTION_DOCUMENT}; this answer reads only the digest and the "
            "question, so it adds no privacy loss."
        ),
        "screened": {},
        "released": digest.created,
        "notes": [DIGEST_NOTE],
    }


def from_digest(
    rag: RagService, plan: AnswerPlan, settings: Settings | None = None
) -> tuple[AnswerPlan, AnswerContext] | None:
    """The plan and context of an answer read from the digest; None when it does not
    apply (the owner, no formal defense, no digest, or no statement with the question's
    subject words).  A ``dp_answer`` key's question (the lifetime mode) over a collection
    that never had a digest builds one first, at ``settings.guest_digest_epsilon`` (not
    for the owner's preview: it charges nothing).  Whether it is built depends on the key's
    defense and whether the collection had one -- never on the documents or their number,
    which a guest would then see in whether the digest answers."""
    if not plan.is_guest or not plan.collection:
        return None
    if not plan.defense.defense.guarantee.formal:
        return None
    digest = load_digest(rag.store, plan.collection)
    lifetime_mode = plan.defense.name == "dp_answer"
    if digest is None and lifetime_mode and settings is not None and not plan.preview:
        digest = _build_for_guests(rag, plan.collection, settings)
    if digest is None:
        return None
    found = relevant(digest, last_question(plan.messages))
    if not found:
        return None
    context = chunks_context([s.text for s in found])
    context.budget = {
        "digest": True,
        "charged": 0,
        "note": DIGEST_NOTE,
    }
    return reading(plan, receipt(digest)), context


def reading(plan: AnswerPlan, digest_receipt: dict[str, Any] | None = None) -> AnswerPlan:
    """The plan that reads the digest's statements: the public model without noise (the
    statements are already DP), in :data:`DIGEST_LAYOUT`."""
    from companion.decoding.config import DefenseConfig

    return dataclasses.replace(
        plan,
        defense=DefenseConfig.from_options("none"),
        pad_context_to=None,
        layout=DIGEST_LAYOUT,
        digest=digest_receipt,
    )
