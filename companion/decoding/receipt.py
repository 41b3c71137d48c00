"""The receipt that comes with every answer: what the defense did and what it is worth.

The epsilon is composed by :class:`py_core.accounting.RdpAccountant` from the
realised noise schedule -- the accountant the tests check against
dp-accounting.  What the receipt may claim comes from the defense's registry
entry (:class:`~companion.decoding.base.Guarantee`): whether the figure is a
formal guarantee, for which tokens and which neighbouring relation.  It says in
plain words when epsilon is too large to mean anything (above
:data:`~companion.decoding.base.MEANINGFUL_EPSILON`) or when the mechanism has
no formal guarantee at all, instead of presenting a number as protection.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from companion.decoding.base import MEANINGFUL_EPSILON, NoiseLedger, receipt_epsilon
from companion.decoding.config import DefenseConfig


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
    guarantee = config.defense.guarantee
    if ledger is None:  # the defense built no mechanism: nothing was protected
        return Receipt(
            mechanism=config.name,
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
    params = config.to_dict()["params"]
    delta = float(params["delta"])
    protected = len(ledger.sigmas)
    gamma = protected / total_tokens if total_tokens else 0.0
    eps, order = receipt_epsilon(ledger, delta)
    formal = guarantee.formal
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
            if guarantee.covers == "every token"
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
        notes=(guarantee.note,),
    )
