"""Privacy-aware decoding: the defenses, their generation loop and their receipts.

Importing this package imports torch and transformers; the API imports it only
when the app starts.
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
