"""``dp_answer``: one private selection per answer over the document groups' short answers.

The admitted documents are dealt into ``groups`` disjoint groups by a hash of each
document's content (as in ``dp_vote``).  Every group reads only its own documents and
proposes a short answer (greedy, at most ``answer_tokens`` tokens, all groups in one
batched pass); the proposals are normalised (:func:`normalise`) and counted.  One
noisy selection is released per answer: Gaussian noise on the count of every proposed
answer, the arg-max kept only if its noisy count reaches the threshold ``tau``
(:func:`calibrate`); otherwise nothing is released and the public model (the
question without documents) answers alone.  The released answer is emitted as it is,
token by token, through the generation loop.

Privacy (docs/methods/dprag.md, "dp_answer"): adding or removing one document of the
store changes at most two groups (its own and the one whose document it pushes out of
or lets into the top-k documents), so the histogram of proposals moves by at most
L2 ``2 sqrt 2``; on a fixed set of answers that is a Gaussian mechanism.  The set of
proposed answers is itself data-dependent: an answer proposed only by the changed
groups (count <= 2) passes ``tau`` with probability at most ``threshold_delta``.  The
answer is ``(epsilon, delta + threshold_delta)``-DP for store-level add/remove of one
document, with ``epsilon`` its configured value (the Gaussian part's RDP converts to it
at ``delta``); the lifetime filter is charged the Gaussian part's RDP plus a surcharge
that pays for ``threshold_delta`` (:func:`threshold_surcharge`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
from companion.decoding.defenses.dp_vote import assign_groups, fit_group
from companion.decoding.noise import NoiseSource, check_source
from py_core.accounting import DEFAULT_DELTA, GaussianEvent
from py_core.errors import InvalidParameterError
from py_core.validate import check_count, check_delta, check_positive

ADD_REMOVE_STORE_DOCUMENT = "adding or removing one document of the store"
GROUPS_CHANGED = 2  # one document changes its own group and at most one other (top-k documents)
GROUP_SENSITIVITY = math.sqrt(2.0)  # one group's proposal moves from one answer to another
STORE_SENSITIVITY = GROUPS_CHANGED * GROUP_SENSITIVITY
# Answers that can appear in only one of two neighbouring stores: each changed group
# proposes one answer in each neighbour, so at most 2 x 2 (count <= 2 on one side, 0 on
# the other).
UNSHARED_ANSWERS = 2 * GROUPS_CHANGED
# The groups needed at a given epsilon: the threshold must be at most this share of them.
THRESHOLD_SHARE = 0.55
# The top-k documents an answer reads: this many per group (hash collisions leave some
# groups empty and give others two).
DOCUMENTS_PER_GROUP = 1.25

# The share of a document's delta that dp_answer's threshold deltas may hold at most, over
# its lifetime; the rest is the digest's (companion/rag/digest.py).
THRESHOLD_DELTA_CAP = 0.99

RELEASED = "released_answer"  # the selection released a proposed answer
NO_ANSWER = "no_supported_answer"  # no answer's noisy count reached the threshold


def _tail(z: float) -> float:
    """P[N(0,1) > z]."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def tail_quantile(p: float) -> float:
    """The z with P[N(0,1) > z] = p (bisection on erfc: exact in the far tail)."""
    if not 0.0 < p < 0.5:
        raise InvalidParameterError(f"a tail probability must be in (0, 0.5); got {p!r}")
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _tail(mid) > p:
            lo = mid
        else:
            hi = mid
    return hi


