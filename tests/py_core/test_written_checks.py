"""Run the stdlib-only checks of written numbers under CPython (they also run in Pyodide)."""

from typing import Any

import pytest

from tests.py_core import written_checks
from tests.py_core.checklib import all_checks


@pytest.mark.parametrize(("name", "check"), all_checks(written_checks))
def test_written_check(name: str, check: Any) -> None:
    """Each check of written numbers passes in CPython."""
    check()
