"""The hidden-state inversion auditor: how much of a text can a model's hidden states reveal?

* :mod:`companion.audit.hidden` -- hidden states and exact verification with a prefix KV cache;
* :mod:`companion.audit.ranker` -- the per-model setup (position-0 table, ranker), cached on disk;
* :mod:`companion.audit.invert` -- the fast exact path and the published gradient method;
* :mod:`companion.audit.inputs` -- leaked states from .pt/.npy/.safetensors, validated;
* :mod:`companion.audit.service` and :mod:`companion.audit.jobs` -- what the CLI and API share.

Heavy imports (torch, transformers) happen in those modules, not here.
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PublishedDefaults:
    """The published gradient method's knobs: K Adam steps, C candidates, learning rate."""

    steps: int = 1000  # K, Adam steps per position
    candidates: int = 2000  # C, nearest embeddings verified at commit
    learning_rate: float = 0.01


# The one source of these defaults for the CLI, the API, the service and the evaluation.
PUBLISHED = PublishedDefaults()


class QueueFullError(Exception):
    """The audit job queue is full; ``retry_after`` seconds is a hint for when to try again."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
