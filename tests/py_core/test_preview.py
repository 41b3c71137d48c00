"""py_core.preview and py_core.wordfreq under CPython (the same checks also run in Pyodide)."""

from __future__ import annotations

import json

import pytest

from py_core import preview as preview_module
from py_core import wordfreq
from py_core.errors import StateError
from tests.py_core import preview_checks
from tests.py_core.checklib import all_checks


@pytest.mark.parametrize(("name", "check"), all_checks(preview_checks))
def test_preview_check(name: str, check) -> None:
    """Each preview/wordfreq check passes in CPython."""
    check()


def test_data_files_are_small_and_licensed() -> None:
    """The shipped table stays a few hundred KB and carries its MIT licence."""
    assert wordfreq.TABLE_PATH.stat().st_size < 400_000
    licence = wordfreq.TABLE_PATH.with_name("wordfreq_en.LICENSE.txt").read_text()
    assert "MIT License" in licence and "symspellpy" in licence
    assert preview_module.CALIBRATION_PATH.stat().st_size < 100_000


def test_missing_calibration_is_a_clear_error(tmp_path, monkeypatch) -> None:
    """A missing calibration file raises StateError naming the regeneration command."""
    monkeypatch.setattr(preview_module, "CALIBRATION_PATH", tmp_path / "absent.json")
    preview_module.default_model.cache_clear()
    try:
        with pytest.raises(StateError, match="companion eval krr"):
            preview_module.default_model()
    finally:
        preview_module.default_model.cache_clear()


def test_custom_model_is_used(tmp_path) -> None:
    """A model passed explicitly overrides the shipped calibration."""
    data = preview_module.default_model().to_dict()
    data["rates"] = [[[1.0] * data["max_length"] for _ in t] for t in data["rates"]]
    model = preview_module.PreviewModel.from_dict(json.loads(json.dumps(data)))
    words = preview_module.preview("Xqzvwkj 4417", 2.0, model)
    assert all(w.probability == 1.0 and w.label == preview_module.LIKELY_RESTORED for w in words)
