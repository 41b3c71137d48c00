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
