"""Are the bundled chat models' answers right? Two short documents, fixed questions.

The issue's finding: SmolLM2-135M answered simple questions about two short
uploaded documents wrongly (a phone number answered with a date, an invented
doctor), under every defense.  This benchmark asks a fixed set of questions
about two short documents (a consultation note and a referral letter) through
the companion's own pieces -- the store and MiniLM retrieval (top 3), the
context budget, the prompt (``companion.rag.prompt``, each layout) and the
generation loop with each defense -- and scores each answer's first line:

* an answerable question is right when the first line holds the gold answer
  (any of its accepted forms; phone numbers compared on their digits);
* an unanswerable one (the documents do not say) is right when the first line
  says so, and wrong when it invents something.

Run: ``python bench/answers_bench.py`` (both models, both layouts under ``none``,
the chosen layout under every defense; ~17 min at load 9 on 2 cores) or ``--smoke`` (the
default model, 3 questions, ``none`` and ``copy_aware``; CI).  ``--out`` writes
the JSON; docs/rag/answers.md has the measured table.  Defenses with noise use
the CSPRNG (``companion.decoding.noise.secure_generator``), so their figures vary
from run to run; ``none`` decodes greedily and repeats exactly.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOCUMENTS = {
    "visit-note.txt": (
        "Consultation note, 14 March 2025. Patient: Daniel Okafor, born 2 February 1971, "
        "phone (415) 555-0142. Seen by Dr. Helena Marsh at Riverside Clinic. Complaint: knee "
        "pain after running, for three weeks. Assessment: patellar tendinopathy. Plan: "
        "physiotherapy twice a week, ibuprofen 400 mg when needed, review in six weeks."
    ),
    "referral-letter.txt": (
        "Referral letter, 9 April 2025. To: Dr. Samuel Ortiz, Lakeside Orthopaedics, 22 "
        "Harbour Road. Re: Priya Natarajan, born 30 October 1988, phone 020 7946 0321, e-mail "
        "priya.n@example.org. Ms Natarajan has had lower back pain for two months. An MRI on "
        "1 April 2025 showed a small disc bulge at L4-L5. Please assess her for physiotherapy "
        "or an injection. Signed: Dr. Amy Chen, Northside Surgery."
    ),
}


@dataclass(frozen=True)
class Question:
    text: str
    gold: tuple[str, ...]  # accepted forms; empty: the documents do not say
    digits: bool = False  # compare digits only (phone numbers)


QUESTIONS = (
    Question("What is Daniel Okafor's phone number?", ("4155550142", "5550142"), digits=True),
    Question("Which doctor saw Daniel Okafor?", ("marsh",)),
    Question("What was Daniel Okafor's diagnosis?", ("tendinopathy",)),
    Question("How much ibuprofen may Daniel Okafor take?", ("400 mg", "400mg")),
    Question("When will Daniel Okafor be reviewed?", ("six weeks", "6 weeks")),
    Question("Which clinic did Daniel Okafor visit?", ("riverside",)),
    Question("Who is Priya Natarajan referred to?", ("ortiz",)),
    Question("What is Priya Natarajan's e-mail address?", ("priya.n@example.org",)),
    Question("What is Priya Natarajan's phone number?", ("02079460321", "79460321"), digits=True),
    Question("What did Priya Natarajan's MRI show?", ("disc bulge", "bulge")),
    Question("Who signed the referral letter?", ("chen",)),
    Question("When was Priya Natarajan born?", ("30 october 1988", "october 30, 1988")),
    Question("What is Daniel Okafor's blood type?", ()),
    Question("What is the name of Priya Natarajan's physiotherapist?", ()),
)
SMOKE_QUESTIONS = (0, 1, 12)
DECLINES = (
    "do not say",
    "does not say",
    "don't say",
    "doesn't say",
    "not mentioned",
    "not stated",
    "not specified",
    "not provided",
    "no information",
    "not say",
    "unknown",
    "not known",
    "don't know",
    "do not know",
    "not given",
    "not available",
)
MODELS = ("smollm2-135m-instruct", "gemma-3-270m")
MAX_TOKENS = 24  # the first line is scored; a short answer fits


def first_line(answer: str) -> str:
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def score(question: Question, answer: str) -> bool:
    line = " ".join(first_line(answer).lower().split())
    if not question.gold:
        return any(d in line for d in DECLINES)
    if question.digits:
        digits = re.sub(r"\D", "", line)
        return any(g in digits for g in question.gold)
    return any(g in line for g in question.gold)


def build_store(home: Path) -> Any:
    from companion.models import load_embedder
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore

    rag = RagService(store=DocumentStore(home / "rag.sqlite3"), embedder=load_embedder("cpu"))
    for name, text in DOCUMENTS.items():
        rag.ingest(name, text.encode(), "bench")
    return rag


def answer(
    lm: Any,
    rag: Any,
    question: str,
    defense: str,
    layout: str,
    top_k: int = 3,
    relative: bool = True,
) -> str:
    """One answer through the companion's answer service (retrieval, budget, context fit,
    prompt, generation), with the chat's defaults but this layout and context floor."""
    from companion.answer import AnswerPlan, admit, answer_now, fit
    from companion.rag.retrieval import RetrievalOptions
    from companion.settings import Settings

    # One answer's quality, not a lifetime (that is `veil eval dprag`): budgets that last.
    settings = Settings(prompt_layout=layout, document_budget_epsilon=1e9)  # type: ignore[arg-type]
    if not relative:
        settings = settings.model_copy(update={"context_relative_score": 0.0})
    plan = AnswerPlan.for_question(
        question,
        defense,
        MAX_TOKENS,
        collection="bench",
        top_k=top_k,
        layout=layout,
        retrieval=RetrievalOptions.from_settings(settings),
        repetition_penalty=settings.repetition_penalty,
        stop_loops=settings.stop_loops,
    )
    context = admit(plan, settings, rag)
    fit(context, lm.tokenizer, settings)
    return answer_now(plan, context, lm).text


