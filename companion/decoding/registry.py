"""The decoding defenses, one line each.

Adding a defense is one module under :mod:`companion.decoding.defenses` that
defines ``DEFENSE`` (a :class:`~companion.decoding.base.Defense`) and one line
here.  The API's list of defenses, request validation, the chat page's menu
(``GET /v1/defenses``), the generation loop, the receipts and the benchmark all
read this table.  Modules are imported on first use (they import torch), so
listing the names stays cheap.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from py_core.errors import InvalidParameterError

if TYPE_CHECKING:
    from companion.decoding.base import Defense

_MODULES: dict[str, str] = {
    "copy_aware": "companion.decoding.defenses.copy_aware",
    "bounded": "companion.decoding.defenses.bounded",
    "dp_vote": "companion.decoding.defenses.dp_vote",
    "dp_answer": "companion.decoding.defenses.dp_answer",
    "pad": "companion.decoding.defenses.pad",
    "static": "companion.decoding.defenses.static",
    "none": "companion.decoding.defenses.none",
}

DEFENSES: tuple[str, ...] = tuple(_MODULES)  # menu order
DEFAULT_DEFENSE = "copy_aware"


def check_name(name: object) -> str:
    if not isinstance(name, str) or name not in _MODULES:
        raise InvalidParameterError(
            f"unknown defense {name!r}; choose one of {', '.join(DEFENSES)}"
        )
    return name


@cache
def get_defense(name: str) -> Defense:
    """The registry entry for ``name`` (InvalidParameterError naming the choices if unknown)."""
    module = importlib.import_module(_MODULES[check_name(name)])
    defense: Defense = module.DEFENSE
    if defense.name != name:  # pragma: no cover - a registry typo
        raise RuntimeError(f"{_MODULES[name]} defines {defense.name!r}, registered as {name!r}")
    return defense


def all_defenses() -> list[Defense]:
    return [get_defense(name) for name in DEFENSES]
