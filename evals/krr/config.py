"""The k-RR evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/krr)."""

from __future__ import annotations

from dataclasses import dataclass

EPSILONS = (2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
SUMMARY_EPSILONS = (4.0, 6.0, 8.0)
LLM_EPSILONS = (4.0, 6.0, 8.0)
SUMMARY_PROMPT = "Summarize the following text in two sentences."
REPEAT_SENDS = (1, 3, 9, 27)


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
    # The repeated-disclosure attack (evals/krr/repeat.py): the first repeat_documents
    # documents, each sent max(repeat_sends) times at every repeat_epsilons, with and
    # without the word memo; repeat_keep_trials letters simulate the voted channel's
    # keep probability; repeat_word_trials runs of the single-word check ("Lovelace").
    # Defaults (the full run's) so that a results.json written before them still loads.
    repeat_documents: int = 300
    repeat_epsilons: tuple[float, ...] = EPSILONS
    repeat_sends: tuple[int, ...] = REPEAT_SENDS
    repeat_alphabets: str = "scripts"
    repeat_keep_trials: int = 20_000
    repeat_word_trials: int = 1_000


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
    repeat_documents=6,
    repeat_epsilons=(5.0,),
    repeat_keep_trials=5_000,
    repeat_word_trials=100,
)
