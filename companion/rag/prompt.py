"""How retrieved chunks enter the chat prompt, and the public prompt without them.

Two layouts (``PROMPT_LAYOUTS``):

* ``system``: the retrieved context in the leading system message, after a
  general instruction (Veil's first layout);
* ``user``: a grounded instruction in the system message (answer from the
  documents, copy names/numbers/dates as written, say so when they do not say),
  and the numbered documents inside the last user message, just before the
  question, best first;
* ``nearest``: the same with the best document last, next to the question (small
  models lean on what they read last).

bench/answers_bench.py measures them with the bundled 135M/270M models
(docs/rag/answers.md has the table).

The *public* prompt is the same conversation with an empty context, which the
``bounded`` defense needs for its second pass.  The documents are numbered
``[1]``, ``[2]`` like the citations; their names are not put in the prompt (a
guest may not be allowed to see them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer the user's question using the context "
    "documents when they are relevant."
)
# Added to SYSTEM_PROMPT for a model that reads (answer_first_for): measured on the first 60
# questions of `veil eval answers` with Qwen2.5-Coder-1.5B, 49 right with it (worded to name
# licences too) and 47 without: the upstream host on the answer's first line instead of after
# "...the following host:";
# SmolLM2-135M with it stopped copying the record it was asked about (a real-model test,
# tests/companion/test_copy_defense_smollm2.py), so small models keep the short prompt.
ANSWER_FIRST = (
    "Give the answer in the first sentence, copying names, numbers and dates exactly as the "
    "documents write them."
)
ANSWER_FIRST_PARAMETERS = 1_000_000_000  # the 1.5B has it, SmolLM2 (135 M) and the 0.5B not
GROUNDED_PROMPT = (
    "Answer the question using only the documents in the message. Give the answer in a "
    "few words, copying names, numbers and dates exactly as the documents write them. If "
    "the documents do not say, answer: The documents do not say."
)
# The private prompt of an answer whose retrieval ran and found nothing: the model is told,
# so it says so instead of inventing a source (the public prompt never carries it).
NOTHING_FOUND = (
    "No passage of the person's documents matched this question. Say so first; then answer "
    "only if you know the answer without the documents, and never cite a document."
)
# The private prompt of an answer whose question names an identifier (a number, a version,
# an e-mail address) that no passage has (companion.rag.retrieval.unmentioned): small
# models otherwise answer with the nearest passage's value (docs/answers/report.md).
UNMENTIONED = (
    "None of the documents mention {names}. If the question asks about {it}, answer only: "
    "The documents do not say."
)
PROMPT_LAYOUTS: tuple[str, ...] = ("system", "user", "nearest")
DEFAULT_LAYOUT = "system"  # measured best (docs/rag/answers.md); Settings.prompt_layout


@dataclass(frozen=True, slots=True)
class PromptPieces:
    prompt_ids: list[int]
    public_prompt_ids: list[int]
    context_text: str


@dataclass(frozen=True, slots=True)
class Kept:
    """What of one retrieved chunk entered the prompt."""

    included: Literal["whole", "partial", "cut", "dropped"]
    tokens: int  # its tokens in the prompt
    chars: int  # its characters in the prompt
    total_tokens: int  # its tokens before the budget


@dataclass(frozen=True, slots=True)
class FittedContext:
    texts: list[str]  # the chunks' text as it enters the prompt (cut ones left out)
    kept: list[Kept]  # one per retrieved chunk, in retrieval order
    budget_tokens: int

    def report(self) -> dict[str, Any]:
        """For the receipt: the budget, what it kept, and which chunks (by rank) it cut."""
        return {
            "budget_tokens": self.budget_tokens,
            "tokens": sum(k.tokens for k in self.kept),
            "retrieved_tokens": sum(k.total_tokens for k in self.kept),
            "chunks": len(self.kept),
            "whole": [i + 1 for i, k in enumerate(self.kept) if k.included == "whole"],
            "partial": [i + 1 for i, k in enumerate(self.kept) if k.included == "partial"],
            "cut": [i + 1 for i, k in enumerate(self.kept) if k.included == "cut"],
            "dropped": [i + 1 for i, k in enumerate(self.kept) if k.included == "dropped"],
        }


def near_best(scores: Sequence[float], ratio: float) -> list[bool]:
    """Which chunks score at least ``ratio`` times the best one (all of them when ``ratio``
    is 0 or the best score is not positive).

    Small models mix up documents: with a consultation note (cosine 0.5 to the
    question) and an unrelated letter (0.2) in the prompt, SmolLM2-135M answered a
    question about the note with the letter's doctor (docs/rag/answers.md).
    """
    best = max(scores, default=0.0)
    if ratio <= 0 or best <= 0:
        return [True] * len(scores)
    return [s >= ratio * best for s in scores]


def fit_context(
    tokenizer: Any,
    chunks: Sequence[str],
    budget_tokens: int,
    keep: Sequence[bool] | None = None,
) -> FittedContext:
    """Keep chunks in order (best first) while they fit in ``budget_tokens``; cut the rest.

    The chunk that crosses the budget is kept up to the budget (its first tokens),
    so the prompt never carries more than ``budget_tokens`` tokens of context.
    A chunk whose ``keep`` is False (:func:`near_best`) is left out as ``dropped``.
    """
    left = budget_tokens
    texts: list[str] = []
    kept: list[Kept] = []
    for n, chunk in enumerate(chunks):
        ids = list(tokenizer.encode(chunk.strip(), add_special_tokens=False))
        if keep is not None and not keep[n]:
            kept.append(Kept("dropped", 0, 0, len(ids)))
            continue
        if len(ids) <= left:
            texts.append(chunk)
            kept.append(Kept("whole", len(ids), len(chunk), len(ids)))
            left -= len(ids)
            continue
        if left > 0:
            text = tokenizer.decode(ids[:left], skip_special_tokens=True).rstrip("\ufffd")
            if text.strip():
                texts.append(text)
                kept.append(Kept("partial", left, len(text), len(ids)))
                left = 0
                continue
        kept.append(Kept("cut", 0, 0, len(ids)))
    return FittedContext(texts=texts, kept=kept, budget_tokens=budget_tokens)


def answer_first_for(parameters: int) -> bool:
    """Whether a model of ``parameters`` weights gets :data:`ANSWER_FIRST` (a function of the
    model only, never of the documents)."""
    return parameters >= ANSWER_FIRST_PARAMETERS


def format_context(chunks: Sequence[str], layout: str = "system") -> str:
    """The chunks (best first) as the prompt shows them: numbered in the ``user`` and
    ``nearest`` layouts; ``nearest`` lists them best last, next to the question (each
    keeps its number, the citation's)."""
    texts = [chunk.strip() for chunk in chunks if chunk.strip()]
    if layout in ("user", "nearest"):
        numbered = [f"[{i}] {text}" for i, text in enumerate(texts, start=1)]
        return "\n\n".join(reversed(numbered) if layout == "nearest" else numbered)
    return "\n\n".join(texts)


def _check_layout(layout: str) -> str:
    if layout not in PROMPT_LAYOUTS:
        raise ValueError(f"prompt layout must be one of {', '.join(PROMPT_LAYOUTS)}")
    return layout


def build_messages(
    messages: Sequence[dict[str, str]],
    context_text: str,
    system_prompt: str | None = None,
    *,
    layout: str = "system",
    grounded: bool = False,
    nothing_found: bool = False,
    unmentioned: Sequence[str] = (),
    answer_first: bool = False,
) -> list[dict[str, str]]:
    """The conversation with the context placed as ``layout`` says.

    ``grounded`` (layout ``user``): the answer is about documents, so the grounded
    instruction is used even when ``context_text`` is empty (the public prompt of
    an answer that retrieved).  ``nothing_found``: retrieval ran and found nothing
    (:data:`NOTHING_FOUND` is added; the private prompt only).  ``unmentioned``: the
    identifiers the question names that no passage of ``context_text`` has
    (:data:`UNMENTIONED` is added; the private prompt only).  ``answer_first`` (layout
    ``system``): :data:`ANSWER_FIRST` follows the general instruction, in the private and
    the public prompt alike.
    """
    user_system = [m["content"] for m in messages if m["role"] == "system"]
    if nothing_found and not context_text:
        user_system = [NOTHING_FOUND, *user_system]
    if unmentioned and context_text:
        names = ", ".join(f"\u201c{n}\u201d" for n in unmentioned)
        it = "it" if len(unmentioned) == 1 else "them"
        user_system = [UNMENTIONED.format(names=names, it=it), *user_system]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if _check_layout(layout) in ("user", "nearest") and (context_text or grounded):
        system = "\n\n".join([system_prompt or GROUNDED_PROMPT, *user_system])
        last = max((i for i, m in enumerate(rest) if m["role"] == "user"), default=None)
        if last is not None:
            question = rest[last]["content"]
            documents = f"Documents:\n{context_text}\n\n" if context_text else ""
            rest[last]["content"] = f"{documents}Question: {question}"
        return [{"role": "system", "content": system}, *rest]
    general = system_prompt or SYSTEM_PROMPT
    if answer_first:
        general = f"{general} {ANSWER_FIRST}"
    system = "\n\n".join([general, *user_system])
    if context_text:
        system += "\n\nContext:\n" + context_text
    return [{"role": "system", "content": system}, *rest]


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        list(messages), add_generation_prompt=True, tokenize=True, return_dict=True
    )
    return list(encoded["input_ids"])


