"""JSON-in / JSON-out facade for the extension (Pyodide).

Every argument and result is a plain dict / list / str / float, so it crosses the
JavaScript boundary unchanged and the state can live in ``chrome.storage``.
This facade protects real data: it uses a CSPRNG (``random.SystemRandom``) and
refuses a seeded ``random.Random`` with :class:`InsecureRandomnessError`.

* :func:`validate_profile` -- every problem of a profile, ``[]`` when fine;
* :func:`init_state` -- sanitize once each root that has a true value;
* :func:`protect_text` -- replace the person's values in a prompt by their
  cached noisy values (drawing only roots with a true value and no cached value);
* :func:`reset_state` -- an explicit re-draw, spending budget again;
* :func:`noisy_values`, :func:`ledger`, :func:`describe` -- what to show.

A corrupted or mismatched state raises :class:`StateError` and nothing is drawn.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from py_core.errors import (
    InvalidParameterError,
    ProfileError,
    SetupRequiredError,
    StateError,
    VeilError,
)
from py_core.rootguard.cache import STATE_FORMAT, RootCache, _checksum, canonical_json
from py_core.rootguard.default_profile import DEFAULT_PROFILE
from py_core.rootguard.mechanism import DiscreteLaplaceMechanism, resolve_rng
from py_core.rootguard.profile import Profile, load_profile
from py_core.rootguard.text import find_mentions, replace_mentions

__all__ = [
    "DEFAULT_PROFILE",
    "RECORD_FORMAT",
    "add_values",
    "check_record",
    "compare_records",
    "describe",
    "drifts",
    "epsilon_label",
    "init_state",
    "ledger",
    "noisy_values",
    "protect_text",
    "reset_state",
    "spent",
    "validate_profile",
]


def _profile(profile: object) -> Profile:
    return load_profile(copy.deepcopy(profile))


def validate_profile(profile: object) -> list[str]:
    """Every problem of ``profile`` (as text); an empty list when it is valid."""
    try:
        load_profile(copy.deepcopy(profile))
    except ProfileError as exc:
        return list(exc.problems)
    except VeilError as exc:
        return [str(exc)]
    return []


def _true_values(profile: Profile, true_values: object) -> dict[str, float]:
    if not isinstance(true_values, Mapping):
        raise InvalidParameterError(
            f"true_values must be an object of name -> number; got {type(true_values).__name__}"
        )
    problems = []
    values: dict[str, float] = {}
    for name, value in true_values.items():
        if value is None:
            continue
        if name not in profile.roots and name not in profile.derived:
            problems.append(f"{name!r} is not a value of the profile")
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            problems.append(f"true value of {name!r} must be a finite number; got {value!r}")
            continue
        if name in profile.roots:
            grid = profile.roots[name].grid
            if not grid.lo <= value <= grid.hi:
                problems.append(
                    f"true value {value!r} of {name!r} is outside its public domain "
                    f"[{grid.lo:g}, {grid.hi:g}]; widen the domain in the profile"
                )
                continue
            values[name] = float(value)
        # A derived value's true value is computed from its roots (Level 1); a typed one
        # is not needed and never noised on its own.
    if problems:
        raise InvalidParameterError("invalid true values: " + "; ".join(problems))
    return values


def init_state(
    profile: Mapping[str, Any], true_values: Mapping[str, float], *, rng: object = None
) -> dict[str, Any]:
    """A new state: each independent root with a true value sanitized once (one ledger entry)."""
    prof = _profile(profile)
    source = resolve_rng(rng, secure=True)
    truth = _true_values(prof, true_values)
    cache = RootCache.empty(prof)
    cache.draw(truth, source, event="init")
    return cache.to_dict()


def _restore(prof: Profile, state: object, tolerate: tuple[str, ...] = ()) -> RootCache:
    return RootCache.from_dict(prof, copy.deepcopy(state), tolerate_mismatch=tolerate)


def _guarantee(cache: RootCache, name: str) -> dict[str, Any]:
    """Root ``name``'s ε both ways: per privacy unit (with its unit) and over the domain."""
    spec = cache.profile.roots[name]
    mech = cache.mechanism(name)
    eps = cache.allocation[name]
    return {
        "epsilon": eps,
        "privacy_unit": spec.privacy_unit,
        "unit": spec.unit,
        "domain": [spec.grid.lo, spec.grid.hi],
        "domain_epsilon": mech.domain_epsilon,
        "label": epsilon_label(eps, spec.privacy_unit, spec.unit),
        "domain_label": (
            f"ε {_figure(mech.domain_epsilon)} between {_figure(spec.grid.lo)} and "
            f"{_figure(spec.grid.hi)}{_unit_suffix(spec.unit)}"
        ),
    }


