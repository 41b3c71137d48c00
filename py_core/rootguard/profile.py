"""A RootGuard profile: the person's private values as data (JSON).

::

    {
      "format": "veil.rootguard.profile", "version": 1,
      "budget": 13.0,                  # total ε of one sanitization of every root
      "max_total_epsilon": null,       # optional lifetime cap (initialisation + resets)
      "target": "fib4",                # optional: the goal g for Level 2 allocation
      "constants": {"female": 1},      # public numbers formulas may use (never noised)
      "values": {
        "age":       {"quantity": "age", "unit": "years", "domain": [18, 100],
                      "precision": 1, "privacy_unit": 10, "reference": 48,
                      "aliases": ["age", "aged"]},
        "bmi":       {"formula": "bmi"},                       # built-in formula
        "my_ratio":  {"expression": "ast / alt", "quantity": "index", "unit": "",
                      "precision": 0.01}
      }
    }

A value with a ``domain`` is a *root* (sanitized once); one with ``expression``
or ``formula`` is *derived* (computed from noisy roots, never noised).  A value
that declares a domain *and* a formula is a root that depends on others
(Level 1): it is recomputed, not noised, and its domain is only descriptive.
``privacy_unit`` (default: the domain width) is the distance over which the
root's ε holds; ``reference`` (default: the domain midpoint) is a public
population value used for Level 2 sensitivities.

:func:`load_profile` validates everything and raises one :class:`ProfileError`
listing every problem (unknown names, cycles with their path, empty or inverted
domains, unsafe expressions, ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from py_core.errors import DependencyCycleError, ExpressionError, ProfileError, VeilError
from py_core.rootguard.expr import Expression, parse_expression
from py_core.rootguard.formulas import FORMULAS, RiskClasses
from py_core.rootguard.mechanism import Grid
from py_core.rootguard.units import QUANTITIES

__all__ = ["PROFILE_FORMAT", "DerivedSpec", "Profile", "RootSpec", "load_profile"]

PROFILE_FORMAT = "veil.rootguard.profile"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_RESERVED = {"sqrt", "log", "exp", "abs", "min", "max"}
_ROOT_KEYS = {
    "quantity",
    "unit",
    "domain",
    "precision",
    "privacy_unit",
    "reference",
    "aliases",
    "title",
    "formula",
    "expression",
    "risk_classes",
}
_TOP_KEYS = {"format", "version", "budget", "max_total_epsilon", "target", "constants", "values"}


@dataclass(frozen=True, slots=True)
class RootSpec:
    """An independent private value: sanitized once on its grid."""

    name: str
    quantity: str
    unit: str
    grid: Grid
    privacy_unit: float
    reference: float
    aliases: tuple[str, ...]
    title: str

    @property
    def width(self) -> float:
        return self.grid.hi - self.grid.lo


@dataclass(frozen=True, slots=True)
class DerivedSpec:
    """A value computed from others; never noised."""

    name: str
    expression: Expression
    quantity: str
    unit: str
    precision: float
    aliases: tuple[str, ...]
    title: str
    risk_classes: RiskClasses | None
    declared_as_root: bool  # Level 1: declared with a domain but depends on other roots


@dataclass(frozen=True, slots=True)
class Profile:
    """A validated profile; build it with :func:`load_profile`."""

    roots: dict[str, RootSpec]
    derived: dict[str, DerivedSpec]
    order: tuple[str, ...]  # derived names in dependency order
    constants: dict[str, float]
    budget: float
    max_total_epsilon: float | None
    target: str | None
    source: dict[str, Any]

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.roots, *self.order)

    def spec(self, name: str) -> RootSpec | DerivedSpec:
        if name in self.roots:
            return self.roots[name]
        if name in self.derived:
            return self.derived[name]
        raise ProfileError([f"unknown value {name!r}; known: {', '.join(self.names)}"])

    def root_dependencies(self, name: str) -> frozenset[str]:
        """The independent roots ``name`` depends on (itself for a root)."""
        if name in self.roots:
            return frozenset((name,))
        if name in self.constants:
            return frozenset()
        deps: set[str] = set()
        for dep in self.spec(name).expression.names:  # type: ignore[union-attr]
            deps |= self.root_dependencies(dep)
        return frozenset(deps)

    def evaluate_all(self, root_values: Mapping[str, float]) -> dict[str, float]:
        """Every value computable from ``root_values`` (a missing root skips its dependents)."""
        env: dict[str, Any] = dict(self.constants)
        env.update({k: v for k, v in root_values.items() if k in self.roots})
        out = {k: v for k, v in env.items() if k in self.roots}
        for name in self.order:
            spec = self.derived[name]
            if spec.expression.names <= set(env):
                env[name] = spec.expression.evaluate(env)
                out[name] = env[name]
        return out

    def evaluate(self, name: str, root_values: Mapping[str, float]) -> float:
        """The value of ``name`` given the roots it needs."""
        if name in self.roots:
            return root_values[name]
        values = self.evaluate_all(root_values)
        if name not in values:
            missing = sorted(self.root_dependencies(name) - set(root_values))
            raise ProfileError([f"{name!r} needs values for {missing}"])
        return values[name]

    def risk_classes(self, name: str) -> RiskClasses | None:
        spec = self.spec(name)
        return spec.risk_classes if isinstance(spec, DerivedSpec) else None


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: object) -> float | None:
    """``value`` as a float when it is a finite number > 0, else None."""
    if _number(value) and float(value) > 0:  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    return None


def _check_unit(where: str, quantity: object, unit: object, problems: list[str]) -> None:
    if not isinstance(quantity, str) or quantity not in QUANTITIES:
        problems.append(
            f"{where}: quantity {quantity!r} is unknown; use one of {', '.join(sorted(QUANTITIES))}"
        )
    elif unit not in QUANTITIES[quantity].factors:
        problems.append(
            f"{where}: unit {unit!r} is not a unit of {quantity!r}; use one of "
            f"{sorted(QUANTITIES[quantity].factors)}"
        )


def _aliases(
    where: str, raw: object, default: tuple[str, ...], problems: list[str]
) -> tuple[str, ...]:
    if raw is None:
        return default
    if not isinstance(raw, list) or not all(isinstance(a, str) and a.strip() for a in raw):
        problems.append(f"{where}: aliases must be a list of non-empty strings; got {raw!r}")
        return default
    return tuple(a.strip() for a in raw)


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _topological(graph: dict[str, set[str]]) -> tuple[str, ...]:
    order: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        done.add(node)
        for dep in sorted(graph.get(node, ())):
            if dep in graph:
                visit(dep)
        order.append(node)

    for node in sorted(graph):
        visit(node)
    return tuple(order)


def load_profile(data: object) -> Profile:
    """Validate a profile (a JSON-able dict) and return it; raise listing every problem."""
    if isinstance(data, Profile):
        return data
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ProfileError([f"a profile must be a JSON object; got {type(data).__name__}"])
    for key in sorted(set(data) - _TOP_KEYS):
        problems.append(f"unknown top-level key {key!r}; allowed: {', '.join(sorted(_TOP_KEYS))}")
    if data.get("format", PROFILE_FORMAT) != PROFILE_FORMAT:
        problems.append(f"format must be {PROFILE_FORMAT!r}; got {data.get('format')!r}")
    if data.get("version", 1) != 1:
        problems.append(f"version {data.get('version')!r} is not supported (only 1)")
    budget = data.get("budget")
    if _positive(budget) is None:
        problems.append(f"budget must be a finite number > 0 (total ε); got {budget!r}")
    cap = data.get("max_total_epsilon")
    if cap is not None and _positive(cap) is None:
        problems.append(f"max_total_epsilon must be null or a number > 0; got {cap!r}")
    elif cap is not None and _positive(budget) and float(cap) < float(budget):  # type: ignore[arg-type]
        problems.append(
            f"max_total_epsilon ({cap}) is below the budget of one sanitization ({budget})"
        )

    constants: dict[str, float] = {}
    raw_constants = data.get("constants", {})
    if not isinstance(raw_constants, dict):
        problems.append(f"constants must be an object of name -> number; got {raw_constants!r}")
        raw_constants = {}
    for name, value in raw_constants.items():
        if not isinstance(name, str) or not _NAME.match(name) or name in _RESERVED:
            problems.append(f"constant name {name!r} is not a valid identifier")
        elif not _number(value):
            problems.append(f"constant {name!r} must be a finite number; got {value!r}")
        else:
            constants[name] = float(value)

    values = data.get("values")
    if not isinstance(values, dict) or not values:
        problems.append("values must be a non-empty object of name -> specification")
        values = {}

    roots: dict[str, RootSpec] = {}
    derived: dict[str, DerivedSpec] = {}
    for name, raw in values.items():
        where = f"value {name!r}"
        if not isinstance(name, str) or not _NAME.match(name) or name in _RESERVED:
            problems.append(f"{where}: not a valid name (letters, digits, _; not a function name)")
            continue
        if name in constants:
            problems.append(f"{where}: also declared as a constant")
            continue
        if not isinstance(raw, dict):
            problems.append(f"{where}: specification must be an object; got {raw!r}")
            continue
        for key in sorted(set(raw) - _ROOT_KEYS):
            problems.append(f"{where}: unknown key {key!r}")
        formula_name = raw.get("formula")
        source = raw.get("expression")
        if formula_name is not None and source is not None:
            problems.append(f"{where}: give either 'formula' or 'expression', not both")
            continue
        if formula_name is not None or source is not None:
            base = FORMULAS.get(formula_name) if isinstance(formula_name, str) else None
            if formula_name is not None and base is None:
                problems.append(
                    f"{where}: unknown formula {formula_name!r}; built-in: "
                    f"{', '.join(sorted(FORMULAS))}"
                )
                continue
            try:
                expression = parse_expression(base.expression if base else source)
            except ExpressionError as exc:
                problems.append(f"{where}: {exc}")
                continue
            quantity = raw.get("quantity", base.quantity if base else "index")
            unit = raw.get(
                "unit",
                base.unit if base else QUANTITIES.get(str(quantity), QUANTITIES["index"]).canonical,
            )
            _check_unit(where, quantity, unit, problems)
            precision = raw.get("precision", base.precision if base else 0.01)
            if not _number(precision) or precision <= 0:
                problems.append(f"{where}: precision must be a number > 0; got {precision!r}")
                precision = 0.01
            risk: RiskClasses | None = base.risk_classes if base else None
            if "risk_classes" in raw:
                try:
                    risk = RiskClasses.from_dict(raw["risk_classes"])
                except VeilError as exc:
                    problems.append(f"{where}: {exc}")
            derived[name] = DerivedSpec(
                name=name,
                expression=expression,
                quantity=str(quantity),
                unit=str(unit),
                precision=float(precision),
                aliases=_aliases(
                    where, raw.get("aliases"), base.aliases if base else (name,), problems
                ),
                title=str(raw.get("title", base.title if base else name)),
                risk_classes=risk,
                declared_as_root="domain" in raw,
            )
            continue
        # An independent root.
        quantity, unit = raw.get("quantity"), raw.get("unit")
        _check_unit(where, quantity, unit, problems)
        domain = raw.get("domain")
        if not (isinstance(domain, list) and len(domain) == 2 and all(_number(x) for x in domain)):
            problems.append(f"{where}: domain must be [lo, hi] with finite numbers; got {domain!r}")
            continue
        lo, hi = float(domain[0]), float(domain[1])
        if not lo < hi:
            problems.append(
                f"{where}: domain [{domain[0]}, {domain[1]}] is empty or inverted (need lo < hi)"
            )
            continue
        precision = _positive(raw.get("precision"))
        if precision is None:
            problems.append(
                f"{where}: precision must be a number > 0 (e.g. 0.1); got {raw.get('precision')!r}"
            )
            continue
        try:
            grid = Grid(lo, hi, precision)
        except VeilError as exc:
            problems.append(f"{where}: {exc}")
            continue
        privacy_unit = _positive(raw.get("privacy_unit", hi - lo))
        if privacy_unit is None:
            problems.append(
                f"{where}: privacy_unit must be a number > 0; got {raw.get('privacy_unit')!r}"
            )
            continue
        reference = raw.get("reference", (lo + hi) / 2)
        if not _number(reference) or not lo <= reference <= hi:
            problems.append(
                f"{where}: reference must be a number inside the domain; got {reference!r}"
            )
            continue
        roots[name] = RootSpec(
            name=name,
            quantity=str(quantity),
            unit=str(unit),
            grid=grid,
            privacy_unit=float(privacy_unit),
            reference=float(reference),
            aliases=_aliases(where, raw.get("aliases"), (name,), problems),
            title=str(raw.get("title", name)),
        )

    known = set(roots) | set(derived) | set(constants)
    graph: dict[str, set[str]] = {}
    for name, spec in derived.items():
        unknown = sorted(spec.expression.names - known)
        if unknown:
            problems.append(f"value {name!r}: formula uses unknown name(s) {unknown}")
        graph[name] = set(spec.expression.names) & set(derived)
    cycle = _find_cycle(graph)
    if cycle:
        problems.append(f"dependency cycle: {' -> '.join(cycle)}")

    target = data.get("target")
    if target is not None and (not isinstance(target, str) or target not in known - set(constants)):
        problems.append(f"target {target!r} is not a declared value")

    if problems:
        if cycle:
            raise DependencyCycleError(cycle, problems)
        raise ProfileError(problems)
    order = _topological(graph)
    profile = Profile(
        roots=roots,
        derived=derived,
        order=order,
        constants=constants,
        budget=float(budget),  # type: ignore[arg-type]
        max_total_epsilon=None if cap is None else float(cap),
        target=target,
        source=data,
    )
    # Every derived value must evaluate at the reference point (catches log(<0), ...).
    reference = {name: spec.reference for name, spec in roots.items()}
    try:
        profile.evaluate_all(reference)
    except ExpressionError as exc:
        raise ProfileError([f"a formula fails at the reference point: {exc}"]) from None
    return profile
