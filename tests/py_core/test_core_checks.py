"""Run the stdlib-only py_core checks under CPython (they also run in Pyodide)."""

import pytest

from tests.py_core import core_checks
from tests.py_core.checklib import all_checks


@pytest.mark.parametrize(("name", "check"), all_checks(core_checks))
def test_core_check(name: str, check) -> None:  # type: ignore[no-untyped-def]
    """Each core check passes in CPython."""
    check()