def _figure(value: float) -> str:
    """A figure as shown to the person: at most four significant digits."""
    return f"{value:.4g}"


def _unit_suffix(unit: str) -> str:
    return f" {unit}" if unit else ""


def epsilon_label(epsilon: float, privacy_unit: float, unit: str) -> str:
    """``"ε 1 per 10 kg"``: an ε that cannot be read without its distance."""
    return f"ε {_figure(epsilon)} per {_figure(privacy_unit)}{_unit_suffix(unit)}"


def protect_text(
    text: str,
    profile: Mapping[str, Any],
    true_values: Mapping[str, float],
    state: Mapping[str, Any],
    *,
    rng: object = None,
) -> dict[str, Any]:
    """Replace the person's values in ``text`` by their cached noisy values.

    Returns ``{"text", "spans", "replacements", "drifts", "state"}``; ``spans`` are the
    ``[start, end]`` positions of every replaced value in the returned text.  A
    root that has a true value but no cached noisy value yet is drawn once (and
    recorded in the ledger); a cached value is never re-drawn.

    A number in a value's context that is not its stored value (a *drift*: "weight
    83.4 kg" with 82.4 stored) is never sent as typed.  For a root it is a new
    disclosure: drawn once with the root's mechanism, cached under that written value
    (grid index) so writing it again reuses the draw, and recorded in the ledger
    (event ``drift``).  A derived value is answered from the noisy roots (the drifted
    draws of this prompt where its roots drifted too), at no cost; if one of its roots
    has neither a draw nor a true value, nothing can stand in for it and
    :class:`SetupRequiredError` says which value to declare.  ``drifts`` lists each
    drifted number (what the person may want to store instead).
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    prof = _profile(profile)
    source = resolve_rng(rng, secure=True)
    truth = _true_values(prof, true_values)
    cache = _restore(prof, state)
    mentions = find_mentions(text, prof, truth, drift=True)
    needed: set[str] = set()
    for mention in mentions:
        if not mention.drift or mention.name in prof.derived:
            needed |= prof.root_dependencies(mention.name)
    missing = sorted(n for n in needed - set(cache.roots) if n in truth)
    if missing:
        cache.draw(truth, source, names=missing, event="draw")
    # Roots first, so a drifted derived value can use this prompt's drifted roots.
    answers: dict[int, float] = {}
    drifted_at: set[int] = set()  # positions answered by a drifted draw (or from one)
    drifted_roots: dict[str, float] = {}
    drifts: list[dict[str, Any]] = []
    for position, mention in enumerate(mentions):
        if not mention.drift or mention.name not in prof.roots:
            continue
        assert mention.value is not None
        name = mention.name
        stored = truth.get(name)
        if stored is not None and cache.true_index(name, stored) == cache.true_index(
            name, mention.value
        ):
            # Written differently but the same grid value as the stored one: its draw.
            if name not in cache.roots:
                cache.draw(truth, source, names=[name], event="draw")
            answers[position] = cache.value(name)
            continue
        drifted, drawn = cache.drift(name, mention.value, source)
        answers[position] = drifted
        drifted_at.add(position)
        drifted_roots.setdefault(name, drifted)
        grid = prof.roots[name].grid
        drifts.append(
            {
                "name": name,
                "title": prof.roots[name].title,
                "unit": prof.roots[name].unit,
                "written": mention.original,
                "value": grid.value(cache.true_index(name, mention.value)),
                "drawn": drawn,
                "derived": False,
            }
        )
    base = cache.root_values()
    for position, mention in enumerate(mentions):
        if not mention.drift or mention.name not in prof.derived:
            continue
        roots = {**base, **drifted_roots}
        lacking = sorted(prof.root_dependencies(mention.name) - set(roots))
        if lacking:
            spec = prof.derived[mention.name]
            raise SetupRequiredError(
                f"{mention.original!r} after {spec.title} is not your stored {spec.title}, and "
                f"RootGuard can only answer it from noisy values of {', '.join(lacking)}, which "
                "have no value yet: declare them (the number was not sent)"
            )
        answers[position] = prof.evaluate(mention.name, roots)
        drifted_at.add(position)
        drifts.append(
            {
                "name": mention.name,
                "title": prof.derived[mention.name].title,
                "unit": prof.derived[mention.name].unit,
                "written": mention.original,
                "value": mention.value,
                "drawn": False,
                "derived": True,
            }
        )
    noisy = cache.values() if mentions else {}
    index_of = {id(m): i for i, m in enumerate(mentions)}

    def answer(mention: Any) -> float:
        position = index_of[id(mention)]
        return answers[position] if position in answers else noisy[mention.name]

    new_text, replacements = replace_mentions(
        text, mentions, prof, noisy.__getitem__, by_mention=answer
    )
    out_reps = [
        {
            "name": r.name,
            "original": r.original,
            "replacement": r.replacement,
            "start": r.start,
            "end": r.end,
            "drift": position in drifted_at,
            "guarantees": {n: _guarantee(cache, n) for n in sorted(prof.root_dependencies(r.name))},
        }
        # find_mentions returns the mentions sorted, replace_mentions keeps that order.
        for position, r in enumerate(replacements)
    ]
    return {
        "text": new_text,
        "spans": [[r.start, r.end] for r in replacements],
        "replacements": out_reps,
        "drifts": drifts,
        "state": cache.to_dict(),
    }


def reset_state(
    profile: Mapping[str, Any],
    true_values: Mapping[str, float],
    state: Mapping[str, Any],
    *,
    names: list[str] | None = None,
    rng: object = None,
) -> dict[str, Any]:
    """Re-draw ``names`` (default: every root with a true value); spends budget again.

    A root whose cached draw no longer matches the profile (a changed domain or
    budget) can be reset by naming it, and roots the profile no longer declares are
    dropped; a corrupted state is still refused.
    """
    prof = _profile(profile)
    source = resolve_rng(rng, secure=True)
    truth = _true_values(prof, true_values)
    if names is not None and (
        not isinstance(names, list) or not all(isinstance(n, str) for n in names)
    ):
        raise InvalidParameterError(f"names must be a list of root names; got {names!r}")
    chosen = tuple(names) if names is not None else tuple(n for n in prof.roots if n in truth)
    # Roots the profile no longer declares are dropped by a reset (nothing is drawn for them).
    stale: tuple[str, ...] = ()
    if isinstance(state, Mapping):
        for key in ("roots", "drifts"):
            if isinstance(state.get(key), Mapping):
                stale += tuple(n for n in state[key] if n not in prof.roots and n not in stale)
    cache = _restore(prof, state, chosen + stale)
    cache.reset(truth, source, names=list(chosen))
    return cache.to_dict()


def noisy_values(profile: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, float]:
    """Every noisy value the state can answer (roots and derived), for display."""
    prof = _profile(profile)
    return _restore(prof, state).values()


def ledger(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ledger of draws in ``state`` (checked against its checksum)."""
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        raise StateError("not a RootGuard state")
    body = {k: v for k, v in state.items() if k != "checksum"}
    if state.get("checksum") != _checksum(body):
        raise StateError("RootGuard state is corrupted (checksum mismatch); ledger not shown")
    return copy.deepcopy(list(state.get("ledger", [])))


