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

from py_core.errors import InvalidParameterError, ProfileError, StateError, VeilError
from py_core.rootguard.cache import STATE_FORMAT, RootCache, _checksum, canonical_json
from py_core.rootguard.mechanism import resolve_rng
from py_core.rootguard.profile import Profile, load_profile
from py_core.rootguard.text import find_mentions, replace_mentions

__all__ = [
    "DEFAULT_PROFILE",
    "RECORD_FORMAT",
    "check_record",
    "compare_records",
    "describe",
    "init_state",
    "ledger",
    "noisy_values",
    "protect_text",
    "reset_state",
    "validate_profile",
]


def _root(
    quantity: str,
    unit: str,
    domain: list[float],
    precision: float,
    privacy_unit: float,
    reference: float,
    aliases: list[str],
    title: str,
) -> dict[str, Any]:
    return {
        "title": title,
        "quantity": quantity,
        "unit": unit,
        "domain": domain,
        "precision": precision,
        "privacy_unit": privacy_unit,
        "reference": reference,
        "aliases": aliases,
    }


#: A default adult profile.  Domains are public clinical ranges; references are
#: approximate US adult means (NHANES 2017-18); each root gets ε = 1 per privacy
#: unit (the budget 14 split over 14 roots), i.e. two values one privacy unit
#: apart (10 years, 10 kg, 20 mmHg, ...) are e^1-indistinguishable.  ``female``
#: is a public 0/1 constant used by eGFR; set it for the person.
DEFAULT_PROFILE: dict[str, Any] = {
    "format": "veil.rootguard.profile",
    "version": 1,
    "budget": 14.0,
    "max_total_epsilon": None,
    "target": None,
    "constants": {"female": 0},
    "values": {
        "age": _root("age", "years", [18, 100], 1, 10, 48, ["age", "aged"], "Age"),
        "height_cm": _root(
            "length", "cm", [120, 220], 0.1, 10, 168, ["height", "tall", "stature"], "Height"
        ),
        "weight_kg": _root(
            "mass",
            "kg",
            [30, 250],
            0.1,
            10,
            82,
            ["weight", "weigh", "weighs", "weighed", "body weight"],
            "Weight",
        ),
        "waist_cm": _root(
            "length", "cm", [50, 180], 0.1, 10, 99, ["waist", "waist circumference"], "Waist"
        ),
        "sbp": _root(
            "pressure",
            "mmHg",
            [70, 250],
            1,
            20,
            124,
            ["systolic", "systolic blood pressure", "sbp"],
            "Systolic blood pressure",
        ),
        "dbp": _root(
            "pressure",
            "mmHg",
            [40, 150],
            1,
            20,
            72,
            ["diastolic", "diastolic blood pressure", "dbp"],
            "Diastolic blood pressure",
        ),
        "glucose": _root(
            "glucose",
            "mg/dL",
            [40, 400],
            1,
            20,
            104,
            ["glucose", "fasting glucose", "blood sugar", "blood glucose", "fpg", "fbg"],
            "Fasting glucose",
        ),
        "insulin": _root(
            "insulin",
            "uU/mL",
            [1, 300],
            0.1,
            5,
            11,
            ["insulin", "fasting insulin"],
            "Fasting insulin",
        ),
        "ast": _root(
            "enzyme",
            "U/L",
            [5, 1000],
            1,
            20,
            24,
            ["ast", "sgot", "aspartate aminotransferase"],
            "AST",
        ),
        "alt": _root(
            "enzyme",
            "U/L",
            [5, 1000],
            1,
            20,
            24,
            ["alt", "sgpt", "alanine aminotransferase"],
            "ALT",
        ),
        "platelets": _root(
            "platelets",
            "10^9/L",
            [10, 1000],
            1,
            50,
            245,
            ["platelets", "platelet count", "platelet", "plt"],
            "Platelets",
        ),
        "creatinine": _root(
            "creatinine",
            "mg/dL",
            [0.2, 15],
            0.01,
            0.3,
            0.9,
            ["creatinine", "serum creatinine", "scr"],
            "Creatinine",
        ),
        "triglycerides": _root(
            "triglycerides",
            "mg/dL",
            [20, 2000],
            1,
            50,
            110,
            ["triglycerides", "triglyceride", "tg", "trigs"],
            "Triglycerides",
        ),
        "hdl": _root(
            "cholesterol",
            "mg/dL",
            [10, 150],
            1,
            10,
            53,
            ["hdl", "hdl cholesterol", "hdl-c"],
            "HDL cholesterol",
        ),
        "bmi": {"formula": "bmi"},
        "fib4": {"formula": "fib4"},
        "homa_ir": {"formula": "homa_ir"},
        "egfr": {"formula": "egfr"},
        "apri": {"formula": "apri"},
        "tyg": {"formula": "tyg"},
        "map": {"formula": "map"},
        "whtr": {"formula": "whtr"},
    },
}


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


