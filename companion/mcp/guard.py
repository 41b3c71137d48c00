"""What agents may learn of the person's values: noisy values, drawn once, never the true ones.

:class:`CachedNoise` is RootGuard over one record: ``noisy(name)`` answers a root
from the cache and a derived value as ``f(noisy roots)``; a root with a true value
and no cached draw yet is drawn once (CSPRNG, recorded in the ledger).  The
proxy's argument rewriter (:mod:`companion.mcp.rewrite`) and the server's tools
(:class:`Guard`) both ask it; the evaluation gives the rewriter other noise
sources with the same two members (M-All: a fresh draw per disclosure).

:class:`Guard` runs every operation under the record's lock and saves the state
before the answer leaves (a noisy value that was shown is never lost, so it is
never re-drawn).  Its answers carry noisy values only: no result and no error
message holds a true value.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from companion.mcp.record import RecordStore
from py_core.errors import InvalidParameterError, VeilError
from py_core.protect import HEADER_NONE, RootGuardSetup, SiteSettings, protect
from py_core.rootguard import api
from py_core.rootguard.cache import RootCache
from py_core.rootguard.expr import parse_expression
from py_core.rootguard.formulas import FORMULAS
from py_core.rootguard.mechanism import RandomSource, resolve_rng
from py_core.rootguard.profile import DerivedSpec, Profile, load_profile

__all__ = ["CachedNoise", "Guard", "NoiseSource", "decimals_of", "round_to_precision"]


class NoiseSource(Protocol):
    """What the rewriter needs: the profile, the true values, and a noisy value per name."""

    profile: Profile
    truth: Mapping[str, float]  # true roots and the derived values computed from them

    def noisy(self, name: str) -> float: ...


def decimals_of(step: float) -> int:
    """Decimals needed to write multiples of ``step`` (0.1 -> 1, 0.01 -> 2, 5 -> 0)."""
    text = f"{step:.10f}".rstrip("0")
    return len(text.split(".", 1)[1]) if "." in text else 0


def precision_of(profile: Profile, name: str) -> float:
    spec = profile.spec(name)
    return spec.precision if isinstance(spec, DerivedSpec) else spec.grid.step


def round_to_precision(profile: Profile, name: str, value: float) -> float:
    """``value`` written at the value's declared precision (post-processing)."""
    return round(value, decimals_of(precision_of(profile, name)))


class CachedNoise:
    """RootGuard over one record: every answer from the one cached draw per root."""

    def __init__(
        self,
        profile: Mapping[str, Any],
        true_values: Mapping[str, float],
        state: Mapping[str, Any],
        *,
        rng: object = None,
        secure: bool = True,
    ) -> None:
        self.profile = load_profile(copy.deepcopy(dict(profile)))
        self._roots = {k: float(v) for k, v in true_values.items() if k in self.profile.roots}
        self.truth = self.profile.evaluate_all(self._roots)
        self._cache = RootCache.from_dict(self.profile, copy.deepcopy(dict(state)))
        self._rng: RandomSource = resolve_rng(rng, secure=secure)
        self.drawn: list[str] = []

    @classmethod
    def fresh(
        cls,
        profile: Profile,
        true_values: Mapping[str, float],
        *,
        rng: object,
        secure: bool,
        allocation: Mapping[str, float] | None = None,
    ) -> CachedNoise:
        """An empty cache for ``profile`` (the evaluation: one per agent session), drawn with
        ``allocation`` (default: the profile's own split of its budget)."""
        out = cls.__new__(cls)
        out.profile = profile
        out._roots = {k: float(v) for k, v in true_values.items() if k in profile.roots}
        out.truth = profile.evaluate_all(out._roots)
        out._cache = (
            RootCache.empty(profile)
            if allocation is None
            else RootCache(profile=profile, allocation=dict(allocation))
        )
        out._rng = resolve_rng(rng, secure=secure)
        out.drawn = []
        return out

    @property
    def cache(self) -> RootCache:
        return self._cache

    def ensure(self, name: str) -> None:
        """Draw, once, the roots ``name`` needs that have a true value and no cached value."""
        missing = sorted(self.profile.root_dependencies(name) - set(self._cache.roots))
        todo = [n for n in missing if n in self._roots]
        if todo:
            self._cache.draw(self._roots, self._rng, names=todo, event="draw")
            self.drawn += todo

    def noisy(self, name: str) -> float:
        self.ensure(name)
        undeclared = sorted(
            self.profile.root_dependencies(name) - set(self._cache.roots) - set(self._roots)
        )
        if undeclared:
            raise InvalidParameterError(
                f"{name!r} needs {', '.join(undeclared)}, which the person has not declared "
                "(no true value in the record); there is no noisy value to give"
            )
        return self._cache.value(name)

    def state(self) -> dict[str, Any]:
        return self._cache.to_dict()