def build_prompt(
    tokenizer: Any,
    messages: Sequence[dict[str, str]],
    chunks: Sequence[str],
    layout: str = "system",
    *,
    grounded: bool | None = None,
    nothing_found: bool | None = None,
    check_identifiers: bool = True,
    answer_first: bool = False,
) -> PromptPieces:
    """The prompt with the context, and the public one without it.

    ``layout`` defaults to ``system`` here so that the evaluations and benchmarks
    that call this keep their measured prompt; the chat passes the companion's
    layout (``Settings.prompt_layout``, default :data:`DEFAULT_LAYOUT`).

    ``grounded`` says whether the answer is about documents at all: the chat passes
    whether retrieval *ran* (a collection was asked), never whether it found
    anything, so the public prompt is the same whatever retrieval returned (the
    ``bounded`` defense's public pass must not depend on the documents).  Left out,
    it is whether ``chunks`` holds any text (for callers with no retrieval).
    ``nothing_found`` (default: ``grounded``) tells the model, in the private prompt
    only, when retrieval ran and found nothing (:data:`NOTHING_FOUND`).
    ``check_identifiers``: tell it, in the private prompt only, which identifiers of the
    last question no chunk has (:data:`UNMENTIONED`; a function of the question and the
    chunks, like the context itself).  ``answer_first``: as in :func:`build_messages`.
    """
    from companion.rag.spelling import unmentioned

    context = format_context(chunks, layout)
    if grounded is None:
        grounded = bool(context)
    if nothing_found is None:
        nothing_found = grounded
    question = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    absent = unmentioned(question, chunks) if check_identifiers and context else []
    return PromptPieces(
        prompt_ids=encode_chat(
            tokenizer,
            build_messages(
                messages,
                context,
                layout=layout,
                grounded=grounded,
                nothing_found=nothing_found,
                unmentioned=absent,
                answer_first=answer_first,
            ),
        ),
        public_prompt_ids=encode_chat(
            tokenizer,
            build_messages(
                messages, "", layout=layout, grounded=grounded, answer_first=answer_first
            ),
        ),
        context_text=context,
    )
