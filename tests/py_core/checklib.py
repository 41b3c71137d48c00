"""Collect and run the ``check_*`` functions of a stdlib-only check module.

The modules ``tests/py_core/*_checks.py`` hold plain functions named
``check_*``; pytest runs them in CPython through this helper, and
tests/pyodide/run_checks.mjs runs them inside Pyodide through it too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType


def all_checks(module: ModuleType | str) -> list[tuple[str, Callable[[], None]]]:
    """``(name, function)`` for every ``check_*`` function of ``module``, sorted by name."""
    mod = importlib.import_module(module) if isinstance(module, str) else module
    return sorted(
        (name, fn) for name, fn in vars(mod).items() if name.startswith("check_") and callable(fn)
    )


def run_all(module: ModuleType | str) -> list[str]:
    """Run every check of ``module``; return the failures (name and error), all reported."""
    failures = []
    for name, fn in all_checks(module):
        try:
            fn()
        except Exception as exc:  # report every failure, fail at the end
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    return failures