class Guard:
    """The MCP server's tools over the person's record (see the module docstring)."""

    def __init__(self, store: RecordStore) -> None:
        self.store = store

    @contextlib.contextmanager
    def noise(self, reason: str) -> Iterator[CachedNoise]:
        """A :class:`CachedNoise` over the record; new draws are saved when the block ends."""
        with self.store.update() as box:
            record = box.record
            source = CachedNoise(record.profile, record.true_values, record.state)
            yield source
            if source.drawn:
                box.record = record.with_state(
                    source.state(), "drawn", f"{reason}: {', '.join(source.drawn)}"
                )

    # -- tools ------------------------------------------------------------------------------
    def get_value(self, name: str) -> dict[str, Any]:
        with self.noise(f"get_value {name}") as source:
            if name not in source.profile.names:
                raise InvalidParameterError(
                    f"{name!r} is not one of the person's values; known: "
                    + ", ".join(source.profile.names)
                )
            value = source.noisy(name)
            return _answer(source.profile, name, value)

    def compute(self, expression: str) -> dict[str, Any]:
        """A formula name (the profile's or a built-in one) or a safe expression over values."""
        with self.noise("compute") as source:
            prof = source.profile
            text = expression.strip()
            if text in prof.names:
                return _answer(prof, text, source.noisy(text))
            source_text = FORMULAS[text].expression if text in FORMULAS else text
            parsed = parse_expression(source_text)
            unknown = sorted(parsed.names - set(prof.names) - set(prof.constants))
            if unknown:
                raise InvalidParameterError(
                    f"{', '.join(unknown)} are not values of the person's profile; known: "
                    + ", ".join(prof.names)
                )
            env: dict[str, float] = dict(prof.constants)
            for name in sorted(parsed.names - set(prof.constants)):
                env[name] = source.noisy(name)
            value = float(parsed.evaluate(env))
            roots = sorted(set().union(*(prof.root_dependencies(n) for n in parsed.names)))
            out: dict[str, Any] = {
                "expression": source_text,
                "value": round(value, 6) if math.isfinite(value) else None,
                "from": roots,
                "note": _NOTE,
            }
            if text in FORMULAS:
                out["formula"] = text
                out["unit"] = FORMULAS[text].unit
                out["value"] = round(value, decimals_of(FORMULAS[text].precision))
                out["risk_class"] = FORMULAS[text].risk_classes.label(value)
            return out

    def list_values(self) -> dict[str, Any]:
        record = self.store.require()
        described = api.describe(record.profile)
        noisy = api.noisy_values(record.profile, record.state)
        prof = load_profile(copy.deepcopy(record.profile))
        values = []
        for name, info in described["roots"].items():
            values.append(
                {
                    "name": name,
                    "kind": "root",
                    "title": info["title"],
                    "unit": info["unit"],
                    "domain": info["domain"],
                    "drawn": name in noisy,
                    "has_true_value": name in record.true_values,
                    "value": round_to_precision(prof, name, noisy[name]) if name in noisy else None,
                    "epsilon_per_privacy_unit": info["epsilon"],
                    "privacy_unit": info["privacy_unit"],
                    "epsilon_over_domain": info["domain_epsilon"],
                    "noise_scale": info["noise_scale"],
                }
            )
        for name, info in described["derived"].items():
            spec = prof.derived[name]
            values.append(
                {
                    "name": name,
                    "kind": "derived",
                    "title": spec.title,
                    "unit": spec.unit,
                    "from": info["from"],
                    "expression": info["expression"],
                    "value": round_to_precision(prof, name, noisy[name]) if name in noisy else None,
                    "epsilon": "none of its own: computed from the noisy roots (post-processing)",
                }
            )
        ledger = record.state.get("ledger", [])
        return {
            "values": values,
            "budget": described["budget"],
            "epsilon_spent_per_privacy_unit": ledger[-1]["total_spent"] if ledger else 0.0,
            "epsilon_spent_over_domain": _domain_spent(described, ledger),
            "draws": len(ledger),
            "guarantee": (
                "each root is released once with an exact discrete Laplace mechanism: ε per "
                "privacy unit (metric DP; two values one privacy unit apart are "
                "e^ε-indistinguishable) and epsilon_over_domain between the domain's ends; "
                "every answer is post-processing of that one draw"
            ),
        }

    def protect_text(self, text: str, krr_epsilon: float | None = None) -> dict[str, Any]:
        mode = "numbers" if krr_epsilon is None else "both"
        with self.store.update() as box:
            record = box.record
            setup = RootGuardSetup(
                profile=record.profile, state=record.state, true_values=record.true_values
            )
            settings = SiteSettings(mode=mode, header=HEADER_NONE, rootguard=setup)
            if krr_epsilon is not None:
                settings = SiteSettings(
                    mode=mode, epsilon=krr_epsilon, header=HEADER_NONE, rootguard=setup
                )
            result = protect(text, settings)
            if result.state is not None and result.state != record.state:
                box.record = record.with_state(result.state, "drawn", "protect_text")
        out: dict[str, Any] = {
            "text": result.text,
            # What was written instead; never what was there (the true value as typed).
            "replaced": [
                {"name": r["name"], "replacement": r["replacement"]} for r in result.replacements
            ],
        }
        if result.receipt is not None:
            out["krr"] = {
                "epsilon_per_char": result.receipt.epsilon_per_char,
                "chars_perturbed": result.receipt.chars_perturbed,
                "epsilon_total_basic": result.receipt.epsilon_total_basic,
            }
        return out