def run(
    models: tuple[str, ...],
    questions: tuple[Question, ...],
    layouts: tuple[str, ...],
    defenses: tuple[str, ...],
    out: Path | None = None,
    baseline: bool = True,
    resume: bool = False,
    draws: int = 1,
) -> dict[str, Any]:
    """``none`` with every layout for every model, then the best layout under ``defenses``.

    The best layout is the one with the most right answers under ``none`` summed over
    the models; the JSON is rewritten after every cell, so a stopped run keeps its rows.
    """
    import torch

    from companion.models import load_causal_lm

    torch.set_num_threads(1)
    result: dict[str, Any] = {"max_tokens": MAX_TOKENS, "rows": [], "chosen_layout": None}
    if resume and out is not None and out.exists():  # keep the cells a stopped run measured
        result["rows"] = json.loads(out.read_text())["rows"]
    done = {
        (r["model"], r["layout"], r["defense"], r["context_floor"], r.get("draw", 1))
        for r in result["rows"]
    }

    def cell(
        lm: Any, rag: Any, model: str, layout: str, defense: str, floor: bool = True, draw: int = 1
    ) -> None:
        if (model, layout, defense, floor, draw) in done:
            return
        started = time.time()
        answers: list[dict[str, Any]] = []
        for q in questions:
            text = answer(lm, rag, q.text, defense, layout, relative=floor)
            answers.append({"question": q.text, "answer": text, "right": score(q, text)})
        right = sum(a["right"] for a in answers)
        row = {
            "model": model,
            "layout": layout,
            "defense": defense,
            "context_floor": floor,
            "draw": draw,
            "right": right,
            "questions": len(questions),
            "seconds": round(time.time() - started, 1),
            "answers": answers,
        }
        result["rows"].append(row)
        print(f"  {model} {layout} floor={floor} {defense}: {right}/{len(questions)} "
              f"({row['seconds']} s)",
              flush=True)  # fmt: skip
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=1))

    with tempfile.TemporaryDirectory() as tmp:
        rag = build_store(Path(tmp))
        loaded = {}
        for model in models:
            started = time.time()
            loaded[model] = load_causal_lm(model, device="cpu", dtype="float32")
            print(f"{model}: loaded in {time.time() - started:.1f} s", flush=True)
            if baseline:  # the pipeline before this benchmark: system layout, every chunk
                cell(loaded[model], rag, model, "system", "none", floor=False)
            for layout in layouts:
                cell(loaded[model], rag, model, layout, "none")
        totals = {
            layout: sum(
                r["right"]
                for r in result["rows"]
                if r["layout"] == layout and r["context_floor"] and r["defense"] == "none"
            )
            for layout in layouts
        }
        chosen = max(layouts, key=lambda layout: totals[layout])  # ties: the first listed
        result["chosen_layout"] = chosen
        print(f"layout under none, right answers over the models: {totals}; chosen: {chosen}")
        for draw in range(1, draws + 1):  # the noisy defenses: a fresh draw each time
            for model in models:
                for defense in defenses:
                    if defense != "none" and (draw == 1 or defense != "dp_vote"):
                        cell(loaded[model], rag, model, chosen, defense, draw=draw)
    return result


def table(result: dict[str, Any]) -> str:
    lines = [
        "| model | prompt layout | context floor | defense | draw | right | of |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for r in result["rows"]:
        floor = "0.5 of the best" if r["context_floor"] else "off"
        lines.append(
            f"| {r['model']} | {r['layout']} | {floor} | {r['defense']} | {r.get('draw', 1)} "
            f"| {r['right']} "
            f"| {r['questions']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="default model, 3 questions")
    parser.add_argument("--models", nargs="*", default=None, help=f"of {', '.join(MODELS)}")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    parser.add_argument("--resume", action="store_true", help="keep the cells --out has")
    parser.add_argument(
        "--draws", type=int, default=2, help="runs of each noisy defense (dp_vote: one)"
    )
    args = parser.parse_args(argv)
    from companion.decoding.registry import DEFENSES
    from companion.models import offline
    from companion.rag.prompt import DEFAULT_LAYOUT, PROMPT_LAYOUTS

    offline()
    if args.smoke:
        models: tuple[str, ...] = (MODELS[0],)
        questions = tuple(QUESTIONS[i] for i in SMOKE_QUESTIONS)
        layouts: tuple[str, ...] = (DEFAULT_LAYOUT,)
        defenses: tuple[str, ...] = ("none", "copy_aware")
    else:
        models = tuple(args.models or MODELS)
        questions = QUESTIONS
        layouts, defenses = PROMPT_LAYOUTS, DEFENSES
    result = run(
        models,
        questions,
        layouts,
        defenses,
        args.out,
        baseline=not args.smoke,
        resume=args.resume,
        draws=1 if args.smoke else args.draws,
    )
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
