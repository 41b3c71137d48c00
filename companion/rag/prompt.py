"""How retrieved chunks enter the chat prompt, and the public prompt without them.

The retrieved context goes into a system message placed before the
conversation; the *public* prompt is the same conversation with an empty
context, which the ``bounded`` defense needs for its second pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer the user's question using the context "
    "documents when they are relevant."
)


@dataclass(frozen=True, slots=True)
class PromptPieces:
    prompt_ids: list[int]
    public_prompt_ids: list[int]
    context_text: str


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
