"""A model that reads (>= 1 B weights) is asked for the answer in its first sentence; a small
one keeps the short prompt (companion.rag.prompt.ANSWER_FIRST).  The instruction is a
function of the model only: it is in the private and the public prompt alike, and a padded
prefill counts it."""

from __future__ import annotations

import pytest

from companion.answer import AnswerContext, AnswerPlan, chunks_context, generation_config
from companion.rag.prompt import ANSWER_FIRST, SYSTEM_PROMPT, build_messages
from tests.companion.fakes import WordTokenizer

EXTRA = len(ANSWER_FIRST.split())


def _lm(parameters: int | None):
    fields = {"tokenizer": WordTokenizer(), "device": "cpu", "stops": ()}
    if parameters is not None:
        fields["parameter_count"] = lambda self: parameters
    return type("LM", (), fields)()


def test_the_system_layout_adds_the_instruction_after_the_general_one():
    messages = [{"role": "user", "content": "which version?"}]
    plain = build_messages(messages, "passage")[0]["content"]
    first = build_messages(messages, "passage", answer_first=True)[0]["content"]
    assert plain.startswith(SYSTEM_PROMPT) and ANSWER_FIRST not in plain
    assert first.startswith(f"{SYSTEM_PROMPT} {ANSWER_FIRST}") and first.endswith("passage")
    # the grounded layouts have their own instruction, unchanged
    grounded = build_messages(messages, "passage", layout="user", answer_first=True)
    assert ANSWER_FIRST not in grounded[0]["content"]


@pytest.mark.parametrize(
    ("parameters", "added"),
    [(1_777_000_000, True), (630_000_000, False), (135_000_000, False), (None, False)],
)
def test_only_a_model_of_a_billion_weights_gets_it_in_both_prompts(parameters, added):
    plan = AnswerPlan.for_question("which version?", "bounded", 8, collection="c")
    base = generation_config(plan, chunks_context(["version 1.2-3"]), _lm(None))
    got = generation_config(plan, chunks_context(["version 1.2-3"]), _lm(parameters))
    nothing = generation_config(plan, AnswerContext(retrieved=True), _lm(parameters))
    extra = EXTRA if added else 0
    assert len(got.prompt_ids) == len(base.prompt_ids) + extra
    assert len(got.public_prompt_ids) == len(base.public_prompt_ids) + extra
    assert list(got.public_prompt_ids) == list(nothing.public_prompt_ids)  # no document in it


def test_a_padded_prefill_counts_the_instruction():
    budget = 40
    plan = AnswerPlan.for_question(
        "which version?", "bounded", 8, collection="c", pad_context_to=budget, top_k=2
    )
    full = chunks_context([" ".join(["word"] * (budget // 2))] * 2)
    for parameters in (1_777_000_000, 135_000_000):
        config = generation_config(plan, full, _lm(parameters))
        assert config.pad_prefill_to is not None
        assert config.pad_prefill_to >= len(config.prompt_ids)
    big = generation_config(plan, full, _lm(1_777_000_000)).pad_prefill_to
    small = generation_config(plan, full, _lm(135_000_000)).pad_prefill_to
    assert big == small + EXTRA
