"""How retrieved chunks enter the chat prompt, and the public prompt without them.

The retrieved context goes into a system message placed before the
conversation; the *public* prompt is the same conversation with an empty
context, which the ``bounded`` defense needs for its second pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer the user's question using the context "
    "documents when they are relevant."
)


@dataclass(frozen=True, slots=True)
class PromptPieces:
    prompt_ids: list[int]
    public_prompt_ids: list[int]
    context_text: str


@dataclass(frozen=True, slots=True)
class Kept:
    """What of one retrieved chunk entered the prompt."""

    included: Literal["whole", "partial", "cut"]
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
        }


def fit_context(tokenizer: Any, chunks: Sequence[str], budget_tokens: int) -> FittedContext:
    """Keep chunks in order (best first) while they fit in ``budget_tokens``; cut the rest.

    The chunk that crosses the budget is kept up to the budget (its first tokens),
    so the prompt never carries more than ``budget_tokens`` tokens of context.
    """
    left = budget_tokens
    texts: list[str] = []
    kept: list[Kept] = []
    for chunk in chunks:
        ids = list(tokenizer.encode(chunk.strip(), add_special_tokens=False))
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


def format_context(chunks: Sequence[str]) -> str:
    return "\n\n".join(chunk.strip() for chunk in chunks if chunk.strip())


def build_messages(
    messages: Sequence[dict[str, str]], context_text: str, system_prompt: str = SYSTEM_PROMPT
) -> list[dict[str, str]]:
    """The conversation with the context in a leading system message."""
    user_system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [m for m in messages if m["role"] != "system"]
    system = "\n\n".join([system_prompt, *user_system])
    if context_text:
        system += "\n\nContext:\n" + context_text
    return [{"role": "system", "content": system}, *rest]


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        list(messages), add_generation_prompt=True, tokenize=True, return_dict=True
    )
    return list(encoded["input_ids"])


def build_prompt(
    tokenizer: Any, messages: Sequence[dict[str, str]], chunks: Sequence[str]
) -> PromptPieces:
    context = format_context(chunks)
    return PromptPieces(
        prompt_ids=encode_chat(tokenizer, build_messages(messages, context)),
        public_prompt_ids=encode_chat(tokenizer, build_messages(messages, "")),
        context_text=context,
    )
