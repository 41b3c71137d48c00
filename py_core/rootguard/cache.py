"""The sanitized cache: each root drawn once, every later answer computed from it.

:class:`RootCache` holds, per independent root, the noisy grid index drawn by
its :class:`~py_core.rootguard.mechanism.DiscreteLaplaceMechanism` and the
parameters it was drawn with, plus a ledger of every draw (what was spent, when
in sequence, why).  :meth:`RootCache.value` answers a root from the cache and a
derived value as ``f(noisy roots)``; nothing draws noise except
:meth:`RootCache.draw` (roots with no cached value yet) and
:meth:`RootCache.reset` (an explicit re-draw that spends budget again).

The state serializes to JSON (:meth:`RootCache.to_dict`) with a SHA-256
checksum over a canonical form that survives a JavaScript round trip (``13.0``
and ``13`` are the same number).  :meth:`RootCache.from_dict` refuses a
corrupted state, or one drawn for different mechanism parameters, with a
:class:`StateError` that lists every problem; it never re-draws.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from py_core.accounting import Ledger, PureDpEvent
from py_core.errors import InsufficientBudgetError, InvalidParameterError, StateError
from py_core.rootguard.allocation import allocate
from py_core.rootguard.mechanism import DiscreteLaplaceMechanism, RandomSource
from py_core.rootguard.profile import Profile, RootSpec

__all__ = ["STATE_FORMAT", "CachedRoot", "RootCache", "canonical_json"]

STATE_FORMAT = "veil.rootguard.state"
_TOLERANCE = 1e-9


def _canonical(obj: Any) -> Any:
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int | float):
        value = float(obj)
        if not math.isfinite(value):
            raise StateError(f"state holds a non-finite number ({obj!r})")
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value
    if isinstance(obj, list | tuple):
        return [_canonical(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in obj.items()}
    raise StateError(f"state holds a value of type {type(obj).__name__}, which JSON cannot carry")


def canonical_json(obj: Any) -> str:
    """A canonical JSON text of ``obj``: sorted keys, integral floats written as integers."""
    return json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _checksum(body: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()


def _close(a: object, b: float) -> bool:
    return (
        isinstance(a, int | float)
        and not isinstance(a, bool)
        and math.isfinite(a)
        and abs(a - b) <= _TOLERANCE * max(1.0, abs(b))
    )


@dataclass(frozen=True, slots=True)
class CachedRoot:
    """One root's noisy value and the parameters it was drawn with."""

    index: int
    epsilon: float
    domain: tuple[float, float]
    precision: float
    privacy_unit: float

    @staticmethod
    def parameters(spec: RootSpec, epsilon: float) -> dict[str, Any]:
        return {
            "epsilon": epsilon,
            "domain": [spec.grid.lo, spec.grid.hi],
            "precision": spec.grid.step,
            "privacy_unit": spec.privacy_unit,
        }

    def mismatches(self, spec: RootSpec, epsilon: float) -> list[str]:
        """How this cached draw differs from what the profile now specifies."""
        problems = []
        # A draw at a smaller ε than now allocated is at least as private: it is kept (the
        # ledger records what it cost).  One at a larger ε than now allowed is refused.
        if self.epsilon > epsilon * (1 + _TOLERANCE):
            problems.append(
                f"epsilon {self.epsilon:g}, more than the profile now allows ({epsilon:g})"
            )
        if not (_close(self.domain[0], spec.grid.lo) and _close(self.domain[1], spec.grid.hi)):
            problems.append(
                f"domain [{self.domain[0]:g}, {self.domain[1]:g}] (profile now [{spec.grid.lo:g}, {spec.grid.hi:g}])"
            )
        if not _close(self.precision, spec.grid.step):
            problems.append(f"precision {self.precision:g} (profile now {spec.grid.step:g})")
        if not _close(self.privacy_unit, spec.privacy_unit):
            problems.append(
                f"privacy_unit {self.privacy_unit:g} (profile now {spec.privacy_unit:g})"
            )
        return problems