def describe(profile: Mapping[str, Any]) -> dict[str, Any]:
    """Per root: ε per privacy unit (with a label naming the unit), the noise scale and
    the ε between the domain's ends; and both totals over the profile.

    ``total_epsilon`` is the sum of the roots' ε, each per its own privacy unit (the
    budget); ``total_domain_epsilon`` is the sum of the ε between the ends of each
    root's domain -- the figure for two people at opposite ends of every domain.
    """
    prof = _profile(profile)
    cache = RootCache.empty(prof)
    roots = {}
    for name, spec in prof.roots.items():
        mech = cache.mechanism(name)
        guarantee = _guarantee(cache, name)
        roots[name] = {
            "title": spec.title,
            "unit": spec.unit,
            "domain": [spec.grid.lo, spec.grid.hi],
            "epsilon": cache.allocation[name],
            "privacy_unit": spec.privacy_unit,
            "noise_scale": float(mech.scale * mech.grid.fstep),
            "domain_epsilon": mech.domain_epsilon,
            "label": guarantee["label"],
            "domain_label": guarantee["domain_label"],
        }
    derived = {
        name: {"from": sorted(prof.root_dependencies(name)), "expression": spec.expression.source}
        for name, spec in prof.derived.items()
    }
    total = math.fsum(r["epsilon"] for r in roots.values())
    total_domain = math.fsum(r["domain_epsilon"] for r in roots.values())
    return {
        "budget": prof.budget,
        "target": prof.target,
        "roots": roots,
        "derived": derived,
        "total_epsilon": total,
        "total_domain_epsilon": total_domain,
        "total_label": (
            f"ε {_figure(total)} in total, each root's ε per its own privacy unit; "
            f"ε {_figure(total_domain)} in total between the ends of every root's domain"
        ),
    }


