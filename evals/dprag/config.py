"""The DP-RAG evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/dprag)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Config:
    records: int
    supports: tuple[int, ...]  # two population facts (a treatment, a device fault) per level
    record_questions: int
    attacks: int
    membership: int  # members asked about, and as many outsiders
    filter_questions: int  # the lifetime-filter run (first model only)
    models: tuple[str, ...]
    epsilons: tuple[float, ...]  # dp_vote's per-answer epsilon sweep
    groups: int
    group_tokens: int
    smoke: bool
    gate_tokens: int = 16
    release_tokens: int = 9
    top_k: int = 3  # the context of none / copy_aware / bounded
    threshold: float = 0.5  # dp_vote's thresholded retrieval (cosine)
    max_candidates: int = 120
    answer_tokens: int = 16
    record_tokens: int = 24
    attack_tokens: int = 32
    filter_epsilon: float = 10.0  # per answer, in the filter run
    document_epsilon: float = 10.0  # every document's lifetime budget
    document_delta: float = 1e-6
    membership_models: int = 1  # how many of ``models`` run the membership test
    # The second and later models run dp_vote on the population questions and this many
    # record questions and attacks only (a 270M model costs ~2.5x on two cores).
    other_model_private: int = 1

    def sizes(self) -> dict[str, Any]:
        data = asdict(self)
        data["supports"] = list(self.supports)
        data["models"] = list(self.models)
        data["epsilons"] = list(self.epsilons)
        return data


FULL = Config(
    records=1000,
    supports=(5, 20, 50, 100),
    record_questions=4,
    attacks=3,
    membership=5,
    filter_questions=100,
    models=("smollm2-135m-instruct", "gemma-3-270m"),
    epsilons=(2.0, 5.0, 10.0),
    groups=24,
    group_tokens=72,
    smoke=False,
)
SMOKE = Config(
    records=40,
    supports=(4,),
    record_questions=1,
    attacks=1,
    membership=1,
    filter_questions=3,
    models=("smollm2-135m-instruct",),
    epsilons=(10.0,),
    groups=6,
    group_tokens=48,
    smoke=True,
    gate_tokens=8,
    release_tokens=4,
    answer_tokens=8,
    record_tokens=10,
    attack_tokens=10,
    max_candidates=24,
)
