"""The receipt that comes with every answer: what the defense did and what it is worth.

The epsilon is computed by :func:`py_core.accounting.gaussian_rdp_epsilon` from
the realised noise schedule -- the same code the tests check against
dp-accounting.  The receipt says in plain words when epsilon is too large to mean
anything (above :data:`~companion.decoding.config.MEANINGFUL_EPSILON`) or when
the mechanism has no formal guarantee at all, instead of presenting a number as
protection.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from companion.decoding.config import MEANINGFUL_EPSILON, DefenseConfig
from companion.decoding.processors import NoiseLedger, receipt_epsilon


@dataclass(frozen=True, slots=True)
class Receipt:
    mechanism: str
    params: dict[str, Any]
    epsilon: float | None
    delta: float | None
    gamma: float
    protected_tokens: int
    total_tokens: int
    sensitivity: float | None
    best_order: float | None
    formal: bool  # does the mechanism have a DP guarantee at all (under its stated scope)
    meaningful: bool  # formal and epsilon <= MEANINGFUL_EPSILON
    statement: str
    screened: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["notes"] = list(self.notes)
        eps = data["epsilon"]
        if eps is not None and not math.isfinite(eps):
            data["epsilon"] = None
            data["epsilon_text"] = "infinite"
        else:
            data["epsilon_text"] = None if eps is None else f"{eps:.4g}"
        return data


def _fmt(eps: float) -> str:
    return f"{eps:.3g}" if eps < 1e4 else f"{eps:.1e}"


def build_receipt(config: DefenseConfig, ledger: NoiseLedger | None, total_tokens: int) -> Receipt:
    """The receipt for one answer generated under ``config`` with this noise ledger."""
    params = config.to_dict()["params"]
    if config.name == "none" or ledger is None:
        return Receipt(
            mechanism="none",
            params={},
            epsilon=None,
            delta=None,
            gamma=0.0,
            protected_tokens=0,
            total_tokens=total_tokens,
            sensitivity=None,
            best_order=None,
            formal=False,
            meaningful=False,
            statement="No defense: this answer carries no privacy protection or guarantee.",
        )
    delta = float(params["delta"])
    protected = len(ledger.sigmas)
    gamma = protected / total_tokens if total_tokens else 0.0
    eps, order = receipt_epsilon(ledger, delta)
    notes: list[str] = []
    formal = config.name in ("static", "pad", "bounded")
    if config.name == "copy_aware":
        notes.append(
            "Copy-aware PAD is a heuristic defense: it screens tokens that would copy the "
            "retrieved context or its PII-like spans and randomises them among the top "
            "candidates. Which tokens are screened, and the candidate set, depend on the "
            "private context, so the epsilon below is nominal, not a guarantee."
        )
    if config.name == "pad":
        notes.append(
            "The guarantee covers only the fraction gamma of tokens screened as high-risk, "
            "for the realised noise schedule; the screening itself is data-dependent and "
            "not covered."
        )
    if config.name == "bounded":
        notes.append(
            "Covers every generated token (gamma = 1) with respect to replacing the whole "
            "retrieved context; noise was calibrated for the maximum answer length, so a "
            "shorter answer spends less."
        )
    meaningful = formal and eps <= MEANINGFUL_EPSILON
    if protected == 0:
        statement = (
            "No token was protected in this answer: the defense added no noise, so there "
            "is no privacy guarantee for it."
        )
    elif not formal:
        statement = (
            f"Nominal epsilon {_fmt(eps)} over {protected} of {total_tokens} tokens. This is "
            "not a differential-privacy guarantee; the defense only makes verbatim copying "
            "of the documents unlikely."
        )
    elif eps > MEANINGFUL_EPSILON:
        statement = (
            f"epsilon = {_fmt(eps)} (delta = {delta:g}) is far too large to mean anything: "
            "this answer has no meaningful privacy guarantee."
        )
    else:
        scope = (
            "for every token"
            if config.name in ("bounded", "static")
            else f"for the {protected} of {total_tokens} tokens screened as risky"
        )
        statement = (
            f"({_fmt(eps)}, {delta:g})-differential privacy {scope} with respect to the "
            "retrieved documents."
        )
    return Receipt(
        mechanism=config.name,
        params=params,
        epsilon=eps,
        delta=delta,
        gamma=gamma,
        protected_tokens=protected,
        total_tokens=total_tokens,
        sensitivity=ledger.sensitivity,
        best_order=order,
        formal=formal,
        meaningful=meaningful,
        statement=statement,
        screened=ledger.reason_counts(),
        notes=tuple(notes),
    )