# Words that carry no answer: a proposal's key drops them, and every word of the public
# prompt (the question and the instructions), so "The drug for X is Zolvexin" and
# "Zolvexin." vote for the same key.  All of it is public.
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "of",
        "for",
        "to",
        "in",
        "on",
        "at",
        "by",
        "with",
        "and",
        "or",
        "as",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "which",
        "what",
        "who",
        "whom",
        "when",
        "where",
        "why",
        "how",
        "does",
        "do",
        "did",
        "has",
        "have",
        "had",
        "can",
        "could",
        "will",
        "would",
        "should",
        "may",
        "might",
        "shall",
        "i",
        "you",
        "he",
        "she",
        "we",
        "they",
        "them",
        "his",
        "her",
        "their",
        "our",
        "your",
        "answer",
        "name",
        "named",
        "called",
        "there",
        "here",
        "so",
        "then",
        "than",
        "also",
        "only",
        "just",
        "very",
        "please",
        "reply",
        "given",
        "gives",
        "give",
        "gave",
        "uses",
        "used",
        "use",
        "shows",
        "showed",
        "show",
        "says",
        "said",
        "note",
        "unknown",
    ]
)
_MEASURE = re.compile(r"[\d.,/\-]+|mg|ml|mcg|kg|g|units?|%")
_WORD = re.compile(r"[\w][\w\-./]*[\w]|[\w]")


def _stem(word: str) -> str:
    return word[:4]


def normalise(text: str, public: str = "", max_words: int = 6) -> str:
    """A proposal's key: the words of its first line, NFKC and case-folded, less the stop
    words and every word (by its first four letters) of ``public`` -- the public prompt, so
    the question's own words -- at most ``max_words`` of them.  "" when nothing is left
    (the group abstains)."""
    line = unicodedata.normalize("NFKC", text).strip().split("\n", 1)[0].casefold()
    asked = {_stem(w) for w in _WORD.findall(unicodedata.normalize("NFKC", public).casefold())}
    kept = [w for w in _WORD.findall(line) if w not in STOP_WORDS and _stem(w) not in asked]
    worded = [w for w in kept if not _MEASURE.fullmatch(w)]
    if worded:  # a measurement beside a word ("Zolvexin 25 mg") is not the answer
        kept = worded
    return " ".join(kept[:max_words])


def displayed(key: str) -> str:
    """The released key as the answer shows it: its first letter capitalised and the letters
    of a word with a digit in upper case ("h-36" -> "H-36", "fenorvane" -> "Fenorvane").  A
    function of the key alone (post-processing); the documents' own casing is not read."""
    words = [w.upper() if any(c.isdigit() for c in w) else w for w in key.split(" ")]
    text = " ".join(words)
    return text[:1].upper() + text[1:]


@dataclass(frozen=True, slots=True)
class DpAnswerConfig:
    """One private selection per answer, calibrated to ``epsilon`` for store-level add/remove.

    ``groups`` 0: the per-epsilon setting (:func:`vote_settings`); ``top_k`` 0: that
    setting's context size.  ``sample_rate`` q < 1: each admitted document is read with
    probability q, by its own coin thrown in the admission before the top-k documents are
    chosen (:func:`companion.rag.budget.poisson_sample`); every admitted document is charged
    the amplified event, :class:`py_core.accounting.SampledGaussianEvent`.
    """

    epsilon: float = 5.0
    delta: float = DEFAULT_DELTA
    groups: int = 0
    top_k: int = 0
    answer_tokens: int = 16  # "The <device> failed and showed error code M-31": ~15 tokens
    group_tokens: int = 64
    threshold_delta: float = 1e-8
    sample_rate: float = 1.0

    def __post_init__(self) -> None:
        check_positive(self.epsilon, "epsilon")
        check_delta(self.delta)
        check_delta(self.threshold_delta)
        if self.groups:
            check_count(self.groups, "groups", minimum=2)
        if self.top_k:
            check_count(self.top_k, "top_k", minimum=1)
        check_count(self.answer_tokens, "answer_tokens", minimum=1)
        check_count(self.group_tokens, "group_tokens", minimum=8)
        rate = float(self.sample_rate)
        if not (math.isfinite(rate) and 0.0 < rate <= 1.0):
            raise InvalidParameterError(f"sample_rate must be in (0, 1]; got {self.sample_rate!r}")


@dataclass(frozen=True, slots=True)
class Calibration:
    """The noise and threshold of one answer's selection."""

    sigma: float  # Gaussian noise on each proposed answer's count
    tau: float  # the noisy count an answer needs to be released
    groups: int
    top_k: int
    sample_rate: float

    def event(self, sensitivity: float = STORE_SENSITIVITY) -> GaussianEvent:
        return GaussianEvent(self.sigma, sensitivity)


