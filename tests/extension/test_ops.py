"""The extension's JavaScript and the bridge agree on op names and error codes.

``extension/src/core-ops.js`` names every op the extension calls; it must list
exactly the keys of ``OPS`` in ``extension/python/veil_bridge.py``.  Error codes
are one vocabulary, ``py_core.errors.ERROR_CODES``: ``extension/src/errors.js`` holds
an identical copy, every py_core error carries one, and the bridge sends only those.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import pytest

from py_core import errors

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "extension" / "src"
sys.path.insert(0, str(ROOT / "extension" / "python"))

import veil_bridge  # noqa: E402


def frozen_object(path: Path, name: str) -> dict[str, str]:
    """The string entries of ``export const NAME = Object.freeze({...})`` in a JS file."""
    text = path.read_text(encoding="utf-8")
    match = re.search(rf"export const {name} = Object\.freeze\(\{{(.*?)\}}\);", text, re.S)
    assert match, f"{path.name} has no {name} = Object.freeze({{...}})"
    entries = re.findall(r'^\s*([A-Za-z_]\w*):\s*"([^"]*)",', match.group(1), re.M)
    assert entries, f"{path.name}: {name} is empty"
    return dict(entries)


def test_core_ops_are_the_bridges_ops() -> None:
    ops = frozen_object(SRC / "core-ops.js", "Op")
    assert sorted(ops.values()) == sorted(veil_bridge.OPS)
    assert len(set(ops.values())) == len(ops), "two constants name one op"


def test_the_extensions_table_is_py_cores() -> None:
    """errors.js's ERROR_CODES is py_core/errors.py's, code for code and meaning for meaning."""
    copied = frozen_object(SRC / "errors.js", "ERROR_CODES")
    assert copied == {code: kind.meaning for code, kind in errors.ERROR_CODES.items()}
    assert list(copied) == list(errors.ERROR_CODES), "the same order, so a diff reads well"


def test_every_code_is_snake_case_and_every_veil_error_has_one() -> None:
    """One style (snake_case); each VeilError class (py_core's) names a code of the table."""
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", code) for code in errors.ERROR_CODES)
    classes = [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, errors.VeilError)
    ]
    assert len(classes) >= 9
    assert {c.__name__: c.code for c in classes if c.code not in errors.ERROR_CODES} == {}


def test_the_extension_names_only_codes_of_the_table() -> None:
    """errors.js's ErrorCode constants are codes of ERROR_CODES."""
    own = frozen_object(SRC / "errors.js", "ErrorCode")
    assert set(own.values()) <= set(errors.ERROR_CODES), own


def test_the_bridge_sends_only_codes_of_the_table() -> None:
    """Every BridgeError(...) literal is a code of ERROR_CODES; a py_core error goes as its code."""
    tree = ast.parse(Path(veil_bridge.__file__).read_text(encoding="utf-8"))
    codes = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "BridgeError"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]
    assert codes, "no BridgeError(...) found: has the bridge changed how it raises?"
    assert [c for c in codes if c not in errors.ERROR_CODES] == []
    with pytest.raises(ValueError, match="ERROR_CODES"):
        veil_bridge.BridgeError("bad-request", "the former kebab-case code")


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (errors.InvalidParameterError("bad"), "invalid_request"),
        (errors.StateError("corrupted"), "state_conflict"),
        (errors.ProfileError(["no roots"]), "invalid_profile"),
        (errors.DependencyCycleError(["a", "b", "a"]), "invalid_profile"),
        (errors.ExpressionError("1/0"), "invalid_expression"),
        (errors.InsufficientBudgetError("spent", remaining=0.0, requested=1.0), "budget_exhausted"),
    ],
)
def test_a_py_core_error_reaches_the_extension_as_its_code(
    monkeypatch: pytest.MonkeyPatch, exc: errors.VeilError, code: str
) -> None:
    """The bridge sends a VeilError's own code (no class names for the extension to map)."""

    def failing(_args: dict[str, object]) -> dict[str, object]:
        raise exc

    monkeypatch.setitem(veil_bridge.OPS, "ping", failing)
    reply = veil_bridge.json.loads(veil_bridge.handle('{"op": "ping"}'))
    assert reply == {"ok": False, "error": {"code": code, "message": str(exc)}}
