"""The extension's JavaScript and the bridge agree on op names and error codes.

``extension/src/core-ops.js`` names every op the extension calls; it must list
exactly the keys of ``OPS`` in ``extension/python/veil_bridge.py``.  Error codes
are kebab-case: the bridge's own, and py_core's VeilError class names mapped in
``extension/src/errors.js``.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

from py_core import errors

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "extension" / "src"
sys.path.insert(0, str(ROOT / "extension" / "python"))

import veil_bridge  # noqa: E402

KEBAB = re.compile(r"^[a-z]+(-[a-z]+)*$")


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


def test_every_veil_error_class_has_a_kebab_code() -> None:
    mapped = frozen_object(SRC / "errors.js", "CORE_ERROR_CODES")
    classes = {
        name
        for name, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, errors.VeilError)
    }
    assert classes <= set(mapped), f"errors.js does not map {sorted(classes - set(mapped))}"
    assert all(KEBAB.match(code) for code in mapped.values()), mapped


def test_the_bridges_own_codes_are_kebab_case() -> None:
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
    assert [c for c in codes if not KEBAB.match(c)] == []
    # And the ones the extension names itself are kebab-case too.
    own = frozen_object(SRC / "errors.js", "ErrorCode")
    assert all(KEBAB.match(code) for code in own.values()), own
