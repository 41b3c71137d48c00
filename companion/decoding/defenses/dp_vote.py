"""``dp_vote``: per-document differential privacy by a private vote of disjoint document groups.

The retrieved documents are split into ``groups`` disjoint voter groups (each
document in exactly one, chosen by a hash of the document's key, so a
document's group depends on that document only; all chunks of a document go
together).  Every group's context gives its own next-token prediction (all
groups in one batched forward pass per token, every row padded to one public
width; a group without documents abstains).  Per token, a *gate* asks whether
any token other than the public prediction (the prompt without documents) has
strong support: the votes of the strongest such token are released with
Gaussian noise, and below ``threshold * groups`` the public token is emitted.
Otherwise the vote histogram over the whole vocabulary is released with
Gaussian noise and its arg-max is the token -- unless no token's noisy votes
reach ``release_z`` noise sigmas, in which case the public token is kept.  After
``gate_tokens`` gated tokens, or once ``release_tokens`` votes were released, the
public model continues alone (no private computation, no cost); the receipt
says so.

Privacy (docs/methods/dprag.md): adding or removing one document changes one
group's context, so one group's vote (or abstention): the gate's count moves by
at most 1 (L2 sensitivity 1) and the histogram by at most one vote moved from one
token to another (L2 sensitivity sqrt 2).  Both are Gaussian mechanisms; the
answer is the adaptive composition of at most ``gate_tokens`` gate releases and
``release_tokens`` histogram releases, calibrated before generation so that
their Rényi-DP composes to ``epsilon`` at ``delta``.  Everything else (the
public pass, the arg-max, the thresholds, the fallback) is post-processing.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from companion.decoding.base import (
    BuildContext,
    Defense,
    Guarantee,
    Knob,
    NoiseLedger,
    calibrate_sigma,
)
from companion.decoding.noise import NoiseSource, check_source
from py_core.accounting import DEFAULT_DELTA, GaussianEvent, IndividualRdpFilter, RdpAccountant
from py_core.errors import InvalidParameterError
from py_core.validate import check_count, check_delta, check_positive

ADD_REMOVE_DOCUMENT = "adding or removing one of the retrieved documents"
HISTOGRAM_SENSITIVITY = math.sqrt(2.0)  # one vote moves from one token to another
GATE_SENSITIVITY = 1.0  # the public token's vote count moves by at most one

# Why a token was emitted (the receipt's ``screened`` counts).
AGREED = "agreed_with_public"  # the gate passed: the public token, free of any vote
RELEASED = "released_by_vote"  # the noisy vote histogram chose it (spent release budget)
GATE_SPENT = "gate_budget_spent"  # no gate queries left: the public model alone
RELEASE_SPENT = "release_budget_spent"  # the gate opened but no release was left: public token
WEAK_VOTE = "weak_vote"  # released, but no token's noisy votes stood out: the public token


@dataclass(frozen=True, slots=True)
class DpVoteConfig:
    """The vote of ``groups`` disjoint document groups, calibrated to ``epsilon`` per answer.

    ``gate_share`` of the answer's Rényi budget goes to the gate (one noisy count per
    gated token), the rest to the vote releases.
    """

    epsilon: float = 10.0
    delta: float = DEFAULT_DELTA
    groups: int = 16
    gate_tokens: int = 16  # tokens that may be gated; afterwards the public model alone
    release_tokens: int = 5  # tokens that may be chosen by the private vote
    gate_share: float = 0.35
    # The vote is asked for only where another token than the public one has noisy votes
    # of at least this share of the groups.
    threshold: float = 0.35
    group_tokens: int = 96  # context tokens per group (a group's own documents, best first)
    # A released token must reach release_z noise sigmas of votes, else the public token
    # is kept: the largest of ~50,000 zero-vote noises passes 5 sigmas ~1.4% of the time.
    release_z: float = 5.0

    def __post_init__(self) -> None:
        check_positive(self.epsilon, "epsilon")
        check_delta(self.delta)
        check_count(self.groups, "groups", minimum=2)
        check_count(self.gate_tokens, "gate_tokens", minimum=1)
        check_count(self.release_tokens, "release_tokens", minimum=1)
        check_count(self.group_tokens, "group_tokens", minimum=8)
        if not 0.0 < float(self.gate_share) < 1.0:
            raise InvalidParameterError(
                f"gate_share must be strictly between 0 and 1; got {self.gate_share!r}"
            )
        check_positive(self.release_z, "release_z", allow_zero=True)
        if not 0.0 < float(self.threshold) <= 1.0:
            raise InvalidParameterError(
                f"threshold must be in (0, 1] (a share of the groups); got {self.threshold!r}"
            )


@dataclass(frozen=True, slots=True)
class Calibration:
    """The noise of one answer: how many gate and vote releases, and their sigmas."""

    gated: int  # gate queries allowed
    released: int  # vote releases allowed
    gate_sigma: float
    vote_sigma: float

    def events(self, gated: int | None = None, released: int | None = None) -> list[GaussianEvent]:
        g = self.gated if gated is None else gated
        r = self.released if released is None else released
        return [GaussianEvent(self.gate_sigma, GATE_SENSITIVITY)] * g + [
            GaussianEvent(self.vote_sigma, HISTOGRAM_SENSITIVITY)
        ] * r


def calibrate(config: DpVoteConfig, max_tokens: int) -> Calibration:
    """The sigmas for which the worst case (every gate and vote used) composes to epsilon.

    Gaussian RDP is linear in the order: ``a * R`` with ``R = sum(sens^2 / (2 sigma^2))``.
    The largest ``R`` that converts to ``epsilon`` at ``delta`` is that of one
    Gaussian release of sensitivity 1 at :func:`calibrate_sigma`'s sigma; the gate gets
    ``gate_share`` of it, split over its queries, the votes the rest.
    """
    check_count(max_tokens, "max_tokens", minimum=1)
    gated = min(config.gate_tokens, max_tokens)
    released = min(config.release_tokens, gated)
    unit = calibrate_sigma(config.epsilon, 1.0, config.delta, 1)
    total = 1.0 / (2.0 * unit * unit)
    gate_rdp = config.gate_share * total / gated  # per gate query
    vote_rdp = (1.0 - config.gate_share) * total / released  # per vote release
    gate_sigma = GATE_SENSITIVITY / math.sqrt(2.0 * gate_rdp)
    vote_sigma = HISTOGRAM_SENSITIVITY / math.sqrt(2.0 * vote_rdp)
    return Calibration(gated, released, gate_sigma, vote_sigma)


def group_of(key: str, groups: int) -> int:
    """The group of a document: a hash of its key alone (never of the other documents)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % groups