def selection_sigma(epsilon: float, delta: float) -> float:
    """The sigma for which one Gaussian release of sensitivity ``2 sqrt 2`` is (epsilon, delta)."""
    return STORE_SENSITIVITY * calibrate_sigma(float(epsilon), 1.0, float(delta), 1)


def selection_threshold(sigma: float, threshold_delta: float) -> float:
    """``tau`` such that an answer proposed by at most 2 groups on one side only passes with
    probability <= ``threshold_delta`` / 4 (four such answers at most; see the proof)."""
    return GROUPS_CHANGED + sigma * tail_quantile(threshold_delta / UNSHARED_ANSWERS)


def vote_settings(
    epsilon: float, delta: float = DEFAULT_DELTA, threshold_delta: float = 1e-8
) -> tuple[int, int]:
    """(groups, top_k documents) for an answer at ``epsilon``: enough groups that the
    threshold is :data:`THRESHOLD_SHARE` of them, 1.25 documents per group."""
    tau = selection_threshold(selection_sigma(epsilon, delta), threshold_delta)
    groups = max(4, math.ceil(tau / THRESHOLD_SHARE))
    return groups, math.ceil(DOCUMENTS_PER_GROUP * groups)


def calibrate(config: DpAnswerConfig) -> Calibration:
    sigma = selection_sigma(config.epsilon, config.delta)
    tau = selection_threshold(sigma, config.threshold_delta)
    groups, top_k = vote_settings(config.epsilon, config.delta, config.threshold_delta)
    groups = config.groups or groups
    top_k = config.top_k or (
        top_k if not config.groups else math.ceil(DOCUMENTS_PER_GROUP * groups)
    )
    return Calibration(sigma, tau, groups, top_k, float(config.sample_rate))


def select(
    proposals: Sequence[str | None], sigma: float, tau: float, generator: NoiseSource
) -> tuple[str | None, dict[str, Any]]:
    """The private selection: the proposed answer with the largest noisy count, if it reaches
    ``tau``; None otherwise.  ``proposals``: one normalised key per group, None (abstain) for
    a group without documents or with an empty proposal.  Only the released key (or None)
    leaves this function: the counts and the noise stay inside."""
    counts: dict[str, int] = {}
    for key in proposals:
        if key:
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None, {"answers_proposed": 0}
    keys = sorted(counts)  # a fixed order: the noise draw does not depend on group order
    values = torch.tensor([float(counts[k]) for k in keys], dtype=torch.float64)
    noisy = values + sigma * generator.normal((len(keys),), values)
    best = int(torch.argmax(noisy))
    released = keys[best] if float(noisy[best]) >= tau else None
    return released, {"answers_proposed": len(keys)}


GROUP_INSTRUCTION = (
    "Answer the question from the note in one to three words. If the note does not say, "
    "answer: unknown."
)