@dataclass
class RootCache:
    """Noisy roots of one profile, the allocation they were drawn with, and the ledger."""

    profile: Profile
    allocation: dict[str, float]
    roots: dict[str, CachedRoot] = field(default_factory=dict)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    # Drifted values: per root, the grid index of a value the person wrote that is not
    # the stored one -> its own draw (made once, reused whenever that value recurs).
    drifts: dict[str, dict[int, CachedRoot]] = field(default_factory=dict)

    @classmethod
    def empty(cls, profile: Profile) -> RootCache:
        return cls(profile=profile, allocation=allocate(profile))

    # -- spending ---------------------------------------------------------------------------
    def privacy_ledger(self) -> Ledger:
        """The draws as privacy events (one pure-DP discrete Laplace release per root and draw)."""
        out = Ledger()
        for entry in self.ledger:
            for name, eps in entry["epsilon"].items():
                out.record(PureDpEvent(float(eps)), root=name, seq=str(entry["seq"]))
        return out

    @property
    def total_spent(self) -> float:
        """ε per privacy unit spent so far, by basic composition over every draw."""
        return self.privacy_ledger().epsilon(0.0, "basic")

    def mechanism(self, name: str) -> DiscreteLaplaceMechanism:
        spec = self.profile.roots[name]
        return DiscreteLaplaceMechanism(spec.grid, self.allocation[name], spec.privacy_unit)

    def _check_cap(self, names: list[str], requested: float) -> None:
        cap = self.profile.max_total_epsilon
        if cap is not None and self.total_spent + requested > cap * (1 + 1e-12):
            remaining = max(0.0, cap - self.total_spent)
            raise InsufficientBudgetError(
                f"drawing {', '.join(names)} would spend ε={requested:g} but only "
                f"{remaining:g} of the lifetime cap {cap:g} remains; nothing was drawn",
                remaining=remaining,
                requested=requested,
            )

    def _record(self, event: str, cost: dict[str, float]) -> dict[str, Any]:
        requested = sum(cost.values())
        entry = {
            "seq": len(self.ledger) + 1,
            "event": event,
            "epsilon": cost,
            "spent": requested,
            "total_spent": self.total_spent + requested,
        }
        self.ledger.append(entry)
        return entry

    def _cached(self, name: str, index: int) -> CachedRoot:
        params = CachedRoot.parameters(self.profile.roots[name], self.allocation[name])
        return CachedRoot(
            index=index,
            epsilon=params["epsilon"],
            domain=(params["domain"][0], params["domain"][1]),
            precision=params["precision"],
            privacy_unit=params["privacy_unit"],
        )

    def _spend(
        self,
        names: list[str],
        true_values: Mapping[str, float],
        rng: RandomSource,
        event: str,
    ) -> dict[str, Any] | None:
        if not names:
            return None
        cost = {name: self.allocation[name] for name in names}
        requested = sum(cost.values())
        self._check_cap(names, requested)
        # Draw everything first; the cache changes only if every draw succeeded.
        drawn = {}
        for name in names:
            value = _true_value(name, true_values)
            drawn[name] = self.mechanism(name).release_index(value, rng)
        for name, index in drawn.items():
            self.roots[name] = self._cached(name, index)
        return self._record(event, cost)

    # -- drifted values ---------------------------------------------------------------------
    def true_index(self, name: str, value: float) -> int:
        """The grid index ``value`` of root ``name`` snaps to (what a drift is cached under)."""
        return self.profile.roots[name].grid.snap(value)

    def drift(
        self, name: str, value: float, rng: RandomSource, *, event: str = "drift"
    ) -> tuple[float, bool]:
        """The noisy value of root ``name`` written as ``value`` (not its stored value).

        Drawn once with the root's mechanism, cached under ``value``'s grid index and
        recorded in the ledger; the same value later reuses the draw.  Returns the noisy
        value and whether it was drawn now.
        """
        if name not in self.profile.roots:
            raise InvalidParameterError(_not_a_root(self.profile, name))
        grid = self.profile.roots[name].grid
        key = self.true_index(name, value)
        cached = self.drifts.get(name, {}).get(key)
        if cached is not None:
            return grid.value(cached.index), False
        cost = {name: self.allocation[name]}
        self._check_cap([name], cost[name])
        index = self.mechanism(name).release_index(grid.value(key), rng)
        self.drifts.setdefault(name, {})[key] = self._cached(name, index)
        self._record(event, cost)
        return grid.value(index), True

    def adopt(
        self,
        name: str,
        value: float,
        old_value: float | None,
        rng: RandomSource,
        *,
        event: str = "add",
    ) -> bool:
        """Make ``value`` root ``name``'s stored value; True when this drew (spent) anew.

        A draw already cached for ``value`` (the person wrote it before) becomes the
        root's draw at no cost; otherwise it is drawn once and recorded under ``event``.
        The draw of ``old_value`` (if any) stays cached as a drift of it, so writing the
        old value again still reuses its draw.  Nothing else changes.
        """
        if name not in self.profile.roots:
            raise InvalidParameterError(_not_a_root(self.profile, name))
        key = self.true_index(name, value)
        previous = self.roots.get(name)
        if (
            previous is not None
            and old_value is not None
            and self.true_index(name, old_value) == key
        ):
            return False
        drawn_now = False
        taken = self.drifts.get(name, {}).pop(key, None)
        if taken is None:
            cost = {name: self.allocation[name]}
            self._check_cap([name], cost[name])
            grid = self.profile.roots[name].grid
            taken = self._cached(name, self.mechanism(name).release_index(grid.value(key), rng))
            self._record(event, cost)
            drawn_now = True
        if previous is not None:
            if old_value is None:
                raise StateError(
                    f"{name!r} has a cached draw but no stored true value; reset it explicitly"
                )
            self.drifts.setdefault(name, {})[self.true_index(name, old_value)] = previous
        self.roots[name] = taken
        if not self.drifts.get(name):
            self.drifts.pop(name, None)
        return drawn_now

    def draw(
        self,
        true_values: Mapping[str, float],
        rng: RandomSource,
        *,
        names: Iterable[str] | None = None,
        event: str = "draw",
    ) -> dict[str, Any] | None:
        """Sanitize every root (of ``names``) that has a true value and no cached value yet."""
        wanted = list(self.profile.roots) if names is None else list(names)
        for name in wanted:
            if name not in self.profile.roots:
                raise InvalidParameterError(_not_a_root(self.profile, name))
        todo = [n for n in wanted if n not in self.roots and true_values.get(n) is not None]
        return self._spend(todo, true_values, rng, event)

    def reset(
        self,
        true_values: Mapping[str, float],
        rng: RandomSource,
        *,
        names: Iterable[str] | None = None,
    ) -> dict[str, Any] | None:
        """Re-draw ``names`` (default: every root with a true value); spends budget again."""
        wanted = (
            [n for n in self.profile.roots if true_values.get(n) is not None]
            if names is None
            else list(names)
        )
        for name in wanted:
            if name not in self.profile.roots:
                raise InvalidParameterError(_not_a_root(self.profile, name))
            if true_values.get(name) is None:
                raise InvalidParameterError(
                    f"cannot reset {name!r}: no true value given for it (nothing was drawn)"
                )
        for name in wanted:  # a reset starts the root over: its drifted draws go too
            self.drifts.pop(name, None)
        return self._spend(wanted, true_values, rng, "reset")

    # -- answering --------------------------------------------------------------------------
    def root_values(self) -> dict[str, float]:
        return {
            name: self.profile.roots[name].grid.value(root.index)
            for name, root in self.roots.items()
        }

    def value(self, name: str) -> float:
        """The cached noisy root, or ``f(noisy roots)`` for a derived value. Draws nothing."""
        spec = self.profile.spec(name)
        missing = sorted(self.profile.root_dependencies(spec.name) - set(self.roots))
        if missing:
            raise InvalidParameterError(
                f"no noisy value for {name!r} yet: root(s) {missing} have not been sanitized "
                "(give their true values to draw them once)"
            )
        return self.profile.evaluate(name, self.root_values())

    def values(self) -> dict[str, float]:
        """Every value computable from the cached roots."""
        return self.profile.evaluate_all(self.root_values())

    # -- persistence ------------------------------------------------------------------------
    def _drawn(self, name: str, root: CachedRoot) -> dict[str, Any]:
        """One drawn value of root ``name`` as the state stores it."""
        return {
            "index": root.index,
            "value": self.profile.roots[name].grid.value(root.index),
            "epsilon": root.epsilon,
            "domain": list(root.domain),
            "precision": root.precision,
            "privacy_unit": root.privacy_unit,
        }

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "format": STATE_FORMAT,
            "version": 1,
            "roots": {name: self._drawn(name, root) for name, root in sorted(self.roots.items())},
            "ledger": [dict(entry) for entry in self.ledger],
        }
        if any(self.drifts.values()):  # absent when empty: older states keep their checksum
            body["drifts"] = {
                name: {str(key): self._drawn(name, root) for key, root in sorted(entries.items())}
                for name, entries in sorted(self.drifts.items())
                if entries
            }
        body = _canonical(body)
        body["checksum"] = _checksum(body)
        return body

    @classmethod
    def from_dict(
        cls,
        profile: Profile,
        data: object,
        *,
        tolerate_mismatch: Iterable[str] = (),
    ) -> RootCache:
        """Restore a state saved by :meth:`to_dict`; refuse it with every problem listed.

        Roots in ``tolerate_mismatch`` may differ from the profile (they are about to
        be reset); they are dropped from the cache instead of refused.
        """
        allocation = allocate(profile)
        problems: list[str] = []
        if not isinstance(data, dict):
            raise StateError(f"RootGuard state must be a JSON object; got {type(data).__name__}")
        if data.get("format") != STATE_FORMAT or data.get("version") != 1:
            raise StateError(
                f"not a RootGuard state (format {data.get('format')!r}, version "
                f"{data.get('version')!r}; expected {STATE_FORMAT!r} version 1)"
            )
        body = {k: v for k, v in data.items() if k != "checksum"}
        try:
            expected = _checksum(body)
        except StateError as exc:
            raise StateError(f"RootGuard state is corrupted: {exc}") from None
        if data.get("checksum") != expected:
            raise StateError(
                "RootGuard state is corrupted (checksum mismatch): it was changed outside "
                "Veil or damaged in storage; it was not used and nothing was re-drawn. "
                "Restore a backup, or reset the values explicitly (this spends budget)."
            )
        tolerated = set(tolerate_mismatch)
        roots: dict[str, CachedRoot] = {}
        raw_roots = data.get("roots")
        if not isinstance(raw_roots, dict):
            raise StateError("RootGuard state is corrupted: 'roots' is not an object")
        for name, raw in raw_roots.items():
            if name not in profile.roots:
                if name not in tolerated:
                    problems.append(
                        f"state holds a noisy value for {name!r}, which the profile does not "
                        "declare as an independent root"
                    )
                continue
            root = _parse_root(
                profile, allocation, name, raw, f"root {name!r}", problems, tolerated
            )
            if root is not None:
                roots[name] = root
        drifts: dict[str, dict[int, CachedRoot]] = {}
        raw_drifts = data.get("drifts", {})
        if not isinstance(raw_drifts, dict) or not all(
            isinstance(v, dict) for v in raw_drifts.values()
        ):
            problems.append("'drifts' is not an object of root -> {value index: draw}")
            raw_drifts = {}
        for name, entries in raw_drifts.items():
            if name not in profile.roots:
                if name not in tolerated:
                    problems.append(
                        f"state holds drifted draws of {name!r}, which the profile does not "
                        "declare as an independent root"
                    )
                continue
            for key, raw in entries.items():
                where = f"a drifted draw of {name!r}"
                try:
                    true_index = int(key)
                except ValueError:
                    problems.append(f"{where}: key {key!r} is not a grid index")
                    continue
                if not profile.roots[name].grid.contains(true_index):
                    if name not in tolerated:
                        problems.append(f"{where}: its value is outside the domain's grid")
                    continue
                root = _parse_root(profile, allocation, name, raw, where, problems, tolerated)
                if root is not None:
                    drifts.setdefault(name, {})[true_index] = root
        ledger = data.get("ledger")
        if not isinstance(ledger, list):
            problems.append("ledger is not a list")
            ledger = []
        running = 0.0
        for position, entry in enumerate(ledger, start=1):
            if not isinstance(entry, dict) or entry.get("seq") != position:
                problems.append(f"ledger entry {position} is malformed or out of sequence")
                continue
            eps = entry.get("epsilon")
            spent = entry.get("spent")
            if not isinstance(eps, dict) or not _close(spent, sum(eps.values())):
                problems.append(f"ledger entry {position}: 'spent' does not match its epsilons")
                continue
            running += float(spent)  # type: ignore[arg-type]
            if not _close(entry.get("total_spent"), running):
                problems.append(f"ledger entry {position}: 'total_spent' does not add up")
        if problems:
            raise StateError(
                "RootGuard state does not match the profile; nothing was re-drawn:\n"
                + "\n".join(f"  - {p}" for p in problems)
            )
        return cls(
            profile=profile,
            allocation=allocation,
            roots=roots,
            ledger=[dict(e) for e in ledger],
            drifts=drifts,
        )


