"""RQ4: scripted agent sessions through ``veil mcp proxy`` to services that record everything.

Each *session* is one person (NHANES population of :mod:`evals.rootguard.data`), one
of the 8 clinical templates, one configuration and one ε.  A scripted agent -- it
holds the person's *true* values, as an agent told them by the person would --
calls the four upstream services of :mod:`evals.rootguard.services` in every turn,
each asking for the template's roots in its own shape, and the calculator for the
template's score.  Every call goes through the shipped proxy
(:class:`companion.mcp.proxy.Proxy`, the SDK's in-process transport on both
sides), whose rewriter uses one noise source per session:

* **M-All** -- every disclosure is noised afresh at ε (a source that draws anew on
  every request; the proxy code is the same);
* **M-Roots** -- RootGuard's cache, the budget ``B = (2k + 1) ε`` split equally;
* **M-Opt** -- RootGuard's cache, ``B`` split by the sensitivity rule.

What is measured, from what the services *recorded*:

* **compliance** -- every private slot (a root or the score, in every shape) must
  hold a released value: the cached noisy value (RootGuard) or one of the session's
  fresh draws (M-All), at the written precision.  Anything else -- above all a true
  value passed through -- is a failure (goal: 0).  Numbers that are not the person's
  (visit numbers, dates, the number of dependents) must arrive unchanged
  (collateral rewrites), and results must come back unchanged;
* **target error** -- wMAPE and risk-class error of the score the calculator
  computed from what it received, per configuration (goal: M-Opt < M-Roots < M-All);
* **reconstruction** -- an adversary pooling what *all* services received about a
  root over the first ``q`` turns, MAP with a population prior (the one of
  :func:`py_core.rootguard.baselines.map_estimate`); under M-All the answers are
  independent draws, under RootGuard it knows they are one release (goal: flat in
  ``q`` under RootGuard, falling under M-All).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError

from companion.mcp.guard import CachedNoise
from companion.mcp.proxy import Proxy, RewriteLog, Upstream
from evals.rootguard import experiment as ex
from evals.rootguard.data import Population
from evals.rootguard.services import CAMEL, FIELD, LAB, SENTENCE, SERVICES, Recorder, build_service
from py_core.rootguard.allocation import allocate
from py_core.rootguard.baselines import m_all_budget, map_estimate
from py_core.rootguard.formulas import FORMULAS
from py_core.rootguard.mechanism import DiscreteLaplaceMechanism
from py_core.rootguard.profile import Profile
from py_core.rootguard.units import convert

__all__ = ["FreshNoise", "run_agents"]

CONFIGS = ("M-All", "M-Roots", "M-Opt")
_NUMBER = r"(?P<v>\d+(?:\.\d+)?)"
_SENTENCE_RE = {
    name: re.compile(re.escape(text).replace(re.escape("{v}"), _NUMBER))
    for name, text in SENTENCE.items()
}
_TAIL = "I have 2 children and have been a customer since 2019."


class FreshNoise:
    """M-All as a noise source: every request is a new draw at ε (recorded as a release)."""

    def __init__(
        self, profile: Profile, truth: Mapping[str, float], epsilon: float, rng: random.Random
    ):
        self.profile = profile
        self._roots = dict(truth)
        self.truth = profile.evaluate_all(self._roots)
        self.rng = rng
        self.mechanisms = {
            name: DiscreteLaplaceMechanism(spec.grid, epsilon, spec.privacy_unit)
            for name, spec in profile.roots.items()
        }
        self.releases: dict[str, list[float]] = defaultdict(list)

    def noisy(self, name: str) -> float:
        if name in self.profile.roots:
            mech = self.mechanisms[name]
            value = mech.grid.value(mech.release_index(self._roots[name], self.rng))
        else:
            roots = {r: self.noisy(r) for r in sorted(self.profile.root_dependencies(name))}
            value = self.profile.evaluate(name, roots)
        self.releases[name].append(value)
        return value


def _decimals(profile: Profile, name: str) -> int:
    step = profile.roots[name].grid.step
    text = f"{step:.10f}".rstrip("0")
    return len(text.split(".", 1)[1]) if "." in text else 0


def _fmt(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}"


def agent_calls(
    profile: Profile,
    template: ex.Template,
    truth: Mapping[str, float],
    female: int,
    turn: int,
    patient_id: str,
) -> list[tuple[str, dict[str, Any]]]:
    """What the scripted agent sends in one turn: the person's true values, four shapes."""
    roots = template.roots
    dec = {r: _decimals(profile, r) for r in roots}

    def number(r: str) -> float | int:
        return round(truth[r]) if dec[r] == 0 else round(truth[r], dec[r])

    labs = []
    for r in roots:
        label, unit, d = LAB[r]
        value = convert(truth[r], profile.roots[r].quantity, profile.roots[r].unit, unit)
        labs.append({"test": label, "value": _fmt(value, d), "unit": unit})
    notes = " ".join(SENTENCE[r].format(v=_fmt(truth[r], dec[r])) for r in roots)
    estimate = round(float(profile.evaluate(template.target, truth)), 2)
    return [
        (
            "clinic__record_vitals",
            {
                "patient_id": patient_id,
                "visit_number": turn,
                "measurements": {FIELD[r]: number(r) for r in roots},
            },
        ),
        (
            "labs__submit_results",
            {
                "patient_id": patient_id,
                "collected_on": f"2026-11-{turn:02d}",
                "results": labs,
            },
        ),
        (
            "insurer__request_quote",
            {
                "applicant": {
                    "details": {
                        CAMEL[r]: f"{_fmt(truth[r], dec[r])} {profile.roots[r].unit}" for r in roots
                    },
                    "dependents": 2,
                },
                "notes": f"{notes} {_TAIL}",
            },
        ),
        (
            "calculator__compute_score",
            {
                "score": template.target,
                "inputs": {r: number(r) for r in roots},
                "female": female,
                "agent_estimate": estimate,
            },
        ),
    ]


