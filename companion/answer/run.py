"""From a plan and its context to a generation: the one place an answer's prompt is built.

:func:`generation_config` builds the prompt (private and public), dp_vote's group
inputs and the generation settings; :func:`start` returns the
:class:`~companion.decoding.generate.Generation` the engine's worker thread
iterates; :func:`answer_now` runs it to the end (evaluations, benchmarks, MCP).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companion.answer.context import AnswerContext
    from companion.answer.plan import AnswerPlan
    from companion.decoding.generate import Generation, GenerationConfig, GenerationResult


def generation_config(
    plan: AnswerPlan, context: AnswerContext, lm: Any, **overrides: Any
) -> GenerationConfig:
    """The generation of ``plan`` over ``context`` with the loaded model ``lm``.

    ``overrides`` replace fields of the config (an evaluation's ``build`` or
    ``ignore_eos``; a benchmark's generator).
    """
    from companion.decoding.generate import GenerationConfig
    from companion.decoding.noise import secure_generator
    from companion.rag.prompt import build_prompt

    tokenizer = lm.tokenizer
    first = _answer_first(lm)
    pieces = build_prompt(
        tokenizer,
        plan.messages,
        context.texts,
        plan.layout,
        grounded=context.retrieved,
        answer_first=first,
    )
    fields: dict[str, Any] = {
        "prompt_ids": pieces.prompt_ids,
        "public_prompt_ids": pieces.public_prompt_ids,
        "context_text": pieces.context_text,
    }
    if not plan.defense.defense.private_pass:  # dp_vote: one prompt per document group
        from companion.answer.context import group_inputs

        own = group_inputs(tokenizer, plan, context)
        fields = {
            "prompt_ids": own["public_prompt_ids"],
            "public_prompt_ids": own["public_prompt_ids"],
            "context_text": pieces.context_text,
            "documents": own["documents"],
            "prompt_for": own["prompt_for"],
            "question": next(
                (m["content"] for m in reversed(plan.messages) if m["role"] == "user"), ""
            ),
        }
    if plan.pad_context_to is not None:
        fields["pad_prefill_to"] = _padded_length(plan, tokenizer, plan.pad_context_to, first)
    fields.update(
        defense=plan.defense,
        generator=secure_generator(lm.device, plan.seed),
        max_new_tokens=plan.max_tokens,
        temperature=plan.temperature,
        stop=[*plan.stop, *getattr(lm, "stops", ())],
        prefill_chunk=plan.prefill_chunk,
        repetition_penalty=plan.repetition_penalty,
        stop_loops=plan.stop_loops,
    )
    fields.update(overrides)
    return GenerationConfig(**fields)


def _answer_first(lm: Any) -> bool:
    """Whether ``lm`` reads well enough for ANSWER_FIRST (companion.rag.prompt)."""
    from companion.rag.prompt import answer_first_for

    count = getattr(lm, "parameter_count", None)
    return count is not None and answer_first_for(count())


def _padded_length(plan: AnswerPlan, tokenizer: Any, budget: int, answer_first: bool) -> int:
    """The longest private prompt this plan can have: its context at ``budget`` tokens.

    A function of the conversation and the settings only (public): the prompt with a
    one-word context, less that word, plus the budget and the separators and numbers of
    up to ``top_k`` chunks.
    """
    from companion.rag.prompt import build_prompt

    word = "context"
    with_word = build_prompt(
        tokenizer, plan.messages, [word], plan.layout, grounded=True, answer_first=answer_first
    )
    word_tokens = len(tokenizer.encode(word, add_special_tokens=False))
    return len(with_word.prompt_ids) - word_tokens + budget + 8 * plan.top_k


def start(
    plan: AnswerPlan,
    context: AnswerContext,
    lm: Any,
    cancel: threading.Event | None = None,
    **overrides: Any,
) -> Generation:
    """The answer's generation, ready to iterate (text deltas; then ``.result``)."""
    from companion.decoding.generate import Generation

    config = generation_config(plan, context, lm, **overrides)
    if getattr(lm, "backend", None) == "vllm":
        from companion.vllm.engine import VllmGeneration

        return VllmGeneration(  # type: ignore[return-value]  # the same iterator and .result
            lm.model, lm.tokenizer, config, cancel, principal=principal(plan)
        )
    return Generation(lm.model, lm.tokenizer, config, cancel)


def principal(plan: AnswerPlan) -> str:
    """Whose answer this is, for what an engine keeps between answers (vLLM's prefix
    cache is salted per principal): the owner, a guest key, or the owner's preview of one."""
    if plan.guest is None:
        return "owner"
    kind = "preview" if plan.preview else "guest"
    return f"{kind}:{plan.guest.id}"


def answer_now(
    plan: AnswerPlan, context: AnswerContext, lm: Any, **overrides: Any
) -> GenerationResult:
    """Generate the whole answer and return its result."""
    run = start(plan, context, lm, **overrides)
    for _ in run:
        pass
    return run.result
