"""The answers evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/answers)."""

from __future__ import annotations

from dataclasses import dataclass

# How many questions of each kind (at most; fewer where the records do not have them).
QUESTIONS: tuple[tuple[str, int], ...] = (
    ("bug-version", 60),
    ("uploader", 40),
    ("date", 30),
    ("licence", 30),
    ("holder", 20),
    ("source", 20),
    ("unanswerable-bug", 20),
    ("unanswerable-version", 15),
    ("unanswerable-package", 15),
)
# (who asks, with which defense): the owner names it in the request, a guest's key fixes it.
CELLS: tuple[tuple[str, str], ...] = (
    ("owner", "none"),
    ("owner", "copy_aware"),
    ("guest", "copy_aware"),
    ("guest", "bounded"),
)


@dataclass(frozen=True, slots=True)
class Config:
    models: tuple[str, ...]
    changelog_packages: int
    entries_per_package: int
    copyright_packages: int
    questions: tuple[tuple[str, int], ...]
    cells: tuple[tuple[str, str], ...]
    smoke: bool
    limit: int | None = None  # ask only the first N questions (they interleave the kinds)
    max_tokens: int = 64
    generation_timeout_s: float = 600.0
    seed: int = 30


# The committed run (docs/answers/report.md): the default model, the owner's default and the
# guest default, 200 questions.  --models / --cells / --limit ask for others.
FULL = Config(
    models=("qwen2.5-coder-1.5b-instruct",),
    changelog_packages=60,
    entries_per_package=3,
    copyright_packages=40,
    questions=QUESTIONS,
    cells=(("owner", "none"), ("guest", "copy_aware")),
    smoke=False,
    limit=200,
    max_tokens=48,
)
SMOKE = Config(
    models=("smollm2-135m-instruct",),
    changelog_packages=8,
    entries_per_package=3,
    copyright_packages=6,
    questions=tuple((kind, 1) for kind, _ in QUESTIONS),
    cells=(("owner", "none"), ("guest", "copy_aware")),
    smoke=True,
    max_tokens=24,
)
