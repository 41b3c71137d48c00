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
    """What one answer's defense did and what that is worth, in numbers and in words.

    ``epsilon`` is set only for a formal defense, and it is the guarantee: the
    epsilon calibrated before generation for the longest answer allowed
    (``max_tokens``).  ``epsilon_spent`` is the same accounting over the tokens
    this answer really has -- after the fact, not a guarantee (the length depends
    on the documents).  A defense without a guarantee gets ``epsilon = None`` and,
    if it added noise, a ``nominal_epsilon`` of its realised noise schedule,
    labelled as such.  ``headline`` is the receipt's first line.
    """

    mechanism: str
    label: str
    params: dict[str, Any]
    formal: bool  # is there a differential-privacy guarantee at all
    relation: str | None  # the neighbouring relation it is stated for
    epsilon: float | None  # the guarantee (formal only): calibrated for max_tokens
    delta: float | None
    epsilon_spent: float | None  # formal only: this answer's tokens, after the fact
    nominal_epsilon: float | None  # not formal: the realised schedule's figure, no guarantee
    noise_added: bool
    gamma: float
    protected_tokens: int
    total_tokens: int
    max_tokens: int
    sensitivity: float | None
    best_order: float | None
    meaningful: bool  # formal and epsilon <= MEANINGFUL_EPSILON
    headline: str
    statement: str
    screened: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["notes"] = list(self.notes)
        for key in ("epsilon", "epsilon_spent", "nominal_epsilon"):
            value = data[key]
            if value is not None and not math.isfinite(value):
                data[key] = None
                data[key + "_text"] = "infinite"
            else:
                data[key + "_text"] = None if value is None else f"{value:.4g}"
        return data


def _fmt(eps: float) -> str:
    if not math.isfinite(eps):
        return "infinite"
    return f"{eps:.3g}" if eps < 1e4 else f"{eps:.1e}"


def build_receipt(
    config: DefenseConfig,
    ledger: NoiseLedger | None,
    total_tokens: int,
    max_tokens: int | None = None,
) -> Receipt:
    """The receipt for one answer generated under ``config`` with this noise ledger.

    ``max_tokens`` is the longest answer the generation allowed (what a formal
    defense is calibrated for); it defaults to ``total_tokens``.
    """
    defense = config.defense
    guarantee = defense.guarantee
    limit = max(max_tokens if max_tokens is not None else total_tokens, total_tokens, 1)
    common: dict[str, Any] = {
        "mechanism": config.name,
        "label": defense.label,
        "total_tokens": total_tokens,
        "max_tokens": limit,
    }
    if ledger is None:  # the defense built no mechanism: nothing was protected
        return Receipt(
            **common,
            params={},
            formal=False,
            relation=None,
            epsilon=None,
            delta=None,
            epsilon_spent=None,
            nominal_epsilon=None,
            noise_added=False,
            gamma=0.0,
            protected_tokens=0,
            sensitivity=None,
            best_order=None,
            meaningful=False,
            headline=f"{defense.label}: no protection",
            statement="No defense: this answer carries no privacy protection or guarantee.",
        )
    params = config.to_dict()["params"]
    delta = float(params["delta"])
    protected = len(ledger.sigmas)
    realised, order = receipt_epsilon(ledger, delta)
    noise = protected > 0
    formal = guarantee.formal
    epsilon = defense.calibrated_epsilon(config.params, limit) if formal else None
    headline, statement = _words(defense, epsilon, realised, delta, protected, total_tokens, limit)
    return Receipt(
        **common,
        params=params,
        formal=formal,
        relation=guarantee.relation,
        epsilon=epsilon,
        delta=delta,
        epsilon_spent=realised if formal else None,
        nominal_epsilon=realised if (noise and not formal) else None,
        noise_added=noise,
        gamma=protected / total_tokens if total_tokens else 0.0,
        protected_tokens=protected,
        sensitivity=ledger.sensitivity,
        best_order=order,
        meaningful=epsilon is not None and epsilon <= MEANINGFUL_EPSILON,
        headline=headline,
        statement=statement,
        screened=ledger.reason_counts(),
        notes=(guarantee.note,),
    )


def _words(
    defense: Any,
    epsilon: float | None,
    realised: float,
    delta: float,
    protected: int,
    total: int,
    limit: int,
) -> tuple[str, str]:
    """The receipt's first line and its statement, for each case a receipt can be in."""
    label = defense.label
    if protected == 0:
        return (
            f"{label}: no noise was added to this answer",
            "No noise was added to this answer: the defense screened no token as risky, so "
            "this answer has no privacy protection.",
        )
    if epsilon is None:
        return (
            f"{label}: not a differential-privacy guarantee",
            f"Not a differential-privacy guarantee. Noise was added to {protected} of "
            f"{total} tokens; the nominal epsilon of that noise schedule, "
            f"{_fmt(realised)}, is shown for comparison only and protects nothing by itself.",
        )
    headline = (
        f"{label}: ε {_fmt(epsilon)} calibrated for {limit} tokens · "
        f"this answer used {_fmt(realised)} over {total}"
    )
    if epsilon > MEANINGFUL_EPSILON:
        return headline, (
            f"epsilon = {_fmt(epsilon)} (delta = {delta:g}) is far too large to mean "
            "anything: this answer has no meaningful privacy guarantee."
        )
    guarantee = defense.guarantee
    scope = (
        "every token"
        if guarantee.covers == "every token"
        else f"the {protected} of {total} tokens screened as risky"
    )
    return headline, (
        f"({_fmt(epsilon)}, {delta:g})-differential privacy for {scope} with respect "
        f"to {guarantee.relation}, calibrated for an answer of up to {limit} tokens. "
        f"This answer's {total} tokens used epsilon {_fmt(realised)} of it, "
        "counted after the fact (not a guarantee: the length depends on the documents)."
    )
