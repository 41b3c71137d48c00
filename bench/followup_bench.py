"""Which text should a follow-up question retrieve with? (companion.conversations.query)

Eight short notes about eight people and a tenancy agreement in one collection;
conversations of two questions.  In a *follow-up* the second question does not name
its subject ("And what dose?", "and when does it end?"); in a *switch* it names a
different person than the first; in an *unrelated* one it asks about something no
document covers ("What is the capital of France?").  For each mode of
:func:`companion.conversations.query.retrieval_query` -- the last question alone
(``last``), joined after the earlier user questions when it refers back
(``user_turns``; ``user_turns always``: joined whatever it says, as before), and also
the previous answer (``turns``) -- it reports how often the gold note is the first hit
and in the top 3 (the chat's default top_k), and for the unrelated questions how often
the earlier question's document is retrieved at all (it should not be), with the real
MiniLM embedder, the companion's store and the chat's retrieval options (hybrid,
threshold 0.2, top 3).  The scripted previous answers are correct ones, which
favours ``turns``.

Run: ``python bench/followup_bench.py`` (~20 s on 2 cores); ``--smoke`` runs two
conversations.  docs/rag/answers.md has the measured table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NOTES = {
    "okafor.txt": "Daniel Okafor, 54, knee pain after running. Patellar tendinopathy. "
    "Physiotherapy twice a week and ibuprofen 400 mg when needed; review in six weeks.",
    "natarajan.txt": "Priya Natarajan, 36, lower back pain for two months. MRI: small disc "
    "bulge at L4-L5. Referred to Dr. Samuel Ortiz for physiotherapy or an injection.",
    "lindqvist.txt": "Erik Lindqvist, 71, type 2 diabetes. HbA1c 8.1%. Metformin raised to "
    "1000 mg twice daily; eye screening booked for March; next blood test in three months.",
    "moreau.txt": "Camille Moreau, 29, asthma worse in spring. Salbutamol inhaler two puffs "
    "when needed, beclometasone 200 micrograms twice a day; allergy to pollen.",
    "haddad.txt": "Youssef Haddad, 62, high blood pressure 160/95. Amlodipine 5 mg once a day, "
    "less salt, home readings for two weeks, then a review with the nurse.",
    "kowalska.txt": "Anna Kowalska, 45, migraine twice a month with aura. Sumatriptan 50 mg at "
    "onset, a headache diary, avoid the combined pill; neurology if it gets worse.",
    "tanaka.txt": "Hiroshi Tanaka, 38, gout in the right big toe. Colchicine 500 micrograms "
    "twice a day for a flare, then allopurinol 100 mg; uric acid 0.52 mmol/L.",
    "oconnell.txt": "Siobhan O'Connell, 33, iron deficiency anaemia, ferritin 6. Ferrous "
    "sulfate 200 mg once daily with orange juice; full blood count again in eight weeks.",
    "tenancy.txt": "Tenancy agreement for the two-room flat on the third floor. The rent "
    "is 940 euros a month, paid by the 3rd; a deposit of two months' rent is held. The "
    "tenancy runs from 1 April 2025 to 31 March 2027; either party may end it with three "
    "months' notice. Pets need the landlord's written consent.",
}

# (first question, a correct answer to it, second question, the gold note of the second)
CONVERSATIONS = [
    (
        "What was Daniel Okafor diagnosed with?",
        "Patellar tendinopathy.",
        "When is the review?",
        "okafor.txt",
        "follow-up",
    ),
    (
        "What did Priya Natarajan's MRI show?",
        "A small disc bulge at L4-L5.",
        "What is the plan now?",
        "natarajan.txt",
        "follow-up",
    ),
    (
        "What is Erik Lindqvist's HbA1c?",
        "8.1%.",
        "When is the next blood test?",
        "lindqvist.txt",
        "follow-up",
    ),
    (
        "Which inhaler does Camille Moreau use?",
        "Salbutamol, two puffs when needed.",
        "How often should she use it?",
        "moreau.txt",
        "follow-up",
    ),
    (
        "What was Youssef Haddad's blood pressure?",
        "160/95.",
        "What should he do for two weeks?",
        "haddad.txt",
        "follow-up",
    ),
    (
        "How often does Anna Kowalska get migraines?",
        "Twice a month, with aura.",
        "What should she avoid?",
        "kowalska.txt",
        "follow-up",
    ),
    (
        "Which joint is affected by Hiroshi Tanaka's gout?",
        "The right big toe.",
        "What was the blood result?",
        "tanaka.txt",
        "follow-up",
    ),
    (
        "What was Siobhan O'Connell's ferritin?",
        "6.",
        "How should she take her tablets?",
        "oconnell.txt",
        "follow-up",
    ),
    (
        "What was Daniel Okafor diagnosed with?",
        "Patellar tendinopathy.",
        "What is Anna Kowalska's migraine treatment?",
        "kowalska.txt",
        "switch",
    ),
    (
        "What is Erik Lindqvist's HbA1c?",
        "8.1%.",
        "Which inhaler does Camille Moreau use?",
        "moreau.txt",
        "switch",
    ),
    (
        "What was Youssef Haddad's blood pressure?",
        "160/95.",
        "What is Hiroshi Tanaka's uric acid?",
        "tanaka.txt",
        "switch",
    ),
    (
        "Who is Priya Natarajan referred to?",
        "Dr. Samuel Ortiz.",
        "What iron tablet does Siobhan O'Connell take?",
        "oconnell.txt",
        "switch",
    ),
    ("What is the rent of the flat?", "940 euros a month.", "And when does it end?",
     "tenancy.txt", "follow-up"),
    ("How much is the deposit for the flat?", "Two months' rent.", "Are pets allowed there?",
     "tenancy.txt", "follow-up"),
    # unrelated: the gold is the earlier question's document, which must not come back
    ("What is the rent of the flat?", "940 euros a month.", "What is the capital of France?",
     "tenancy.txt", "unrelated"),
    ("When does the tenancy end?", "On 31 March 2027.", "How do I bake sourdough bread?",
     "tenancy.txt", "unrelated"),
    ("What was Daniel Okafor diagnosed with?", "Patellar tendinopathy.",
     "Who wrote the novel Moby-Dick?", "okafor.txt", "unrelated"),
    ("Which inhaler does Camille Moreau use?", "Salbutamol, two puffs when needed.",
     "How many moons does Jupiter have?", "moreau.txt", "unrelated"),
    ("What is Erik Lindqvist's HbA1c?", "8.1%.", "What is the boiling point of water?",
     "lindqvist.txt", "unrelated"),
    ("How often does Anna Kowalska get migraines?", "Twice a month, with aura.",
     "Which planet is closest to the sun?", "kowalska.txt", "unrelated"),
]  # fmt: skip


def run(conversations: list[tuple[str, str, str, str, str]]) -> dict[str, Any]:
    import torch

    from companion.conversations.query import QUERY_MODES, retrieval_query
    from companion.models import load_embedder, offline
    from companion.rag.retrieval import request_options
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore
    from companion.settings import Settings

    offline()
    torch.set_num_threads(1)
    settings = Settings()  # the chat's retrieval: mode, threshold, top_k
    options = request_options(settings, None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rag = RagService(
            store=DocumentStore(Path(tmp) / "r.sqlite3"), embedder=load_embedder("cpu")
        )
        for name, text in NOTES.items():
            rag.ingest(name, text.encode(), "notes")
        modes = [(m, False) for m in QUERY_MODES] + [("user_turns", True)]
        for mode, always in modes:
            for kind in ("follow-up", "switch", "unrelated"):
                cases = [c for c in conversations if c[4] == kind]
                top1 = top3 = 0
                for first, reply, second, gold, _ in cases:
                    messages = [
                        {"role": "user", "content": first},
                        {"role": "assistant", "content": reply},
                        {"role": "user", "content": second},
                    ]
                    query = retrieval_query(messages, mode, always=always)
                    hits = rag.search(query, "notes", settings.retrieval_top_k, options)
                    names = [h.document for h in hits]
                    top1 += bool(names) and names[0] == gold
                    top3 += gold in names
                label = mode + (" always" if always else "")
                rows.append({"mode": label, "kind": kind, "cases": len(cases),
                             "top1": top1, "top3": top3})  # fmt: skip
    return {"rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    smoke = [CONVERSATIONS[0], CONVERSATIONS[8], CONVERSATIONS[14]]
    conversations = smoke if args.smoke else CONVERSATIONS
    result = run(conversations)
    print("(unrelated: gold = the earlier question's document; fewer is better)")
    print("| mode | questions | cases | gold first | gold in top 3 |")
    print("|---|---|---:|---:|---:|")
    for r in result["rows"]:
        print(f"| {r['mode']} | {r['kind']} | {r['cases']} | {r['top1']} | {r['top3']} |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
