"""Privacy-aware decoding: the defenses, their generation loop and their receipts.

Importing this package is cheap (configurations only); the processors and the
generation loop (``processors``, ``generate``) import torch and transformers.
"""

from companion.decoding.config import (
    DEFAULT_DEFENSE,
    DEFENSES,
    MEANINGFUL_EPSILON,
    BoundedConfig,
    CopyAwareConfig,
    DefenseConfig,
    PADConfig,
    StaticNoiseConfig,
)

__all__ = [
    "DEFAULT_DEFENSE",
    "DEFENSES",
    "MEANINGFUL_EPSILON",
    "BoundedConfig",
    "CopyAwareConfig",
    "DefenseConfig",
    "PADConfig",
    "StaticNoiseConfig",
]
