"""The RootGuard evaluation's configuration: ``SMOKE`` (CI) and ``FULL`` (docs/rootguard)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Config:
    people: int  # 0 = everyone eligible
    reconstruction_people: int
    epsilons: tuple[float, ...]
    reps: dict[str, int]  # repetitions per setting
    fit_reps: int
    fit_grid: int
    smoke: bool
    seed: int = 20260601
    qs: tuple[int, ...] = (1, 2, 4, 8, 16)  # answers seen per root (reconstruction)


SMOKE = Config(
    people=150,
    reconstruction_people=40,
    epsilons=(0.1, 1.0),
    reps={"relative": 1, "default": 1, "domain": 1},
    fit_reps=1,
    fit_grid=17,
    smoke=True,
)

FULL = Config(
    people=0,
    reconstruction_people=1500,
    epsilons=(0.05, 0.1, 0.2, 0.5, 1.0),
    reps={"relative": 3, "default": 1, "domain": 1},
    fit_reps=4,
    fit_grid=65,
    smoke=False,
)


@dataclass(frozen=True, slots=True)
class AgentsConfig:
    """``veil eval rootguard --agents``: scripted agent sessions through ``veil mcp proxy``."""

    people: int  # people per template (each runs every configuration and ε)
    turns: int  # turns per session; every turn calls all four services
    epsilons: tuple[float, ...]
    qs: tuple[int, ...]  # turns the pooling adversary has seen
    smoke: bool
    seed: int = 20261201
    setting: str = "relative"  # privacy units: 1% of the population mean (paper-comparable)


AGENTS_SMOKE = AgentsConfig(people=3, turns=4, epsilons=(0.1,), qs=(1, 2, 4), smoke=True)

# Sized to about 10 minutes of CPU on the 2-core machine (docs/rootguard/agents/report.md
# states the count and the time).
AGENTS_FULL = AgentsConfig(
    people=200, turns=16, epsilons=(0.1, 1.0), qs=(1, 2, 4, 8, 16), smoke=False
)