def _written_decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def received_slots(
    profile: Profile, template: ex.Template, calls: list[tuple[str, str, dict[str, Any]]]
) -> tuple[list[tuple[str, str, float, str, int]], int]:
    """What the services received in the private slots: (service, name, number, unit, decimals),
    and how many non-private numbers arrived changed (collateral rewrites)."""
    slots: list[tuple[str, str, float, str, int]] = []
    collateral = 0
    for service, _tool, args in calls:
        if service == "clinic":
            for r in template.roots:
                v = args["measurements"][FIELD[r]]
                slots.append((service, r, float(v), profile.roots[r].unit, _num_decimals(v)))
        elif service == "labs":
            by_label = {e["test"]: e for e in args["results"]}
            for r in template.roots:
                entry = by_label[LAB[r][0]]
                text = entry["value"]
                slots.append((service, r, float(text), entry["unit"], _written_decimals(text)))
            collateral += not re.fullmatch(r"2026-11-\d\d", args["collected_on"])
        elif service == "insurer":
            details = args["applicant"]["details"]
            for r in template.roots:
                text, _, unit = details[CAMEL[r]].partition(" ")
                slots.append((service, r, float(text), unit, _written_decimals(text)))
            for r in template.roots:
                m = _SENTENCE_RE[r].search(args["notes"])
                if m is None:
                    slots.append((service, r, math.nan, profile.roots[r].unit, 0))
                else:
                    text = m.group("v")
                    slots.append(
                        (
                            "insurer-note",
                            r,
                            float(text),
                            profile.roots[r].unit,
                            _written_decimals(text),
                        )
                    )
            collateral += args["applicant"]["dependents"] != 2
            collateral += not args["notes"].endswith(_TAIL)
        elif service == "calculator":
            for r in template.roots:
                v = args["inputs"][r]
                slots.append((service, r, float(v), profile.roots[r].unit, _num_decimals(v)))
            est = args["agent_estimate"]
            slots.append(("calculator", template.target, float(est), "", _num_decimals(est)))
            collateral += args["score"] != template.target
    return slots, collateral


def _num_decimals(value: float | int) -> int:
    if isinstance(value, int):
        return 0
    return _written_decimals(repr(float(value)))


def _explained(
    profile: Profile, name: str, written: float, unit: str, decimals: int, releases: list[float]
) -> bool:
    """Whether ``written`` writes one of ``releases`` (at its written precision)."""
    if math.isnan(written):
        return False
    spec = profile.spec(name)
    tol = 0.5 * 10.0**-decimals + 1e-9
    for value in releases:
        shown = value if not unit else convert(value, spec.quantity, spec.unit, unit)
        if abs(shown - written) <= tol:
            return True
    return False