def proposal_messages(question: str, note: str) -> list[dict[str, str]]:
    """A group's prompt: the question first (shared by every group, computed once), then
    its own documents."""
    return [
        {"role": "system", "content": GROUP_INSTRUCTION},
        {"role": "user", "content": f"Question: {question}\nNote: {note}\nAnswer:"},
    ]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class ProposalPasses:
    """The groups' prompts in one batch; their shared prefix (the instruction and the
    question: public) computed once; each row decodes its own tokens.

    Row ``i`` is ``prefix + [pads] + suffix_i`` at one public width, the pads masked out
    (positions continue the prefix's), so the prefix's keys and values are computed at batch
    one and repeated for every row.  In float32 this moves logits by about 1e-5 against a
    full pass per row; the privacy argument is about the vote counts, whatever the logits.
    """

    def __init__(
        self, model: Any, prompts: list[list[int]], width: int, pad_id: int, prefix: int = 0
    ) -> None:
        self.model, self.prompts, self.width, self.pad_id = model, prompts, width, pad_id
        self.prefix = max(0, min(prefix, *(len(p) - 1 for p in prompts))) if prompts else 0
        self.finished: list[bool] = []

    def _first(self, device: Any) -> tuple[Any, torch.Tensor, torch.Tensor]:
        rows, width, n = len(self.prompts), self.width, self.prefix
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        for i, p in enumerate(self.prompts):
            ids[i, :n] = torch.tensor(p[:n], dtype=torch.long)
            mask[i, :n] = 1
            tail = p[n:]
            ids[i, width - len(tail) :] = torch.tensor(tail, dtype=torch.long)
            mask[i, width - len(tail) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        mask, positions, ids = mask.to(device), positions.to(device), ids.to(device)
        if n == 0:
            fwd = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
            )
            return fwd, mask, positions
        head = self.model(
            input_ids=ids[:1, :n],
            attention_mask=mask[:1, :n],
            position_ids=positions[:1, :n],
            use_cache=True,
            logits_to_keep=1,
        )
        cache = head.cache
        cache.batch_repeat_interleave(rows)
        fwd = self.model(
            input_ids=ids[:, n:],
            attention_mask=mask,
            position_ids=positions[:, n:],
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return fwd, mask, positions

    def run(self, steps: int, stops: set[int]) -> list[list[int]]:
        """Greedy ``steps`` tokens per row (all rows, all steps: the work does not depend on
        the documents); a row's proposal ends at its first stop token."""
        device = next(self.model.parameters()).device
        rows = len(self.prompts)
        fwd, mask, positions = self._first(device)
        out: list[list[int]] = [[] for _ in range(rows)]
        done = [False] * rows
        self.finished = done  # which rows stopped before the step limit
        for step in range(steps):
            tokens = torch.argmax(fwd.logits[:, -1, :], dim=-1).tolist()
            for i, t in enumerate(tokens):
                if not done[i]:
                    if t in stops:
                        done[i] = True
                    else:
                        out[i].append(int(t))
            if step == steps - 1:
                break
            mask = torch.cat([mask, torch.ones((rows, 1), dtype=torch.long, device=device)], 1)
            positions = positions[:, -1:] + 1
            fwd = self.model(
                input_ids=torch.tensor(tokens, dtype=torch.long, device=device).unsqueeze(1),
                attention_mask=mask,
                position_ids=positions,
                cache=fwd.cache,
                use_cache=True,
            )
        return out


def _stop_ids(tokenizer: Any) -> set[int]:
    stops: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        stops.add(eos)
    for text in ("\n", ".\n"):
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) == 1:
            stops.add(int(ids[0]))
    return stops


class DpAnswerMechanism:
    """One answer of ``dp_answer``: the groups' proposals, one selection, the released text.

    ``propose`` replaces the model's group passes (tests: a toy model): it is given the
    group assignment and returns one proposal text per group (None: abstain).
    """

    def __init__(
        self,
        config: DpAnswerConfig,
        *,
        generator: NoiseSource,
        tokenizer: Any,
        documents: Sequence[tuple[str, str]] = (),
        propose: Callable[[list[list[tuple[str, str]]]], Sequence[str | None]] | None = None,
        passes: Callable[[list[list[tuple[str, str]]]], Sequence[str | None]] | None = None,
        public_text: str = "",
    ) -> None:
        self.public_text = public_text
        self.config = config
        self.generator = check_source(generator)
        self.calibration = calibrate(config)
        self.tokenizer = tokenizer
        self.assignment = assign_groups(documents, self.calibration.groups)
        chosen = propose or passes
        if chosen is None:
            raise InvalidParameterError("dp_answer needs the group passes or a proposal function")
        self._propose = chosen
        self.ledger = NoiseLedger(sensitivity=GROUP_SENSITIVITY)
        self.released: str | None = None
        self.selected = False
        self.facts: dict[str, Any] = {}
        self._forced: list[int] = []
        self._eos = getattr(tokenizer, "eos_token_id", None)
        self._step = 0

    def choose(self) -> str | None:
        raw = self._propose(self.assignment)
        keys = [
            None if (not members or text is None) else (normalise(text, self.public_text) or None)
            for text, members in zip(raw, self.assignment, strict=True)
        ]
        cal = self.calibration
        self.released, self.facts = select(keys, cal.sigma, cal.tau, self.generator)
        self.selected = True
        if self.released is not None:
            text = displayed(self.released)
            self._forced = list(self.tokenizer.encode(text, add_special_tokens=False))
        return self.released

    def step(
        self, input_ids: torch.Tensor, scores: torch.Tensor, public_scores: torch.Tensor | None
    ) -> torch.Tensor:
        if public_scores is None:
            raise InvalidParameterError("dp_answer needs the public pass (two_pass)")
        if not self.selected:
            self.choose()
            self.ledger.record(
                0, self.calibration.sigma, (RELEASED if self.released else NO_ANSWER,)
            )
        self._step += 1
        if self.released is None:
            return public_scores  # no answer released: the public model answers alone
        if self._forced:
            token = self._forced.pop(0)
        elif isinstance(self._eos, int):
            token = self._eos
        else:
            return public_scores
        out = torch.full_like(public_scores, float("-inf"))
        out[0, token] = 0.0
        return out

    def report(self) -> dict[str, Any]:
        cal = self.calibration
        return {
            "groups": cal.groups,
            "groups_used": sum(1 for m in self.assignment if m),
            "sigma": cal.sigma,
            "threshold": cal.tau,
            "sample_rate": cal.sample_rate,
            "released": self.released is not None,
            "epsilon_store_level": self.config.epsilon,
            "threshold_delta": self.config.threshold_delta,
            "note": (
                "One answer proposed by the document groups was released by a noisy selection."
                if self.released is not None
                else "No answer was proposed by enough document groups to be released; the "
                "model answered without the documents."
            ),
        }


