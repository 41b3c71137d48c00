"""The answer service: one path from a question to an answer with its receipt and citations.

Every answer Veil makes -- the chat route, the MCP server, the benchmarks and the
evaluations -- goes through these steps, each in its own module:

* :mod:`~companion.answer.plan`: :func:`plan_answer` checks the limits and fixes the
  principal, defense, collection, retrieval options and generation settings;
* :mod:`~companion.answer.context`: :func:`admit` retrieves the context and charges the
  documents' lifetime budgets; :func:`fit` keeps it within the context token budget;
* :mod:`~companion.answer.run`: :func:`start` builds the prompt and the generation
  (one :class:`~companion.decoding.generate.GenerationConfig`);
* :mod:`~companion.answer.result`: the receipt, the ``veil`` object and the usage, with
  what a guest may see.

The HTTP route (:mod:`companion.api.chat`) keeps HTTP only: guest terms, the model
slot, the SSE serialiser.
"""

from companion.answer.context import AnswerContext, admit, chunks_context, citations_for, fit
from companion.answer.plan import AnswerPlan, plan_answer
from companion.answer.run import answer_now, generation_config, start

__all__ = [
    "AnswerContext",
    "AnswerPlan",
    "admit",
    "answer_now",
    "chunks_context",
    "citations_for",
    "fit",
    "generation_config",
    "plan_answer",
    "start",
]
