"""Which defense runs and with which parameters: a frozen value validated on construction.

The defenses themselves, with their parameter types, are in
:mod:`companion.decoding.registry`; this module stays cheap to import (no torch
until a defense's parameters are checked).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from companion.decoding.registry import DEFAULT_DEFENSE, DEFENSES, check_name, get_defense
from py_core.errors import InvalidParameterError

__all__ = ["DEFAULT_DEFENSE", "DEFENSES", "DefenseConfig"]


@dataclass(frozen=True, slots=True)
class DefenseConfig:
    """A defense by name and its validated parameters (the defaults when none are given)."""

    name: str = DEFAULT_DEFENSE
    params: Any = None

    def __post_init__(self) -> None:
        defense = get_defense(check_name(self.name))
        expected = defense.config_type
        if expected is None:
            if self.params is not None:
                raise InvalidParameterError(f"the defense {self.name!r} takes no parameters")
        elif self.params is None:
            object.__setattr__(self, "params", expected())
        elif not isinstance(self.params, expected):
            raise InvalidParameterError(
                f"defense {self.name!r} needs {expected.__name__}; got {type(self.params).__name__}"
            )

    @classmethod
    def from_options(cls, name: str, options: dict[str, Any] | None = None) -> DefenseConfig:
        """Build from a name and a flat dict of knobs; unknown knobs are named in the error."""
        return cls(name=name, params=get_defense(check_name(name)).config(options))

    @property
    def defense(self) -> Any:
        """The registry entry (:class:`companion.decoding.base.Defense`)."""
        return get_defense(self.name)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "params": asdict(self.params) if self.params else {}}
