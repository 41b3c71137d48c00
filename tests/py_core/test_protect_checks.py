"""Run the stdlib-only protect checks under CPython (they also run in Pyodide)."""

import pytest

from tests.py_core import protect_checks
from tests.py_core.checklib import all_checks


@pytest.mark.parametrize(("name", "check"), all_checks(protect_checks))
def test_protect_check(name: str, check) -> None:  # type: ignore[no-untyped-def]
    """Each protect check passes in CPython."""
    check()