def _true_written(
    profile: Profile, name: str, written: float, unit: str, decimals: int, truth: float
) -> bool:
    return _explained(profile, name, written, unit, decimals, [truth])


async def _session(
    agent: Client,
    recorders: dict[str, Recorder],
    current: dict[str, Any],
    profile: Profile,
    template: ex.Template,
    truth: dict[str, float],
    female: int,
    source: Any,
    turns: int,
    index: int,
) -> dict[str, Any]:
    for rec in recorders.values():
        rec.clear()
    current["source"] = source
    returned = []
    refused = 0
    sent_visits: list[int] = []
    for turn in range(1, turns + 1):
        for tool, args in agent_calls(profile, template, truth, female, turn, f"P-{index:06d}"):
            try:
                result = await agent.call_tool(tool, args)
            except MCPError as exc:  # not forwarded: nothing disclosed, nothing computed
                if "did not forward" not in exc.message:
                    raise
                refused += 1
                continue
            if tool.startswith("clinic"):
                sent_visits.append(turn)
            text = "".join(getattr(c, "text", "") for c in result.content)
            if result.is_error:
                raise RuntimeError(f"{tool} failed: {text}")
            if tool.startswith("calculator"):
                answer = result.structured_content or json.loads(text)
                returned.append(float(answer["value"]))
    calls = [c for name in SERVICES for c in recorders[name].calls]
    # Per turn, in order: the calculator's inputs as received give the score it computed.
    computed = []
    for _service, _tool, args in recorders["calculator"].calls:
        env = {**args["inputs"], "female": args["female"]}
        computed.append(float(FORMULAS[template.target].parsed.evaluate(env)))
    estimates = computed
    changed_results = sum(abs(a - b) > 1e-9 for a, b in zip(returned, computed, strict=True))
    slots, collateral = received_slots(profile, template, calls)
    clinic = [args["visit_number"] for _s, _t, args in recorders["clinic"].calls]
    collateral += sum(a != b for a, b in zip(clinic, sent_visits, strict=True))
    # Releases: what the mechanism gave out in this session.
    if isinstance(source, FreshNoise):
        releases = {k: list(v) for k, v in source.releases.items()}
    else:
        drawn = set(source.cache.roots)
        releases = {
            n: [source.cache.value(n)]
            for n in (*template.roots, template.target)
            if profile.root_dependencies(n) <= drawn
        }
    failures = true_passed = 0
    observations: dict[str, list[list[float]]] = {
        r: [[] for _ in range(turns)] for r in template.roots
    }
    per_turn: dict[tuple[str, str], int] = defaultdict(int)
    for service, name, written, unit, decimals in slots:
        ok = _explained(profile, name, written, unit, decimals, releases.get(name, []))
        if not ok:
            failures += 1
            true_passed += _true_written(profile, name, written, unit, decimals, source.truth[name])
        if name in observations and not math.isnan(written):
            spec = profile.roots[name]
            turn = per_turn[(service, name)]
            per_turn[(service, name)] += 1
            observations[name][min(turn, turns - 1)].append(
                convert(written, spec.quantity, unit, spec.unit)
            )
    return {
        "slots": len(slots),
        "failures": failures,
        "true_passed": true_passed,
        "collateral": collateral,
        "changed_results": changed_results,
        "refused": refused,
        "estimates": estimates,
        "observations": observations,
        "calls": len(calls),
        "releases": sum(len(v) for k, v in releases.items() if k in profile.roots),
    }


def _reconstruct(
    profile: Profile,
    name: str,
    observations: list[list[float]],
    q: int,
    config: str,
    epsilon: float,
    allocation: Mapping[str, float],
    prior: dict[str, float],
) -> float:
    spec = profile.roots[name]
    seen = [spec.grid.snap(v) for turn in observations[:q] for v in turn]
    if config == "M-All":
        mech = DiscreteLaplaceMechanism(spec.grid, epsilon, spec.privacy_unit)
        index = map_estimate(seen, mech, **prior)
    else:  # one release, seen again and again (rounding in other units aside)
        mech = DiscreteLaplaceMechanism(spec.grid, allocation[name], spec.privacy_unit)
        index = map_estimate([int(statistics.median_low(seen))], mech, **prior)
    return spec.grid.value(index)