def protect_text(
    text: str,
    profile: Mapping[str, Any],
    true_values: Mapping[str, float],
    state: Mapping[str, Any],
    *,
    rng: object = None,
) -> dict[str, Any]:
    """Replace the person's values in ``text`` by their cached noisy values.

    Returns ``{"text", "spans", "replacements", "state"}``; ``spans`` are the
    ``[start, end]`` positions of every replaced value in the returned text.  A
    root that has a true value but no cached noisy value yet is drawn once (and
    recorded in the ledger); a cached value is never re-drawn.
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    prof = _profile(profile)
    source = resolve_rng(rng, secure=True)
    truth = _true_values(prof, true_values)
    cache = _restore(prof, state)
    mentions = find_mentions(text, prof, truth)
    needed: set[str] = set()
    for mention in mentions:
        needed |= prof.root_dependencies(mention.name)
    missing = sorted(needed - set(cache.roots))
    if missing:
        cache.draw(truth, source, names=missing, event="draw")
    noisy = cache.values() if mentions else {}
    new_text, replacements = replace_mentions(text, mentions, prof, noisy.__getitem__)
    return {
        "text": new_text,
        "spans": [[r.start, r.end] for r in replacements],
        "replacements": [
            {
                "name": r.name,
                "original": r.original,
                "replacement": r.replacement,
                "start": r.start,
                "end": r.end,
            }
            for r in replacements
        ],
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
    stale = ()
    if isinstance(state, Mapping) and isinstance(state.get("roots"), Mapping):
        stale = tuple(n for n in state["roots"] if n not in prof.roots)
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
    """Per root: ε, privacy unit, noise scale and the ε between the domain's ends."""
    prof = _profile(profile)
    cache = RootCache.empty(prof)
    roots = {}
    for name, spec in prof.roots.items():
        mech = cache.mechanism(name)
        roots[name] = {
            "title": spec.title,
            "unit": spec.unit,
            "domain": [spec.grid.lo, spec.grid.hi],
            "epsilon": cache.allocation[name],
            "privacy_unit": spec.privacy_unit,
            "noise_scale": float(mech.scale * mech.grid.fstep),
            "domain_epsilon": mech.domain_epsilon,
        }
    derived = {
        name: {"from": sorted(prof.root_dependencies(name)), "expression": spec.expression.source}
        for name, spec in prof.derived.items()
    }
    return {"budget": prof.budget, "target": prof.target, "roots": roots, "derived": derived}


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
    ledger_here, ledger_in = here_state.get("ledger", []), in_state.get("ledger", [])
    if ledger_in[: len(ledger_here)] != ledger_here:
        reasons.append("the ledgers differ (the file's ledger does not continue this one)")
    if reasons:
        return "conflict", reasons
    if here_state.get("checksum") == in_state.get("checksum"):
        return "same", []
    return "extends", []