def assign_groups(documents: Sequence[tuple[str, str]], groups: int) -> list[list[tuple[str, str]]]:
    """The documents split into ``groups`` disjoint lists, each in the given order.

    Chunks of one document (the same key) land in the same group.
    """
    out: list[list[tuple[str, str]]] = [[] for _ in range(groups)]
    for key, text in documents:
        out[group_of(str(key), groups)].append((str(key), text))
    return out


class DpVoteLedger(NoiseLedger):
    """The ledger of one answer: gated tokens carry the gate's sigma; events are exact."""

    def __init__(self, calibration: Calibration) -> None:
        super().__init__(sensitivity=GATE_SENSITIVITY)
        self.calibration = calibration
        self.gated = 0
        self.released = 0

    def events(self) -> list[GaussianEvent]:
        return self.calibration.events(self.gated, self.released)


@dataclass(slots=True)
class GroupPasses:
    """The groups' prompts in one batch of fixed width, decoded together with one KV cache."""

    model: Any
    prompts: list[list[int]]
    width: int
    pad_id: int
    cache: Any = None
    mask: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    steps: int = field(default=0)

    def prefill(self) -> None:
        device = next(self.model.parameters()).device
        rows = len(self.prompts)
        ids = torch.full((rows, self.width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((rows, self.width), dtype=torch.long)
        for i, p in enumerate(self.prompts):
            ids[i, self.width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, self.width - len(p) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        self.mask, self.positions = mask.to(device), positions.to(device)
        fwd = self.model(
            input_ids=ids.to(device),
            attention_mask=self.mask,
            position_ids=self.positions,
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache = fwd.cache
        self.logits = fwd.logits[:, -1, :].float()

    def clone(self) -> GroupPasses:
        """A copy with its own KV cache (one prefill shared by several answers, e.g. an ε sweep)."""
        other = GroupPasses(self.model, self.prompts, self.width, self.pad_id)
        other.cache = copy.deepcopy(self.cache)
        other.mask = None if self.mask is None else self.mask.clone()
        other.positions = None if self.positions is None else self.positions.clone()
        other.logits = None if self.logits is None else self.logits.clone()
        other.steps = self.steps
        return other

    def step(self, token: int) -> None:
        assert self.mask is not None and self.positions is not None
        rows = len(self.prompts)
        device = self.mask.device
        self.mask = torch.cat(
            [self.mask, torch.ones((rows, 1), dtype=torch.long, device=device)], 1
        )
        self.positions = self.positions[:, -1:] + 1
        fwd = self.model(
            input_ids=torch.full((rows, 1), token, dtype=torch.long, device=device),
            attention_mask=self.mask,
            position_ids=self.positions,
            cache=self.cache,
            use_cache=True,
        )
        self.cache = fwd.cache
        self.logits = fwd.logits[:, -1, :].float()
        self.steps += 1


class DpVoteMechanism:
    """One answer of ``dp_vote``: the gate, the private vote and the fallback, per token.

    ``vote_fn`` replaces the model's group passes (tests: a toy model): it is given
    the tokens generated so far and returns one vote (token id) per group.
    """

    def __init__(
        self,
        config: DpVoteConfig,
        *,
        max_tokens: int,
        generator: NoiseSource,
        prompt_length: int,
        documents: Sequence[tuple[str, str]] = (),
        groups: GroupPasses | None = None,
        vote_fn: Callable[[list[int]], Sequence[int | None]] | None = None,
    ) -> None:
        if groups is None and vote_fn is None:
            raise InvalidParameterError("dp_vote needs the group passes or a vote function")
        self.config = config
        self.generator = check_source(generator)
        self.calibration = calibrate(config, max_tokens)
        self.votes_ledger = DpVoteLedger(self.calibration)
        self.ledger: NoiseLedger = self.votes_ledger
        self.prompt_length = prompt_length
        self.assignment = assign_groups(documents, config.groups)
        self.groups = groups
        self.vote_fn = vote_fn
        self._generated: list[int] = []
        self._prefilled = groups is not None and groups.logits is not None
        self._step = 0

    # ------------------------------------------------------------------ votes
    def _sync(self, input_ids: torch.Tensor) -> None:
        new = input_ids[0, self.prompt_length + len(self._generated) :].tolist()
        for token in new:
            self._generated.append(int(token))
            if self.groups is not None and self._prefilled and self._gate_left():
                self.groups.step(int(token))

    def _gate_left(self) -> bool:
        return self.votes_ledger.gated < self.calibration.gated

    def votes(self) -> list[int | None]:
        """One vote per group, its arg-max next token; None: the group has no document."""
        if self.vote_fn is not None:
            return [None if v is None else int(v) for v in self.vote_fn(list(self._generated))]
        assert self.groups is not None
        # With no document at all every group abstains, but the passes still run: the
        # groups' prompts are then the public one at the same width, so an answer takes the
        # same work whether or not anything was retrieved (its timing says nothing).
        if not self._prefilled:
            self.groups.prefill()
            self._prefilled = True
        assert self.groups.logits is not None
        top = torch.argmax(self.groups.logits, dim=-1).tolist()
        return [
            None if not members else int(v) for v, members in zip(top, self.assignment, strict=True)
        ]

    # ------------------------------------------------------------------- step
    def choose(self, public_token: int, vocab: int) -> tuple[int, str]:
        """The next token and why, given the public model's arg-max."""
        cal, cfg = self.calibration, self.config
        if not self._gate_left():
            return public_token, GATE_SPENT
        votes = [v for v in self.votes() if v is not None and 0 <= v < vocab]
        histogram = torch.bincount(torch.tensor(votes, dtype=torch.long), minlength=vocab).to(
            torch.float64
        )
        # The gate's query: the votes of the strongest token other than the public one.
        alternative = histogram.clone()
        alternative[public_token] = 0.0
        like = torch.zeros(1, dtype=torch.float64)
        strongest = float(alternative.max())
        noisy = strongest + cal.gate_sigma * float(self.generator.normal((1,), like)[0])
        self.votes_ledger.gated += 1
        if noisy < cfg.threshold * cfg.groups:
            return public_token, AGREED
        if self.votes_ledger.released >= cal.released:
            return public_token, RELEASE_SPENT
        noisy_votes = histogram + cal.vote_sigma * self.generator.normal((vocab,), histogram)
        self.votes_ledger.released += 1
        token = int(torch.argmax(noisy_votes))
        if float(noisy_votes[token]) < cfg.release_z * cal.vote_sigma:
            return public_token, WEAK_VOTE  # post-processing: too few votes to stand out
        return token, RELEASED

    def step(
        self, input_ids: torch.Tensor, scores: torch.Tensor, public_scores: torch.Tensor | None
    ) -> torch.Tensor:
        if public_scores is None:
            raise InvalidParameterError("the dp_vote defense needs the public prompt's logits")
        if public_scores.dim() != 2 or public_scores.shape[0] != 1:
            raise InvalidParameterError(
                f"dp_vote decodes one sequence at a time; got {tuple(public_scores.shape)}"
            )
        self._sync(input_ids)
        public_token = int(torch.argmax(public_scores[0]))
        token, reason = self.choose(public_token, public_scores.shape[-1])
        gated = reason in (AGREED, RELEASED, RELEASE_SPENT, WEAK_VOTE)
        self.ledger.record(self._step, self.calibration.gate_sigma if gated else None, (reason,))
        self._step += 1
        out = torch.full_like(public_scores, float("-inf"))
        out[0, token] = 0.0
        return out

    # ----------------------------------------------------------------- report
    def report(self, filter_: IndividualRdpFilter | None = None) -> dict[str, Any]:
        """What the receipt adds for dp_vote: budgets used and each document's group and charge.

        Every document is in exactly one group; a group with a document was used
        (its vote entered every gated token), so its documents are charged the
        answer's calibrated events.  Groups without documents are the public prompt and
        charge nobody.  With ``filter_`` the charge is also given as RDP at its order.
        """
        cal = self.calibration
        counts = self.ledger.reason_counts()
        documents = []
        for g, members in enumerate(self.assignment):
            seen: set[str] = set()
            for key, _text in members:
                if key in seen:
                    continue
                seen.add(key)
                documents.append({"document": key, "group": g})
        charge = None
        if filter_ is not None:
            charge = filter_.charge_of(cal.events())
            for d in documents:
                d["charge_rdp"] = charge
        spent_out = counts.get(GATE_SPENT, 0) + counts.get(RELEASE_SPENT, 0)
        store_epsilon = store_level_epsilon(cal, self.config.delta)
        return {
            "groups": self.config.groups,
            "groups_used": sum(1 for m in self.assignment if m),
            "gate_sigma": cal.gate_sigma,
            "vote_sigma": cal.vote_sigma,
            "gate_queries": self.votes_ledger.gated,
            "gate_queries_allowed": cal.gated,
            "released_tokens": self.votes_ledger.released,
            "released_tokens_allowed": cal.released,
            "agreed_tokens": counts.get(AGREED, 0),
            "weak_vote_tokens": counts.get(WEAK_VOTE, 0),
            "public_fallback_tokens": spent_out,
            "budget_spent": spent_out > 0,
            "documents": documents,
            "charge_rdp": charge,
            "epsilon_store_level": store_epsilon,
            "note": (
                f"{self.votes_ledger.released} token(s) were chosen by the private vote "
                f"(of {cal.released} allowed) and {counts.get(AGREED, 0)} agreed with the "
                "public model."
                + (
                    f" The answer's budget was spent: {spent_out} later token(s) came from "
                    "the public model alone."
                    if spent_out
                    else ""
                )
                + f" The answer's ε is for adding or removing one of the documents it was given;"
                f" against adding or removing a document anywhere in the store, when retrieval"
                f" keeps only the top k (one document can push another out), it is"
                f" ε {store_epsilon:.1f} at the same δ."
            ),
        }


# Adding or removing one document of the store changes at most this many groups: its own,
# and the group of the one document it pushes out of (or lets into) the top k -- retrieval
# under a formal defense keeps the top k *documents*, each as one unit
# (companion/rag/budget.py), so one document can displace only one other.
STORE_GROUPS_CHANGED = 2


def store_events(calibration: Calibration) -> list[GaussianEvent]:
    """The answer's releases against store-level add/remove: each of sensitivity x2."""
    return [
        GaussianEvent(e.sigma, STORE_GROUPS_CHANGED * e.sensitivity) for e in calibration.events()
    ]


def store_level_epsilon(calibration: Calibration, delta: float) -> float:
    """The answer's ε against store-level add/remove when retrieval keeps the top k documents.

    Removing a document may let the (k+1)-th candidate document in: two groups change,
    so every release has twice its sensitivity (docs/methods/dprag.md, "Scope").
    """
    return RdpAccountant().compose_all(store_events(calibration)).get_epsilon(delta)


def fit_group(
    tokenizer: Any,
    prompt_for: Callable[[str], list[int]],
    members: Sequence[tuple[str, str]],
    group_tokens: int,
    width: int,
    separator: str = "\n\n",
) -> list[int]:
    """One group's prompt: its documents' text cut to ``group_tokens``, then 8 tokens at a
    time until the prompt (re-tokenised at the cut) fits ``width`` or the text is empty."""
    text = separator.join(t.strip() for _k, t in members if t.strip())
    ids = list(tokenizer.encode(text, add_special_tokens=False))[:group_tokens]
    budget = len(ids)
    while True:
        cut = tokenizer.decode(ids[:budget], skip_special_tokens=True).rstrip("\ufffd")
        prompt = list(prompt_for(cut))
        if len(prompt) <= width or budget <= 0:
            return prompt
        budget -= 8


def group_prompts(
    tokenizer: Any,
    prompt_for: Callable[[str], list[int]],
    assignment: Sequence[Sequence[tuple[str, str]]],
    group_tokens: int,
) -> tuple[list[list[int]], int]:
    """Each group's prompt (its documents' text cut to ``group_tokens``) and the batch width.

    The width depends only on the public prompt and ``group_tokens``; a prompt that
    would exceed it (re-tokenisation at the cut) is cut further.
    """
    public = list(prompt_for(""))
    overhead = len(prompt_for("x")) - len(public)
    width = len(public) + group_tokens + max(0, overhead) + 4
    prompts = []
    for members in assignment:
        if not members:
            prompts.append(public)
            continue
        prompt = fit_group(tokenizer, prompt_for, members, group_tokens, width)
        if len(prompt) > width:  # pragma: no cover - an empty context always fits
            raise InvalidParameterError("a group's prompt does not fit its width")
        prompts.append(prompt)
    return prompts, width


def group_passes(
    config: DpVoteConfig,
    model: Any,
    tokenizer: Any,
    documents: Sequence[tuple[str, str]],
    prompt_for: Callable[[str], list[int]],
) -> GroupPasses:
    """The batched passes of ``config.groups`` groups over ``documents`` (not yet prefilled)."""
    assignment = assign_groups(documents, config.groups)
    prompts, width = group_prompts(tokenizer, prompt_for, assignment, config.group_tokens)
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = tokenizer.eos_token_id or 0
    return GroupPasses(model, prompts, width, int(pad))


def _calibrated(config: DpVoteConfig, max_tokens: int) -> list[GaussianEvent]:
    return calibrate(config, max_tokens).events()


def _store_calibrated(config: DpVoteConfig, max_tokens: int) -> list[GaussianEvent]:
    return store_events(calibrate(config, max_tokens))


def _build(config: DpVoteConfig, ctx: BuildContext) -> DpVoteMechanism:
    if ctx.model is None or ctx.prompt_for is None:
        raise InvalidParameterError(
            "the dp_vote defense runs its own passes: the generation needs the model and "
            "prompt_for (the caller's prompt for one group's context)"
        )
    return DpVoteMechanism(
        config,
        max_tokens=ctx.max_tokens,
        generator=ctx.generator,
        prompt_length=ctx.prompt_length,
        documents=ctx.documents,
        groups=group_passes(config, ctx.model, ctx.tokenizer, ctx.documents, ctx.prompt_for),
    )


DEFENSE = Defense(
    name="dp_vote",
    label="Per-document DP vote",
    summary="What only one of your documents says stays deniable; what many agree on can be "
    "answered.",
    guarantee=Guarantee(
        formal=True,
        relation=ADD_REMOVE_DOCUMENT,
        covers="every token",
        note="The retrieved documents are split into disjoint groups; each group votes for the "
        "next token and only a noisy count and a noisy vote histogram are released, so one "
        "document can change one vote. The answer is differentially private for each single "
        "document (adding or removing it), calibrated before generation for the longest "
        "answer allowed; tokens on which the groups agree with the model without documents "
        "cost only the gate. A fact written in only one document is not answered; one that "
        "many documents agree on can be.",
    ),
    build=_build,
    calibrated=_calibrated,
    store_calibrated=_store_calibrated,
    config_type=DpVoteConfig,
    two_pass=True,
    private_pass=False,
    knobs=(
        Knob("epsilon", 0.5, "privacy budget of the whole answer, per document"),
        Knob("groups", 1, "voter groups the documents are split into (more: more passes)"),
        Knob("release_tokens", 1, "tokens the private vote may choose before the answer ends"),
        Knob("threshold", 0.05, "share of groups that must agree with the model alone"),
    ),
)
