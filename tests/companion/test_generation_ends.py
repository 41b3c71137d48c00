"""Generation that ends: the repetition penalty and the loop stop (issue 30, point 2).

Both read only the tokens already released, so they are post-processing of what the
defense output: a formal defense's receipt is the same with and without them.
"""

from __future__ import annotations

import pytest
import torch

from companion.decoding.config import DefenseConfig
from companion.decoding.generate import (
    GenerationConfig,
    generate_text,
    looping,
    penalise_repeats,
)
from companion.decoding.noise import secure_generator
from py_core.errors import InvalidParameterError


def test_the_penalty_divides_positive_and_multiplies_negative_scores_of_seen_tokens():
    scores = torch.tensor([[2.0, -2.0, 1.0, 4.0]])
    penalise_repeats(scores, [0, 1, 1], 2.0)
    assert scores.tolist() == [[1.0, -4.0, 1.0, 4.0]]  # tokens 2 and 3 untouched
    same = torch.tensor([[2.0, -2.0]])
    penalise_repeats(same, [0, 1], 1.0)
    assert same.tolist() == [[2.0, -2.0]]


def test_a_loop_is_one_block_repeated_in_a_row():
    block = [5, 6, 7, 8, 9, 10]
    assert looping([1, 2, *block, *block, *block], 3)
    assert not looping([1, 2, *block, *block], 3)  # twice is not yet a loop
    assert not looping([*block, *block, 4, *block], 3)  # not in a row
    assert not looping([7] * 15, 3)  # too short to count (16 tokens at least)
    assert looping([7] * 16, 3)
    assert not looping([*block, *block, *block], 0)  # off


def test_bad_settings_are_refused():
    base = {"prompt_ids": [1], "defense": DefenseConfig("none"), "generator": object()}
    with pytest.raises(InvalidParameterError, match="repetition_penalty"):
        GenerationConfig(**base, repetition_penalty=0.9)
    with pytest.raises(InvalidParameterError, match="repetition_window"):
        GenerationConfig(**base, repetition_window=0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from companion.audit.tiny import make_tiny_model

    folder = make_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(folder)


def _run(tiny, **kw):
    model, tok = tiny
    config = GenerationConfig(
        prompt_ids=[5, 6, 7, 8],
        defense=kw.pop("defense", DefenseConfig("none")),
        generator=secure_generator("cpu", seed=1),
        public_prompt_ids=[5, 6],
        max_new_tokens=80,
        ignore_eos=True,
        **kw,
    )
    return generate_text(model, tok, config)


def test_a_looping_answer_stops_instead_of_running_to_max_tokens(tiny):
    """A random tiny model repeats itself greedily; the loop stop ends it early."""
    plain = _run(tiny)
    assert len(plain.token_ids) == 80 and looping(plain.token_ids, 3)  # it loops
    stopped = _run(tiny, stop_loops=3)
    assert stopped.looped and stopped.finish_reason == "stop"
    assert len(stopped.token_ids) < 80
    assert stopped.token_ids == plain.token_ids[: len(stopped.token_ids)]  # same until then


def test_the_penalty_changes_the_answer_but_not_the_guarantee(tiny):
    defense = DefenseConfig.from_options("bounded", {"epsilon": 4.0})
    without = _run(tiny, defense=defense)
    penalised = _run(tiny, defense=defense, repetition_penalty=1.3)
    assert without.receipt is not None and penalised.receipt is not None
    assert penalised.receipt.epsilon == without.receipt.epsilon  # calibrated before, same
    greedy = _run(tiny)
    greedy_penalised = _run(tiny, repetition_penalty=50.0)
    assert greedy.token_ids != greedy_penalised.token_ids  # it does act
