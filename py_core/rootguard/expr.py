"""A safe evaluator for arithmetic formulas over named values, built on :mod:`ast`.

Formulas in a profile are data (JSON), so they are parsed, never ``eval``-ed.
Only this whitelist is accepted:

* numbers (int or float literals; not ``True``/``False``, not complex),
* names (values of the profile),
* binary ``+ - * / **`` and unary ``- +``,
* calls of ``sqrt``, ``log``, ``exp``, ``abs`` (one argument) and ``min``, ``max``
  (two or more), by plain name with positional arguments.

Everything else -- attribute access, subscripts, other calls, keywords, lambdas,
comparisons, strings -- is refused with the offending construct named.  Size is
bounded (source length, node count, nesting depth) and a constant exponent must
be at most :data:`MAX_CONSTANT_EXPONENT` in magnitude; evaluation is in floating
point, so a huge power overflows into a clear :class:`ExpressionError` rather than
a giant integer.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from py_core.errors import ExpressionError

__all__ = [
    "FUNCTIONS",
    "MAX_CONSTANT_EXPONENT",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_SOURCE_LENGTH",
    "Expression",
    "parse_expression",
]

MAX_SOURCE_LENGTH = 1000
MAX_NODES = 200
MAX_DEPTH = 30
MAX_CONSTANT_EXPONENT = 64

_ARITY: dict[str, tuple[int, int | None]] = {
    "sqrt": (1, 1),
    "log": (1, 1),
    "exp": (1, 1),
    "abs": (1, 1),
    "min": (2, None),
    "max": (2, None),
}


def _sqrt(x: float) -> float:
    if x < 0:
        raise ExpressionError(f"sqrt of a negative number ({x!r})")
    return math.sqrt(x)


def _log(x: float) -> float:
    if x <= 0:
        raise ExpressionError(f"log of a non-positive number ({x!r})")
    return math.log(x)


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        raise ExpressionError(f"exp({x!r}) overflows") from None


#: The functions formulas may call, as plain-Python implementations.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": _sqrt,
    "log": _log,
    "exp": _exp,
    "abs": abs,
    "min": min,
    "max": max,
}

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


@dataclass(frozen=True, slots=True)
class Expression:
    """A parsed, validated formula; evaluate it with :meth:`evaluate`."""

    source: str
    names: frozenset[str]
    _tree: ast.expr = field(repr=False, compare=False)

    def evaluate(
        self,
        values: Mapping[str, Any],
        *,
        functions: Mapping[str, Callable[..., Any]] | None = None,
    ) -> Any:
        """The formula's value given ``values`` for its names.

        ``functions`` replaces the plain-Python implementations (evaluations pass
        numpy's to evaluate on arrays; the core never does).
        """
        missing = sorted(self.names - set(values))
        if missing:
            raise ExpressionError(f"formula {self.source!r} needs values for {missing}")
        funcs = FUNCTIONS if functions is None else functions
        try:
            return _eval(self._tree, values, funcs)
        except ZeroDivisionError:
            raise ExpressionError(f"division by zero in {self.source!r}") from None
        except OverflowError:
            raise ExpressionError(f"overflow evaluating {self.source!r}") from None
        except (ValueError, TypeError) as exc:
            if isinstance(exc, ExpressionError):
                raise
            raise ExpressionError(f"cannot evaluate {self.source!r}: {exc}") from None


def _eval(
    node: ast.expr, values: Mapping[str, Any], funcs: Mapping[str, Callable[..., Any]]
) -> Any:
    if isinstance(node, ast.Constant):
        return float(node.value)  # type: ignore[arg-type]  # checked numeric at parse time
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values, funcs)
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, values, funcs)
        right = _eval(node.right, values, funcs)
        op = node.op
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.Div):
            return left / right
        result = left**right
        if isinstance(result, complex):
            raise ExpressionError(f"negative number {left!r} raised to a fractional power")
        if isinstance(result, float) and math.isinf(result):
            raise OverflowError
        return result
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    args = [_eval(arg, values, funcs) for arg in node.args]
    return funcs[node.func.id](*args)


def _is_number(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    )


def _constant_value(node: ast.expr) -> float | None:
    """The value of a constant exponent such as ``2``, ``-1.2`` or ``(0.5)``; else None."""
    if _is_number(node):
        assert isinstance(node, ast.Constant) and isinstance(node.value, int | float)
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _constant_value(node.operand)
        if inner is None:
            return None
        return -inner if isinstance(node.op, ast.USub) else inner
    return None


def _check(node: ast.AST, problems: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        problems.append(f"nested deeper than {MAX_DEPTH} levels")
        return
    if isinstance(node, ast.Constant):
        if not _is_number(node):
            problems.append(f"constant {node.value!r} is not a number")
        elif not math.isfinite(float(node.value)):  # type: ignore[arg-type]
            problems.append(f"constant {node.value!r} is not finite")
        return
    if isinstance(node, ast.Name):
        if node.id in _ARITY:
            problems.append(f"function name {node.id!r} used as a value")
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub | ast.UAdd):
            problems.append(f"unary operator {type(node.op).__name__} is not allowed")
        _check(node.operand, problems, depth + 1)
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            problems.append(f"operator {type(node.op).__name__} is not allowed (only + - * / **)")
        if isinstance(node.op, ast.Pow):
            exponent = _constant_value(node.right)
            if exponent is not None and abs(exponent) > MAX_CONSTANT_EXPONENT:
                problems.append(
                    f"exponent {exponent:g} is too large (at most {MAX_CONSTANT_EXPONENT})"
                )
            if isinstance(node.right, ast.BinOp) and isinstance(node.right.op, ast.Pow):
                problems.append("a power of a power (a ** b ** c) is not allowed")
        _check(node.left, problems, depth + 1)
        _check(node.right, problems, depth + 1)
        return
    if isinstance(node, ast.Call):
        func = node.func
        if not isinstance(func, ast.Name):
            kind = "attribute access" if isinstance(func, ast.Attribute) else "a computed callee"
            problems.append(f"call through {kind} is not allowed")
        elif func.id not in _ARITY:
            problems.append(
                f"function {func.id!r} is not allowed (allowed: {', '.join(sorted(_ARITY))})"
            )
        else:
            low, high = _ARITY[func.id]
            n = len(node.args)
            if n < low or (high is not None and n > high):
                want = f"{low}" if low == high else f"at least {low}"
                problems.append(f"{func.id}() takes {want} argument(s), got {n}")
        if node.keywords:
            problems.append("keyword arguments are not allowed")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                problems.append("starred arguments are not allowed")
            else:
                _check(arg, problems, depth + 1)
        return
    if isinstance(node, ast.Attribute):
        problems.append(f"attribute access ('.{node.attr}') is not allowed")
        return
    if isinstance(node, ast.Subscript):
        problems.append("subscripts ('[...]') are not allowed")
        return
    problems.append(f"{type(node).__name__} is not allowed in a formula")


def _names(tree: ast.AST) -> frozenset[str]:
    called = {
        id(n.func)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    return frozenset(
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called
    )


def parse_expression(source: object) -> Expression:
    """Parse and validate ``source``; raise :class:`ExpressionError` listing every problem."""
    if not isinstance(source, str):
        raise ExpressionError(f"a formula must be a string; got {type(source).__name__}")
    text = source.strip()
    if not text:
        raise ExpressionError("a formula must not be empty")
    if len(text) > MAX_SOURCE_LENGTH:
        raise ExpressionError(
            f"formula is {len(text)} characters long; at most {MAX_SOURCE_LENGTH} are allowed"
        )
    try:
        module = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"formula {text!r} is not valid syntax: {exc.msg}") from None
    count = sum(1 for _ in ast.walk(module.body))
    if count > MAX_NODES:
        raise ExpressionError(f"formula {text!r} has {count} nodes; at most {MAX_NODES}")
    problems: list[str] = []
    _check(module.body, problems, 0)
    if problems:
        raise ExpressionError(f"unsafe formula {text!r}: " + "; ".join(dict.fromkeys(problems)))
    return Expression(source=text, names=_names(module.body), _tree=module.body)
