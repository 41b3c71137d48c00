"""Follow-ups join the earlier questions only when they refer back to them."""

from __future__ import annotations

import pytest

from companion.conversations.query import refers_back, retrieval_query


def _chat(*questions: str) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    for q in questions:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": "ok."}]
    return messages[:-1]


@pytest.mark.parametrize(
    "question",
    [
        "and when does it end?",
        "And the deposit?",
        "What about the cat?",
        "How often should she use it?",
        "What did they decide?",
        "Is this one cheaper?",
        "Are pets allowed there?",
        "Why?",
        "How much?",
        "When is the review?",
        "What was the blood result?",
        "When is the next appointment?",
        "Who signed the other one?",
        "why is that",
    ],
)
def test_questions_that_refer_back(question):
    assert refers_back(question)


@pytest.mark.parametrize(
    "question",
    [
        "What is the capital of France?",
        "what is the capital of france?",
        "What is the rent of the flat?",
        "How do I bake sourdough bread?",
        "Who wrote Hamlet?",
        "What is the boiling point of water?",
        "How many moons does Jupiter have?",
        "Is there a deposit?",
        "Which inhaler does Camille Moreau use?",
        "Who writes from anna.berg@example.org?",
        "What is the dose for record 4471203?",
        "Which planet is closest to the sun in our solar system?",
        "",
    ],
)
def test_questions_that_stand_on_their_own(question):
    assert not refers_back(question)


def test_an_unrelated_question_is_retrieved_alone():
    messages = _chat("What is the rent of the flat?", "What is the capital of France?")
    for mode in ("user_turns", "turns"):
        assert retrieval_query(messages, mode) == "What is the capital of France?"
    # as before this change, on request
    assert retrieval_query(messages, "user_turns", always=True) == (
        "What is the rent of the flat? What is the capital of France?"
    )


def test_a_follow_up_joins_the_question_it_continues():
    messages = _chat("What is the rent of the flat?", "and when does it end?")
    assert retrieval_query(messages, "user_turns") == (
        "What is the rent of the flat? and when does it end?"
    )
    assert retrieval_query(messages, "turns") == (
        "What is the rent of the flat? ok. and when does it end?"
    )
    assert retrieval_query(messages, "last") == "and when does it end?"


def test_a_chain_of_follow_ups_goes_back_to_where_it_started_and_no_further():
    messages = _chat(
        "Who wrote Hamlet?",
        "What is the rent of the flat?",
        "and when does it end?",
        "And the deposit?",
    )
    assert retrieval_query(messages, "user_turns") == (
        "What is the rent of the flat? and when does it end? And the deposit?"
    )
    # after a new question, a follow-up joins that one, not the topic before it
    messages = _chat("What is the rent of the flat?", "Who wrote Hamlet?", "When was it written?")
    assert retrieval_query(messages, "user_turns") == "Who wrote Hamlet? When was it written?"
