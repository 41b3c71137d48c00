"""The k-RR evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/krr)."""

from __future__ import annotations

from dataclasses import dataclass

EPSILONS = (2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
SUMMARY_EPSILONS = (4.0, 6.0, 8.0)
LLM_EPSILONS = (4.0, 6.0, 8.0)
SUMMARY_PROMPT = "Summarize the following text in two sentences."


@dataclass(frozen=True, slots=True)
class Config:
    n_documents: int
    seed: int
    epsilons: tuple[float, ...]
    llm_documents: int
    llm_snippet_words: int
    summary_documents: int
    summary_tokens: int
    similarity_documents: int
    metric_dp_epsilons: tuple[float, ...]
    metric_dp_vocabulary: int
    calibration_fraction: float
    smoke: bool


FULL = Config(
    n_documents=300,
    seed=0,
    epsilons=EPSILONS,
    llm_documents=6,
    llm_snippet_words=30,
    summary_documents=6,
    summary_tokens=48,
    similarity_documents=60,
    metric_dp_epsilons=(40.0, 60.0, 80.0, 120.0, 160.0, 320.0),
    metric_dp_vocabulary=15_000,
    calibration_fraction=2 / 3,
    smoke=False,
)

SMOKE = Config(
    n_documents=12,
    seed=0,
    epsilons=EPSILONS,
    llm_documents=1,
    llm_snippet_words=16,
    summary_documents=1,
    summary_tokens=24,
    similarity_documents=4,
    metric_dp_epsilons=(80.0, 160.0),
    metric_dp_vocabulary=2_000,
    calibration_fraction=2 / 3,
    smoke=True,
)
