"""Run the stdlib-only RootGuard checks under CPython (they also run in Pyodide)."""

from typing import Any

import pytest

from tests.py_core import rootguard_checks
from tests.py_core.checklib import all_checks


@pytest.mark.parametrize(("name", "check"), all_checks(rootguard_checks))
def test_rootguard_check(name: str, check: Any) -> None:
    """Each RootGuard check passes in CPython."""
    check()