def group_prompts_shared(
    tokenizer: Any,
    question: str,
    assignment: Sequence[Sequence[tuple[str, str]]],
    group_tokens: int,
) -> tuple[list[list[int]], int, int]:
    """Each group's prompt (its documents cut to ``group_tokens``), the batch width and the
    shared prefix's length -- both functions of the question and ``group_tokens`` only."""
    from companion.rag.prompt import encode_chat

    def prompt(note: str) -> list[int]:
        return encode_chat(tokenizer, proposal_messages(question, note))

    empty = prompt("")
    prefix = common_prefix(prompt("a"), prompt("b"))
    width = len(empty) + group_tokens + 8
    prompts = []
    for members in assignment:
        if not members:
            prompts.append(empty)
            continue
        prompts.append(fit_group(tokenizer, prompt, members, group_tokens, width, "\n"))
    return prompts, width, prefix


def last_question(messages: Sequence[dict[str, str]]) -> str:
    users = [m["content"] for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


def group_proposer(
    model: Any, tokenizer: Any, question: str, config: DpAnswerConfig
) -> Callable[[list[list[tuple[str, str]]]], list[str | None]]:
    """The model's proposals: one batched greedy pass over every group's prompt."""
    stops = _stop_ids(tokenizer)

    def propose(assignment: list[list[tuple[str, str]]]) -> list[str | None]:
        prompts, width, prefix = group_prompts_shared(
            tokenizer, question, assignment, config.group_tokens
        )
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id or 0
        with torch.inference_mode():
            passes = ProposalPasses(model, prompts, width, int(pad), prefix)
            rows = passes.run(config.answer_tokens, stops)
        texts = []
        for r, members, ended in zip(rows, assignment, passes.finished, strict=True):
            text = tokenizer.decode(r, skip_special_tokens=True)
            if not ended:  # cut at the step limit: its last word may be cut too
                text = text.rsplit(" ", 1)[0] if " " in text.strip() else ""
            texts.append(None if not members else text)
        return texts

    return propose


def _calibrated(config: DpAnswerConfig, max_tokens: int) -> list[Any]:
    """The retrieved-document relation (one group changes): sensitivity sqrt 2."""
    return [_event(config, GROUP_SENSITIVITY)]


def _store_calibrated(config: DpAnswerConfig, max_tokens: int) -> list[Any]:
    return [_event(config, STORE_SENSITIVITY)]


def _event(config: DpAnswerConfig, sensitivity: float) -> Any:
    cal = calibrate(config)
    if cal.sample_rate < 1.0:
        from py_core.accounting import SampledGaussianEvent

        return SampledGaussianEvent(cal.sigma, sensitivity, cal.sample_rate)
    return cal.event(sensitivity)


def _build(config: DpAnswerConfig, ctx: BuildContext) -> DpAnswerMechanism:
    if ctx.model is None:
        raise InvalidParameterError(
            "the dp_answer defense runs its own passes: the generation needs the model"
        )
    documents = list(ctx.documents)
    return DpAnswerMechanism(
        config,
        generator=ctx.generator,
        tokenizer=ctx.tokenizer,
        documents=documents,
        passes=group_proposer(ctx.model, ctx.tokenizer, ctx.question, config),
        public_text=ctx.tokenizer.decode(list(ctx.public_ids), skip_special_tokens=True),
    )


def context_size(config: DpAnswerConfig) -> int:
    """How many top documents an answer reads (the formal retrieval's k)."""
    return calibrate(config).top_k


def threshold_surcharge(
    config: DpAnswerConfig, charge: float, budget: float, order: float, delta: float
) -> float:
    """The RDP added to each charge so that a document's threshold deltas fit its budget.

    With ``N = budget / charge`` (a real number), each answer pays ``f(N td) / N``,
    ``f(T) = -log(1 - T / delta) / (order - 1)`` (what converting the Rényi part at
    ``delta - T`` costs).  By Jensen over the budget shares of each configuration that
    charges a document, that pays for any mix of them (docs/methods/dprag.md, "A lifetime
    of answers"); N rounded down, as before, under-paid some mixes.

    When N answers' threshold deltas would pass ``THRESHOLD_DELTA_CAP`` of ``delta`` (a
    small charge: a small epsilon, or Poisson subsampling's amplified one), the charge is
    first raised to ``budget / M``, M = the cap's share of delta over ``td``; infinity (no
    document can pay: fail closed) only when not even one answer's threshold delta fits.
    """
    td = float(config.threshold_delta)
    most = THRESHOLD_DELTA_CAP * delta / td  # answers whose deltas fit (the digest: the rest)
    if most < 1.0:
        return math.inf
    n = budget / charge if charge > 0 else 1.0  # real: see the docstring
    raise_to = 0.0
    if n > most:  # more answers than the deltas allow: at most M of them
        raise_to = budget / most - charge
        n = most
    share = min(n * td / delta, THRESHOLD_DELTA_CAP)
    return raise_to + -math.log1p(-share) / ((order - 1.0) * n)


DEFENSE = Defense(
    name="dp_answer",
    label="Per-document DP answer",
    summary="One noisy selection among the short answers of disjoint document groups: what "
    "many of your documents agree on is answered, what one says is not.",
    guarantee=Guarantee(
        formal=True,
        relation=ADD_REMOVE_STORE_DOCUMENT,
        store_level=True,
        covers="every token",
        note="The documents are split into disjoint groups; each group proposes a short answer "
        "and one noisy count of the proposals is released per answer, with a threshold that an "
        "answer proposed by one or two groups passes only with probability threshold_delta. "
        "The answer is differentially private for adding or removing any one document of the "
        "store, at the stated epsilon and delta plus threshold_delta. Only an answer that many "
        "groups propose comes out; otherwise the model answers without the documents.",
    ),
    build=_build,
    calibrated=_calibrated,
    store_calibrated=_store_calibrated,
    config_type=DpAnswerConfig,
    context_size=lambda config: context_size(config),
    surcharge=lambda config, charge, budget, order, delta: threshold_surcharge(
        config, charge, budget, order, delta
    ),
    two_pass=True,
    private_pass=False,
    knobs=(
        Knob("epsilon", 0.5, "privacy budget of one answer, per document of the store"),
        Knob("groups", 1, "document groups that each propose an answer (0: set by epsilon)"),
        Knob(
            "sample_rate",
            0.05,
            "share of the relevant documents one answer reads, by a coin per document "
            "(below 1: each pays less, so it lasts more answers; fewer documents agree)",
        ),
    ),
)
