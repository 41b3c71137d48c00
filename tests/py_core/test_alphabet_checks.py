"""Run the stdlib-only per-script k-RR checks under CPython (they also run in Pyodide)."""

import pytest

from tests.py_core import alphabet_checks
from tests.py_core.checklib import all_checks


@pytest.mark.parametrize(("name", "check"), all_checks(alphabet_checks))
def test_alphabet_check(name: str, check) -> None:  # type: ignore[no-untyped-def]
    """Each per-script check passes in CPython."""
    check()
