"""The lifetime run's digest read by each chat model (issue 26: "with the best model the
companion ships").

In the lifetime run a guest question the collection's digest speaks to is answered from its
released statements, and its repeats from the answer cache.  Which chat model reads them is
the companion's choice (``--model``), and reading released statements is post-processing:
no model changes any document's ε.  So, after the run, every distinct question the digest
spoke to is asked of each named model, read from the run's digest exactly as the companion
reads it (:func:`companion.answer.digest.reading`), against the same model undefended over
the top 3 retrieved notes (the run's ``none``), in the same process.  The ``dp_answer``
answers (the questions the digest does not speak to) are not rerun: their groups' passes
cost minutes per answer with a 1.5B model on two cores.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from evals import common
from evals.dprag.lifetime_corpus import Ask
from evals.pad.metrics import answer_correct


def _load(name: str) -> Any:
    """A chat model as the companion loads it (llama.cpp for a large GGUF on the CPU)."""
    from companion.models import load_causal_lm

    return load_causal_lm(name, backend="auto", dtype="auto")


def read_by_models(
    names: Sequence[str],
    run_model: tuple[str, Any],
    rag: Any,
    digest: Any,
    asks: Sequence[Ask],
    max_tokens: int,
    *,
    seed: int,
    log: Any = print,
) -> dict[str, Any]:
    """Each model's answers to the questions the digest speaks to, from the digest and
    undefended.  ``run_model`` is the run's own (name, loaded model), reused by name; a
    model that cannot load is reported, and the others go on."""
    from companion.answer import AnswerPlan, answer_now, chunks_context
    from companion.answer.digest import reading, relevant
    from evals.dprag.lifetime import _baselines

    seen: dict[str, tuple[Ask, list[str]]] = {}  # question -> its ask, the statements read
    for ask in asks:
        text = ask.question.text
        if ask.question.kind == "population" and text not in seen:
            found = [s.text for s in relevant(digest, text)]
            if found:
                seen[text] = (ask, found)
    out: dict[str, Any] = {"rows": [], "errors": {}, "questions": len(seen)}
    for name in names:
        try:
            lm = run_model[1] if name == run_model[0] else _load(name)
        except Exception as exc:  # a model not installed here is reported, not hidden
            out["errors"][name] = f"{type(exc).__name__}: {exc}"
            log(f"[lifetime] digest by {name}: not loaded ({exc})")
            continue
        for i, (text, (ask, statements)) in enumerate(seen.items()):
            q = ask.question
            plan = reading(AnswerPlan.for_question(text, "none", max_tokens, seed=seed + i))
            t0 = time.perf_counter()
            res = answer_now(plan, chunks_context(statements), lm)
            took = time.perf_counter() - t0
            none = _baselines(lm, rag, text, max_tokens, seed + i, labels=("none",))[0]
            out["rows"].append(
                {
                    "model": name,
                    "question": text,
                    "topic": ask.topic,
                    "support": q.support,
                    "digest_answer": res.text,
                    "digest_correct": answer_correct(res.text, q.answer),
                    "digest_seconds": took,
                    "none_answer": none["answer"],
                    "none_correct": answer_correct(none["answer"], q.answer),
                    "none_seconds": none["seconds"],
                }
            )
        got = [r for r in out["rows"] if r["model"] == name]
        log(
            f"[lifetime] digest by {name}: {sum(r['digest_correct'] for r in got)}/{len(got)} "
            f"right, undefended {sum(r['none_correct'] for r in got)}/{len(got)}"
        )
    return out


def table(part: dict[str, Any]) -> list[list[Any]]:
    """One row per model: right from the digest, right undefended, their ratio, seconds."""
    rows = []
    for name in dict.fromkeys(r["model"] for r in part.get("rows", [])):
        got = [r for r in part["rows"] if r["model"] == name]
        k = sum(r["digest_correct"] for r in got)
        k0 = sum(r["none_correct"] for r in got)
        n = len(got)
        rows.append(
            [
                name,
                f"{k}/{n}",
                f"{k0}/{n}",
                f"{k / k0:.2f}" if k0 else "-",
                f"{sum(r['digest_seconds'] for r in got) / n:.1f}",
                f"{sum(r['none_seconds'] for r in got) / n:.1f}",
            ]
        )
    for name, why in part.get("errors", {}).items():
        rows.append([name, "not loaded", "-", "-", "-", why[:80]])
    return rows


def section(part: dict[str, Any]) -> list[str]:
    if not part:
        return []
    left = part.get("strong_without_digest", 0)
    return [
        "### The digest read by each chat model",
        "",
        f"The {part.get('questions', 0)} distinct questions the run's digest spoke to (each "
        "asked twice in the run, the repeat from the answer cache), read from the same released "
        "statements by each model (no document charged again), against the same model "
        "undefended over the top 3 notes; greedy, same process. Large GGUF models run on "
        "llama.cpp, as in the chat. Ratio: right from the digest over right undefended. "
        f"Questions with support ≥ 50 the digest did not speak to (answered by dp_answer, not "
        f"rerun here): {left}.",
        "",
        common.markdown_table(
            ["model", "right from the digest", "right undefended", "ratio", "s digest", "s none"],
            table(part),
        ),
        "",
    ]


def strong_without_digest(digest: Any, asks: Sequence[Ask]) -> int:
    """Population questions with support >= 50 the digest does not speak to (they go to
    dp_answer, which this part does not rerun)."""
    from companion.answer.digest import relevant

    return len(
        {
            a.question.text
            for a in asks
            if a.question.kind == "population"
            and (a.question.support or 0) >= 50
            and not relevant(digest, a.question.text)
        }
    )
