"""The RAG evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/rag)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Config:
    lee_docs: int  # news articles ingested (of 300)
    notes: int  # consultation notes ingested with them
    template_questions: int
    rare_questions: int  # per identifier kind
    small_store_notes: int  # the case: a store of this many notes alone
    smoke: bool
    changelog_packages: int = 60  # Debian changelogs read (real records nobody here wrote)
    changelog_entries: int = 5  # entries of each, one document each
    changelog_questions: int = 30  # per identifier kind
    tokenizers: tuple[str, ...] = ("unicode61", "trigram", "porter")
    seed: int = 19


FULL = Config(
    lee_docs=300,
    notes=200,
    template_questions=120,
    rare_questions=40,
    small_store_notes=20,
    smoke=False,
)
SMOKE = Config(
    lee_docs=60,
    notes=30,
    template_questions=20,
    rare_questions=8,
    small_store_notes=20,
    smoke=True,
    changelog_packages=10,
    changelog_entries=3,
    changelog_questions=4,
    tokenizers=("unicode61", "trigram"),
)
