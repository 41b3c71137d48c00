"""The prompt layouts (companion.rag.prompt) and the template of a model without one."""

from __future__ import annotations

import pytest

from companion.models import BASE_STOPS, BASE_TEMPLATE, ensure_chat_template
from companion.rag.prompt import (
    GROUNDED_PROMPT,
    SYSTEM_PROMPT,
    UNMENTIONED,
    build_messages,
    build_prompt,
    format_context,
)
from tests.companion.fakes import WordTokenizer

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What helps gout?"},
    {"role": "assistant", "content": "Allopurinol."},
    {"role": "user", "content": "And the dose?"},
]


class TextTokenizer(WordTokenizer):
    """WordTokenizer whose ids decode back to the words (to read what a prompt says)."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.ids: dict[str, int] = {}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        for word in text.split():
            self.ids.setdefault(word, len(self.words))
            if len(self.words) < len(self.ids):
                self.words.append(word)
        return [self.ids[w] for w in text.split()]

    def decode(self, ids, **kwargs) -> str:
        return " ".join(self.words[i] for i in ids)


def test_the_system_layout_is_the_first_one():
    context = format_context(["allopurinol 100 mg", "  ", "gout flares"])
    assert context == "allopurinol 100 mg\n\ngout flares"
    messages = build_messages(CONVERSATION, context)
    assert messages[0] == {
        "role": "system",
        "content": f"{SYSTEM_PROMPT}\n\nBe brief.\n\nContext:\n{context}",
    }
    assert messages[1:] == CONVERSATION[1:]


def test_the_user_layout_puts_numbered_documents_before_the_last_question():
    context = format_context(["allopurinol 100 mg", "gout flares"], "user")
    assert context == "[1] allopurinol 100 mg\n\n[2] gout flares"
    messages = build_messages(CONVERSATION, context, layout="user")
    assert messages[0]["content"] == f"{GROUNDED_PROMPT}\n\nBe brief."
    assert messages[1] == CONVERSATION[1] and messages[2] == CONVERSATION[2]  # history as sent
    assert messages[3]["content"] == f"Documents:\n{context}\n\nQuestion: And the dose?"
    assert CONVERSATION[3]["content"] == "And the dose?"  # the caller's list is not changed
    # The public prompt of an answer that retrieved: the same instruction, no documents.
    public = build_messages(CONVERSATION, "", layout="user", grounded=True)
    assert public[0] == messages[0] and public[3]["content"] == "Question: And the dose?"
    # No retrieval at all: the plain assistant prompt.
    assert build_messages(CONVERSATION, "", layout="user")[0]["content"].startswith(SYSTEM_PROMPT)
    with pytest.raises(ValueError, match="prompt layout"):
        build_messages(CONVERSATION, "", layout="sideways")


def test_build_prompt_keeps_the_context_out_of_the_public_prompt():
    tokenizer = WordTokenizer()
    pieces = build_prompt(tokenizer, CONVERSATION, ["allopurinol 100 mg"], "user")
    assert pieces.context_text == "[1] allopurinol 100 mg"
    assert len(pieces.public_prompt_ids) == len(pieces.prompt_ids) - 5  # "Documents:" + 4 words


def test_an_identifier_no_passage_has_is_named_in_the_private_prompt_only():
    tokenizer = TextTokenizer()
    asked = [{"role": "user", "content": "Who uploaded foo version 1.2.0-9?"}]
    line = UNMENTIONED.format(names="\u201c1.2.0-9\u201d", it="it")
    for layout in ("system", "user", "nearest"):
        pieces = build_prompt(tokenizer, asked, ["foo (1.2.0-8) by Ann"], layout)
        text = tokenizer.decode(pieces.prompt_ids)
        assert " ".join(line.split()) in text, text
        assert "1.2.0-9\u201d" not in tokenizer.decode(pieces.public_prompt_ids)
        # the passage that has it: no such line; dp_vote's groups never get one
        found = build_prompt(tokenizer, asked, ["foo (1.2.0-9) by Ann"], layout)
        assert "mention" not in tokenizer.decode(found.prompt_ids)
        unchecked = build_prompt(
            tokenizer, asked, ["foo (1.2.0-8)"], layout, check_identifiers=False
        )
        assert "mention" not in tokenizer.decode(unchecked.prompt_ids)
    # no passage at all: the nothing-found line, not this one
    assert "mention" not in tokenizer.decode(build_prompt(tokenizer, asked, [], "user").prompt_ids)


def test_a_model_without_a_chat_template_gets_the_base_layout():
    from jinja2 import Template

    class Bare:
        chat_template = None

    bare = Bare()
    assert ensure_chat_template(bare) == BASE_STOPS and bare.chat_template == BASE_TEMPLATE
    text = Template(bare.chat_template).render(
        messages=build_messages(CONVERSATION[:2], "[1] allopurinol", layout="user"),
        add_generation_prompt=True,
        bos_token="<bos>",
    )
    assert text.startswith("<bos>" + GROUNDED_PROMPT) and text.endswith(
        "Documents:\n[1] allopurinol\n\nQuestion: What helps gout?\nAnswer:"
    )
    templated = Bare()
    templated.chat_template = "{{ messages }}"
    assert ensure_chat_template(templated) == () and templated.chat_template == "{{ messages }}"


def test_the_nearest_layout_puts_the_best_document_next_to_the_question():
    context = format_context(["best", "second", "third"], "nearest")
    assert context == "[3] third\n\n[2] second\n\n[1] best"
    messages = build_messages(CONVERSATION, context, layout="nearest")
    assert messages[-1]["content"].endswith("[1] best\n\nQuestion: And the dose?")


def test_chunks_far_below_the_best_are_dropped_from_the_prompt():
    from companion.rag.prompt import fit_context, near_best

    assert near_best([0.5, 0.3, 0.2], 0.5) == [True, True, False]
    assert near_best([0.5, 0.2], 0.0) == [True, True] and near_best([], 0.5) == []
    assert near_best([-0.1, -0.2], 0.5) == [True, True]  # no positive best: nothing to judge by
    fitted = fit_context(WordTokenizer(), ["a b", "c d e", "f"], 100, keep=[True, False, True])
    assert fitted.texts == ["a b", "f"]
    assert [k.included for k in fitted.kept] == ["whole", "dropped", "whole"]
    report = fitted.report()
    assert report["dropped"] == [2] and report["tokens"] == 3 and report["retrieved_tokens"] == 6


def test_the_owners_passages_come_under_their_documents_names_a_guests_never():
    from types import SimpleNamespace

    from companion.answer.context import AnswerContext, citations_for, fit
    from companion.settings import Settings

    hits = [
        SimpleNamespace(
            chunk_id=i,
            document_id=i,
            document=name,
            collection="c",
            index=0,
            start=0,
            end=len(text),
            score=0.9,
            text=text,
        )
        for i, (name, text) in enumerate(
            [("libmagic1.copyright.txt", "License: BSD-2-clause"), ("b.txt", "one two three")]
        )
    ]
    tokenizer = TextTokenizer()
    settings = Settings(context_token_budget=7, context_relative_score=0.0)
    owner = AnswerContext(retrieved=True, hits=hits, citations=citations_for(hits))
    fit(owner, tokenizer, settings, titles=True)
    assert owner.texts[0] == "From libmagic1.copyright.txt:\nLicense: BSD-2-clause"
    # the names count in the context budget: the second passage is cut to what is left
    assert owner.report["tokens"] == 7 and owner.citations[1].included == "partial"
    assert owner.citations[0].included_chars == len("License: BSD-2-clause")
    asked = [{"role": "user", "content": "Which licence has libmagic1?"}]
    text = tokenizer.decode(build_prompt(tokenizer, asked, owner.texts, "user").prompt_ids)
    assert "libmagic1.copyright.txt" in text and "mention" not in text
    guest = AnswerContext(retrieved=True, hits=hits)
    fit(guest, tokenizer, settings)
    assert guest.texts[0] == "License: BSD-2-clause"
    assert not any("copyright.txt" in t for t in guest.texts)
