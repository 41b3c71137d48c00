"""The PAD evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/pad).

The sizes of the prompt set are here; the defenses and knobs each run compares are
:func:`evals.pad.runner.configurations`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Config:
    records: int
    attacks: int
    targeted: int
    benign: int
    attack_tokens: int
    benign_tokens: int
    smoke: bool
    top_k: int = 2

    def sizes(self) -> dict[str, Any]:
        """The prompt-set sizes as results.json records them (``meta.sizes``)."""
        return {
            "records": self.records,
            "attacks": self.attacks,
            "targeted": self.targeted,
            "benign": self.benign,
            "attack_tokens": self.attack_tokens,
            "benign_tokens": self.benign_tokens,
            "top_k": self.top_k,
        }


FULL = Config(
    records=60,
    attacks=14,
    targeted=4,
    benign=24,
    attack_tokens=64,
    benign_tokens=32,
    smoke=False,
)
SMOKE = Config(
    records=12, attacks=3, targeted=1, benign=2, attack_tokens=40, benign_tokens=32, smoke=True
)


# Run before the evaluation was enlarged to 42 prompts; left out of the full run so that it fits
# in about 25 min on a shared 2-core machine (the report lists them).
LEFT_OUT = (
    "bounded eps=64",
    "copy-aware sigma=0.5",
    "copy-aware w/o copy screen",
)