def _parse_root(
    profile: Profile,
    allocation: Mapping[str, float],
    name: str,
    raw: object,
    where: str,
    problems: list[str],
    tolerated: set[str],
) -> CachedRoot | None:
    """One stored draw of root ``name``, checked against the profile; None when refused."""
    spec = profile.roots[name]
    try:
        root = CachedRoot(
            index=raw["index"],  # type: ignore[index]
            epsilon=float(raw["epsilon"]),  # type: ignore[index]
            domain=(float(raw["domain"][0]), float(raw["domain"][1])),  # type: ignore[index]
            precision=float(raw["precision"]),  # type: ignore[index]
            privacy_unit=float(raw["privacy_unit"]),  # type: ignore[index]
        )
    except (KeyError, TypeError, ValueError, IndexError):
        problems.append(f"{where}: malformed entry {raw!r}")
        return None
    mismatch = root.mismatches(spec, allocation[name])
    if isinstance(root.index, bool) or not isinstance(root.index, int):
        mismatch.append(f"index {root.index!r} is not an integer")
    elif not spec.grid.contains(root.index):
        mismatch.append(f"index {root.index} is outside the domain's grid")
    if mismatch:
        if name not in tolerated:
            problems.append(
                f"{where} was drawn with "
                + "; ".join(mismatch)
                + f" -- reset {name!r} explicitly to redraw it (spends ε again)"
            )
        return None
    return root


def _true_value(name: str, true_values: Mapping[str, float]) -> float:
    value = true_values.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidParameterError(
            f"true value of {name!r} must be a finite number; got {value!r}"
        )
    return float(value)


def _not_a_root(profile: Profile, name: str) -> str:
    if name in profile.derived:
        return (
            f"{name!r} is derived from {sorted(profile.root_dependencies(name))}; it is never "
            "drawn itself (reset its roots instead)"
        )
    return f"{name!r} is not an independent root of the profile; roots: {', '.join(profile.roots)}"