def run_agents(
    pop: Population,
    epsilons: tuple[float, ...],
    turns: int,
    qs: tuple[int, ...],
    seed: int,
    means: dict[str, float],
    sds: dict[str, float],
    setting: str = "relative",
) -> dict[str, Any]:
    """Every session (people x templates x configurations x ε); rows for the report."""
    rng = random.Random(seed)
    recorders = {name: Recorder() for name in SERVICES}
    current: dict[str, Any] = {}
    upstreams = [Upstream(name, server=build_service(name, recorders[name])) for name in SERVICES]
    totals: dict[str, Any] = defaultdict(int)
    target_rows: dict[tuple[str, str, float], dict[str, list[float]]] = defaultdict(
        lambda: {"est": [], "truth": [], "class_err": []}
    )
    rec_err: dict[tuple[str, float, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    spent: dict[tuple[str, float], list[float]] = defaultdict(list)
    started = time.process_time()

    async def main() -> None:
        noise = lambda reason: contextlib.nullcontext(current["source"])  # noqa: E731
        proxy = Proxy(upstreams, noise, rewrite_log=RewriteLog(None, summary=None))
        async with proxy, Client(proxy.server) as agent:
            index = 0
            for template in ex.TEMPLATES:
                k = len(template.roots)
                profiles = {
                    f: ex.build_profile(template.roots, template.target, setting, means, f)
                    for f in (0, 1)
                }
                classes = FORMULAS[template.target].risk_classes
                for eps in epsilons:
                    budget = m_all_budget(k, eps)
                    allocations = {
                        "M-Roots": {f: dict.fromkeys(template.roots, budget / k) for f in (0, 1)},
                        "M-Opt": {
                            f: allocate(p, target=template.target, budget=budget)
                            for f, p in profiles.items()
                        },
                    }
                    for i in range(pop.size):
                        female = int(pop.female[i])
                        profile = profiles[female]
                        truth = {r: float(pop.values[r][i]) for r in template.roots}
                        true_g = float(profile.evaluate(template.target, truth))
                        for config in CONFIGS:
                            index += 1
                            if config == "M-All":
                                source: Any = FreshNoise(profile, truth, eps, rng)
                                allocation = dict.fromkeys(template.roots, eps)
                            else:
                                allocation = allocations[config][female]
                                source = CachedNoise.fresh(
                                    profile, truth, rng=rng, secure=False, allocation=allocation
                                )
                            out = await _session(
                                agent, recorders, current, profile, template, truth, female,
                                source, turns, index,
                            )  # fmt: skip
                            for key in ("slots", "failures", "true_passed", "collateral",
                                        "changed_results", "calls", "refused"):  # fmt: skip
                                totals[key] += out[key]
                            totals["sessions"] += 1
                            row = target_rows[(config, template.title, eps)]
                            for est in out["estimates"]:
                                row["est"].append(est)
                                row["truth"].append(true_g)
                                row["class_err"].append(
                                    float(classes.index(est) != classes.index(true_g))
                                )
                            spent[(config, eps)].append(
                                out["releases"] * eps if config == "M-All" else budget
                            )
                            for r in template.roots:
                                prior = {"prior_mean": means[r], "prior_sd": sds[r]}
                                for q in qs:
                                    guess = _reconstruct(
                                        profile, r, out["observations"][r], q, config, eps,
                                        allocation, prior,
                                    )  # fmt: skip
                                    acc = rec_err[(config, eps, q)]
                                    acc[0] += abs(guess - truth[r])
                                    acc[1] += abs(truth[r])

    anyio.run(main)
    cpu = time.process_time() - started
    target = []
    for (config, title, eps), row in sorted(target_rows.items()):
        target.append(
            {
                "method": config,
                "template": title,
                "epsilon": eps,
                "wmape": ex.wmape(row["est"], row["truth"]),
                "rce": float(sum(row["class_err"]) / len(row["class_err"])),
                "estimates": len(row["est"]),
            }
        )
    reconstruction = [
        {"method": config, "epsilon": eps, "q": q, "wmape": err / tot}
        for (config, eps, q), (err, tot) in sorted(rec_err.items())
    ]
    return {
        "totals": dict(totals),
        "target": target,
        "reconstruction": reconstruction,
        "spent": [
            {"method": c, "epsilon": e, "mean_epsilon_per_session": sum(v) / len(v)}
            for (c, e), v in sorted(spent.items())
        ],
        "cpu_s": cpu,
    }