def spent(profile: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, Any]:
    """What the ledger has spent, both ways: ε per privacy unit, and ε over the domains.

    Every draw (init, draw, drift, add, reset) of root ``i`` at ``ε_i`` costs ``ε_i`` per
    privacy unit and ``ε_i · (domain width / privacy unit)`` between its domain's ends
    (rounded up to the grid, as :attr:`DiscreteLaplaceMechanism.domain_epsilon`).
    """
    prof = _profile(profile)
    cache = _restore(prof, state)
    per_unit = 0.0
    per_domain = 0.0
    draws = 0
    for entry in cache.ledger:
        for name, eps in entry["epsilon"].items():
            draws += 1
            per_unit += float(eps)
            if name in prof.roots:
                spec = prof.roots[name]
                mech = DiscreteLaplaceMechanism(spec.grid, float(eps), spec.privacy_unit)
                per_domain += mech.domain_epsilon
    return {
        "draws": draws,
        "epsilon": per_unit,
        "domain_epsilon": per_domain,
        "label": (
            f"spent so far: ε {_figure(per_unit)} per privacy unit in {draws} draw(s); "
            f"ε {_figure(per_domain)} between the ends of the domains"
        ),
    }


def drifts(
    profile: Mapping[str, Any], true_values: Mapping[str, Any], state: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Every value the person wrote that differs from the stored one, with its cached draw.

    What the options page offers to store instead ("update my stored weight?"):
    :func:`add_values` with that value takes the cached draw at no cost.
    """
    prof = _profile(profile)
    truth = _true_values(prof, true_values)
    cache = _restore(prof, state)
    out = []
    for name in prof.roots:
        grid = prof.roots[name].grid
        for key, root in sorted(cache.drifts.get(name, {}).items()):
            out.append(
                {
                    "name": name,
                    "title": prof.roots[name].title,
                    "unit": prof.roots[name].unit,
                    "value": grid.value(key),
                    "noisy": grid.value(root.index),
                    "stored": truth.get(name),
                }
            )
    return out


def add_values(
    profile: Mapping[str, Any],
    true_values: Mapping[str, Any],
    state: Mapping[str, Any],
    values: Mapping[str, Any],
    *,
    rng: object = None,
) -> dict[str, Any]:
    """Store ``values`` (root -> true value) without touching any other root's draw.

    A root with no value yet is drawn once (ledger event ``add``), unless the person
    already wrote that value in a prompt: then its cached drifted draw becomes the
    root's, at no cost.  A root whose stored value changes is *updated* the same way
    (ledger event ``update`` when it draws); its old draw stays cached under the old
    value, so writing the old value again still sends the same noisy number.  Every
    other root, and every cached draw, is unchanged.  Returns ``{"trueValues" (in the
    profile's order), "state", "added", "updated", "adopted"}`` -- ``adopted``: the names
    whose draw was taken from an earlier drift instead of drawn.
    """
    prof = _profile(profile)
    source = resolve_rng(rng, secure=True)
    truth = _true_values(prof, true_values)
    if not isinstance(values, Mapping) or not values:
        raise InvalidParameterError("values must be a non-empty object of root -> number")
    derived = sorted(n for n in values if n in prof.derived)
    if derived:
        raise InvalidParameterError(
            f"{', '.join(derived)} are computed from other values, never stored; give their "
            f"roots ({', '.join(sorted(set().union(*(prof.root_dependencies(n) for n in derived))))})"
        )
    new = _true_values(prof, values)
    if set(values) - set(new):
        empty = sorted(n for n in values if n not in new)
        raise InvalidParameterError(f"no value given for {', '.join(empty)}")
    cache = _restore(prof, state)
    added: list[str] = []
    updated: list[str] = []
    adopted: list[str] = []
    for name in prof.roots:  # the profile's order, so the ledger reads as the table does
        if name not in new:
            continue
        old = truth.get(name)
        if old is not None and cache.true_index(name, old) == cache.true_index(name, new[name]):
            continue
        event = "add" if old is None else "update"
        drew = cache.adopt(name, new[name], old, source, event=event)
        (added if old is None else updated).append(name)
        if not drew:
            adopted.append(name)
    merged = {**truth, **new}
    ordered = {n: merged[n] for n in prof.roots if n in merged}
    return {
        "trueValues": ordered,
        "state": cache.to_dict(),
        "added": added,
        "updated": updated,
        "adopted": adopted,
    }


# The format tag of an exported record (the options page, ``veil rootguard export``).
RECORD_FORMAT = "veil.rootguard.record"


def _true_value_problems(profile: Mapping[str, Any], truth: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``truth`` for ``profile``, naming values but never their numbers."""
    prof = load_profile(copy.deepcopy(dict(profile)))
    problems = []
    for name, value in truth.items():
        if value is None:
            continue
        if name not in prof.roots and name not in prof.derived:
            problems.append(f"{name!r} is not a value of the profile")
        elif (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            problems.append(f"the true value of {name!r} is not a finite number")
        elif (
            name in prof.roots and not prof.roots[name].grid.lo <= value <= prof.roots[name].grid.hi
        ):
            grid = prof.roots[name].grid
            problems.append(
                f"the true value of {name!r} is outside its public domain [{grid.lo:g}, {grid.hi:g}]"
            )
    return problems


def check_record(data: object, where: str = "the record") -> dict[str, Any]:
    """A record ``{profile, trueValues, state, events}`` checked whole; StateError otherwise.

    Accepted shapes: the export (``format`` = :data:`RECORD_FORMAT`, version 1), the
    bare record the extension stores, or ``{"rootguard": record}``.  The state is
    restored against the profile (checksum, parameters), so a record that could not
    be used is refused here, before anything is written.  The extension's import
    and the companion's record both call this.
    """
    if isinstance(data, Mapping) and set(data) == {"rootguard"}:
        data = data["rootguard"]
    if not isinstance(data, Mapping):
        raise StateError(f"{where} is not a RootGuard record (a JSON object)")
    tag = data.get("format")
    if tag is not None and (tag != RECORD_FORMAT or data.get("version") != 1):
        raise StateError(
            f"{where} has format {tag!r} version {data.get('version')!r}; expected "
            f"{RECORD_FORMAT!r} version 1 (an export of the options page or 'veil rootguard export')"
        )
    missing = [k for k in ("profile", "trueValues", "state") if data.get(k) is None]
    if missing:
        raise StateError(
            f"{where} lacks {', '.join(missing)}: it is not a RootGuard record, or RootGuard "
            "was never set up where it came from"
        )
    profile, truth, state = data["profile"], data["trueValues"], data["state"]
    problems = validate_profile(profile)
    if problems:
        raise StateError(f"{where}: its profile has problems: " + "; ".join(problems))
    if not isinstance(truth, Mapping):
        raise StateError(f"{where}: trueValues must be an object of name -> number")
    bad = _true_value_problems(profile, truth)
    if bad:
        raise StateError(f"{where}: " + "; ".join(bad))
    noisy_values(profile, state)  # StateError when corrupted or mismatched
    events = data.get("events") or []
    if not isinstance(events, list) or not all(isinstance(e, Mapping) for e in events):
        raise StateError(f"{where}: events must be a list of objects")
    return {
        "profile": copy.deepcopy(dict(profile)),
        "trueValues": {k: float(v) for k, v in truth.items() if v is not None},
        "state": copy.deepcopy(dict(state)),
        "events": [dict(e) for e in events],
    }


def compare_records(here: Mapping[str, Any], incoming: Mapping[str, Any]) -> tuple[str, list[str]]:
    """How ``incoming`` relates to ``here``: ``("same" | "extends" | "conflict", reasons)``.

    Both are records ``{profile, trueValues, state}`` (the shape the extension stores
    and ``veil rootguard export`` writes).  ``extends``: the same profile and true
    values, every draw here kept unchanged in ``incoming`` and its ledger a
    continuation of this one (the other side drew roots this side had not yet
    needed).  Anything else is a conflict: two independent draws of one value must
    never be merged, since using both spends its budget twice.  Reasons name values,
    never their numbers.  The extension's import and the companion's record share this.
    """
    reasons = []
    if canonical_json(here.get("profile")) != canonical_json(incoming.get("profile")):
        reasons.append("the profiles differ (roots, domains, privacy units, budget or formulas)")
    ours_true = dict(here.get("trueValues") or {})
    theirs_true = dict(incoming.get("trueValues") or {})
    if ours_true != theirs_true:
        names = sorted(
            n for n in set(ours_true) | set(theirs_true) if ours_true.get(n) != theirs_true.get(n)
        )
        reasons.append(f"the true values differ for {', '.join(names)}")
    here_state = here.get("state") or {}
    in_state = incoming.get("state") or {}
    ours, theirs = here_state.get("roots", {}), in_state.get("roots", {})
    redrawn = sorted(n for n in ours if n in theirs and ours[n] != theirs[n])
    dropped = sorted(n for n in ours if n not in theirs)
    if redrawn:
        reasons.append(
            f"{', '.join(redrawn)} were drawn differently (two independent draws of the same "
            "value: using both spends its budget twice)"
        )
    if dropped:
        reasons.append(f"{', '.join(dropped)} are drawn here but not in the file")
    ours_d, theirs_d = here_state.get("drifts", {}), in_state.get("drifts", {})
    drift_conflicts = sorted(
        n
        for n, entries in ours_d.items()
        if any(theirs_d.get(n, {}).get(k) != v for k, v in entries.items())
    )
    if drift_conflicts:
        reasons.append(
            f"draws of other written values of {', '.join(drift_conflicts)} are here but "
            "missing or different in the file"
        )
    ledger_here, ledger_in = here_state.get("ledger", []), in_state.get("ledger", [])
    if ledger_in[: len(ledger_here)] != ledger_here:
        reasons.append("the ledgers differ (the file's ledger does not continue this one)")
    if reasons:
        return "conflict", reasons
    if here_state.get("checksum") == in_state.get("checksum"):
        return "same", []
    return "extends", []