_NOTE = (
    "a differentially private noisy value, drawn once and reused for every service; "
    "not the person's true value"
)


def _answer(profile: Profile, name: str, value: float) -> dict[str, Any]:
    spec = profile.spec(name)
    derived = isinstance(spec, DerivedSpec)
    out: dict[str, Any] = {
        "name": name,
        "kind": "derived" if derived else "root",
        "value": round_to_precision(profile, name, value),
        "unit": spec.unit,
        "from": sorted(profile.root_dependencies(name)),
        "note": _NOTE,
    }
    classes = profile.risk_classes(name)
    if classes is not None:
        out["risk_class"] = classes.label(value)
    return out


def _domain_spent(described: Mapping[str, Any], ledger: list[dict[str, Any]]) -> float:
    """ε over the domain's ends spent by all draws: each draw's ε scaled by domain/unit."""
    total = 0.0
    for entry in ledger:
        for name, eps in entry["epsilon"].items():
            info = described["roots"].get(name)
            if info is None or not info["epsilon"]:
                continue
            total += info["domain_epsilon"] * float(eps) / float(info["epsilon"])
    return total


def error_text(exc: BaseException) -> str:
    """A tool error's text: Veil's own message, or a generic one (never values)."""
    if isinstance(exc, VeilError):
        return " ".join(line.strip() for line in str(exc).splitlines())
    return f"internal error in Veil ({type(exc).__name__}); see the server's log"
