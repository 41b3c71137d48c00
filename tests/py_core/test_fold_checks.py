"""Run the stdlib-only "fold" alphabet checks under CPython (they also run in Pyodide)."""

import pytest

from tests.py_core import fold_checks
from tests.py_core.checklib import all_checks


@pytest.mark.parametrize(("name", "check"), all_checks(fold_checks))
def test_fold_check(name: str, check) -> None:  # type: ignore[no-untyped-def]
    """Each fold-mode check passes in CPython."""
    check()
