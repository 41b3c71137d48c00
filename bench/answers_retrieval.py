"""Is the answering document retrieved? ``veil eval answers``' questions, retrieval only.

``python bench/answers_retrieval.py [--limit 200]``: builds the evaluation's corpus (its FULL
configuration and seed: the same records and questions as docs/answers/report.md), ingests
it with the bundled embedder and asks every answerable question at the companion's
defaults (hybrid, top k, relevance threshold), twice in one process: as the code is, and
with finding a file by its *name* (``companion.rag.spelling.named_documents``) switched
off. Prints how often the answering document is among the retrieved, per body of records.
No model is loaded; ~1 minute on 2 cores.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200, help="the first N questions")
    args = parser.parse_args()

    import torch

    from companion.models import load_embedder
    from companion.rag import spelling
    from companion.rag.retrieval import request_options
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore
    from companion.settings import Settings
    from evals.answers.config import FULL
    from evals.answers.corpus import corpus_for

    torch.set_num_threads(1)
    corpus = corpus_for(FULL)
    asked = [q for q in corpus.questions[: args.limit] if q.document]
    settings = Settings()
    opts = request_options(settings, SimpleNamespace(retrieval_mode=None, retrieval_min_score=None))
    with tempfile.TemporaryDirectory() as tmp:
        rag = RagService(DocumentStore(Path(tmp) / "s.sqlite3"), load_embedder("cpu"))
        for d in corpus.documents:
            rag.ingest(d.name, d.text.encode(), "answers")
        named = spelling.named_documents
        off: Any = lambda *_a, **_k: []  # noqa: E731
        for label, fn in (("as shipped", named), ("without names", off)):
            spelling.named_documents = fn
            found: dict[str, list[int]] = {}
            for q in asked:
                hits = rag.search(q.text, "answers", settings.retrieval_top_k, opts)
                row = found.setdefault(q.body, [0, 0])
                row[0] += q.document in {h.document for h in hits}
                row[1] += 1
            right = sum(v[0] for v in found.values())
            parts = ", ".join(f"{b} {k}/{n}" for b, (k, n) in sorted(found.items()))
            print(
                f"{label}: answering document in the top {settings.retrieval_top_k} for "
                f"{right}/{len(asked)} ({parts})",
                flush=True,
            )
        spelling.named_documents = named


if __name__ == "__main__":
    main()
