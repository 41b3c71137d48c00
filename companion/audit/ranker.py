"""The per-model setup of the fast exact path: a candidate ranker and a position-0 table.

Inversion is a search: once the prefix is committed, a single forward pass proves
or refutes a candidate token.  What makes the search fast is the order in which
candidates are tried.

* **Position-0 table.**  The first position has no context, so its state depends
  on the token alone: the state of every vocabulary entry at position 0 is
  computed once per model (fp16 on disk) and the candidates are ordered by their
  distance to the leaked state.  One forward pass per vocabulary entry, so the
  quick setup builds it only where that is cheap (:func:`wants_table`); without it
  the ranker reads the first state alone (trained on first positions too).
* **Ranker.**  A small network maps (h_t, h_{t-1}) to a query in the
  input-embedding space; a token's score is ``query · E[v] + b_v + a·logit(v | h_{t-1})``
  where the logit is the model's own next-token prediction from the previous leaked
  state.  It is trained with cross-entropy on training text
  (:mod:`companion.audit.corpus`, never evaluation text): the quick setup (the
  default) reads real text this machine has, with a sampled softmax and no learned
  ``b_v``; the thorough one (:meth:`SetupConfig.thorough`) samples the text from the
  model itself at temperature 1 and uses the whole vocabulary.  Both splice random
  tokens in, so the ranker also learns to read unfamiliar tokens.
  The prior term is dropped for a share of the training rows, so the same network
  also reads the state alone; candidates are ordered by the mixture
  ``(1-λ)·p(v | state, prior) + λ·p(v | state alone)`` (λ = 0.5, chosen on news
  windows disjoint from the evaluation's and on random tokens), which hedges
  against text the model itself finds unlikely (names, code, random tokens).

Everything is cached under ``veil_home()/audit/<target.key>/`` (model identity, layer
and source: ``<identity>-L<layer>[-keys|-values]``); every stage writes its output
atomically, and the position-0 table, the training text's states and the training
checkpoints are saved as they go, so an interrupted setup resumes.  ``should_stop``
is checked between batches of every stage (a cancelled setup raises
``InterruptedError`` within about a second and keeps what it saved).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from companion.audit.corpus import TEXT_VERSION, build_corpus
from companion.audit.corpus import atomic_save as _atomic_save
from companion.audit.hidden import PriorHead, TargetModel
from companion.audit.setup_states import build_table, early_states, training_states
from py_core.errors import InvalidParameterError, StateError

Progress = Callable[[str, int, int], None]
FORMAT_VERSION = 2
RIDGE_ROWS = 60_000
DEFAULT_MIXTURE = 0.5
# Settings used only when ranking, not when building: changing them rebuilds nothing.
_INFERENCE_ONLY = ("mixture",)
SOURCES = ("text", "generated")
TABLE_CHOICES = ("auto", "yes", "no")
# "auto" builds the position-0 table (one forward pass per vocabulary entry) when the
# vocabulary size times the parameter count is at most this: SmolLM2-135M (49 k x 135 M,
# ~95 s on two cores) gets one, Qwen2.5-0.5B (152 k x 494 M, ~25 min) and Gemma-3-270M
# (262 k x 268 M) do not -- their first position is ordered by the ranker on its own.
TABLE_BUDGET = 1e13


def _no_progress(stage: str, done: int, total: int) -> None:
    return None


def _stopping(progress: Progress, should_stop: Callable[[], bool] | None) -> Progress:
    """``progress`` that first raises InterruptedError once ``should_stop()`` is true."""
    if should_stop is None:
        return progress

    def report(stage: str, done: int, total: int) -> None:
        if should_stop():
            raise InterruptedError("the setup was cancelled; its progress so far is kept")
        progress(stage, done, total)

    return report


@dataclass(frozen=True, slots=True)
class SetupConfig:
    """Sizes of the one-time per-model setup.

    The defaults are the quick setup (real text, no generation, a sampled softmax, the
    position-0 table only where it is cheap); :meth:`thorough` is the first setup's
    configuration (the model's own samples, the full softmax, always the table).
    """

    sequences: int = 1024  # training sequences
    length: int = 64  # tokens per sequence
    source: str = "text"  # "text": the standard library's source; "generated": the model's
    temperature: float = 1.0  # generated: plain sampling, as surprising as the model's own
    # Share of sequences made of uniformly random tokens only.  On SmolLM2's last layer
    # (20 random windows) it put the true token of a random window at median rank 1
    # instead of 508, and news tokens in the top 512 in 99% of positions instead of 92%:
    # the ranker learns to read the current token from the state itself, not from context.
    random_fraction: float = 0.5
    splice_fraction: float = 0.3  # share of the other sequences with random tokens spliced in
    splice_rate: float = 0.1  # share of positions replaced in those sequences
    generation_batch: int = 128
    epochs: int = 4
    batch_size: int = 512
    learning_rate: float = 1e-3
    hidden: int = 1024
    prior_dropout: float = 0.3  # share of training rows scored without the model's prior
    mixture: float = DEFAULT_MIXTURE  # weight of the state-alone ranking in the candidate order
    seed: int = 1234  # training text is an experiment artefact, not protection
    table: str = "auto"  # position-0 table: "auto" (where cheap), "yes", "no"
    table_batch: int = 512
    negatives: int = 8192  # sampled softmax: tokens scored per batch (0: the whole vocabulary)
    # The training text's states from the bfloat16 copy where it is fast
    # (TargetModel.can_screen): they only order candidates; every proof is float32.
    reduced_precision: bool = True
    # The first two positions' states differ from the rest (position 0 is the attention
    # sink, position 1 sees it and itself alone), and a training sequence has one of each:
    # this many two-token sequences (a distinct second token after a random first one) add
    # position-1 rows and, without the position-0 table, position-0 rows.  On SmolLM2, 9 of
    # the 15 random-window positions ranked past 2,000 were at position 1.
    early_rows: int = 16384
    # Learn a score offset per token.  Off for the quick setup: a token that never occurs in
    # 32 k training tokens is only ever pushed down, and real text is full of such tokens.
    token_bias: bool = False

    @classmethod
    def thorough(cls, **overrides: Any) -> SetupConfig:
        """The first setup's configuration (docs/inversion/report.md: 817 s for SmolLM2)."""
        base: dict[str, Any] = {
            "sequences": 2048,
            "source": "generated",
            "epochs": 2,
            "table": "yes",
            "negatives": 0,
            "token_bias": True,
        }
        return cls(**{**base, **overrides})

    def __post_init__(self) -> None:
        for name in ("sequences", "length", "generation_batch", "epochs", "batch_size", "hidden"):
            if int(getattr(self, name)) < 1:
                raise InvalidParameterError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.length < 2:
            raise InvalidParameterError(f"length must be at least 2, got {self.length}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise InvalidParameterError(f"temperature must be positive, got {self.temperature}")
        for name in (
            "random_fraction",
            "splice_fraction",
            "splice_rate",
            "prior_dropout",
            "mixture",
        ):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise InvalidParameterError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.source not in SOURCES:
            raise InvalidParameterError(f"source must be one of {SOURCES}, got {self.source!r}")
        if self.table not in TABLE_CHOICES:
            raise InvalidParameterError(f"table must be one of {TABLE_CHOICES}, got {self.table!r}")
        if self.early_rows < 0:
            raise InvalidParameterError(f"early_rows must be >= 0, got {self.early_rows}")
        if self.negatives < 0:
            raise InvalidParameterError(f"negatives must be >= 0, got {self.negatives}")

    def fingerprint(self) -> str:
        return json.dumps(
            {**asdict(self), "format": FORMAT_VERSION, "text_version": TEXT_VERSION},
            sort_keys=True,
        )


def audit_home() -> Path:
    from companion.settings import veil_home

    return veil_home() / "audit"


def setup_dir(target: TargetModel) -> Path:
    return audit_home() / target.key


class Ranker(nn.Module):
    """Scores every vocabulary token for position t from the leaked states h_t, h_{t-1}."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, hidden_size: int, embed_dim: int, vocab_size: int, width: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(2 * hidden_size))
        self.register_buffer("std", torch.ones(2 * hidden_size))
        self.linear = nn.Linear(2 * hidden_size, embed_dim)
        self.mlp = nn.Sequential(
            nn.Linear(2 * hidden_size, width), nn.GELU(), nn.Linear(width, embed_dim)
        )
        self.prior_weight = nn.Parameter(torch.tensor(1.0))
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(
        self,
        current: torch.Tensor,
        previous: torch.Tensor,
        use_prior: torch.Tensor | None,
        embedding: torch.Tensor,
        head: PriorHead | None,
        index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scores (B, V), or (B, len(index)) for the tokens ``index`` only (the sampled
        softmax of training).  ``use_prior`` (B,) in [0, 1] weighs the model's prior per row.

        The prior enters as the model's next-token *logits* from ``previous``: the
        log-normaliser is a per-row constant, so rankings and cross-entropy are
        those of the log-probabilities.  With tied input/output embeddings the
        prior folds into the query and costs nothing.
        """
        x = (torch.cat([current, previous], dim=-1) - self.mean) / self.std
        query = self.linear(x) + self.mlp(x)
        bias = self.bias if index is None else self.bias[index]
        emb = embedding if index is None else embedding[index]
        if head is None or use_prior is None:
            return query @ emb.T + bias
        weight = (self.prior_weight * use_prior).unsqueeze(-1)
        head_bias = head.bias if head.bias is None or index is None else head.bias[index]
        if head.tied:
            scores = (query + weight * previous) @ emb.T + bias
        else:
            out = head.weight if index is None else head.weight[index]
            scores = query @ emb.T + bias + weight * (previous @ out.T)
        if head_bias is not None:
            scores = scores + weight * head_bias
        return scores

    def order_scores(
        self,
        current: torch.Tensor,
        previous: torch.Tensor,
        embedding: torch.Tensor,
        head: PriorHead | None,
        mixture: float,
    ) -> torch.Tensor:
        """log of (1-λ)·p(v | state, prior) + λ·p(v | state alone), λ = ``mixture``."""
        alone = torch.log_softmax(self(current, previous, None, embedding, None), dim=-1)
        if head is None or mixture >= 1.0:
            return alone
        ones = torch.ones(current.shape[0], device=current.device)
        full = torch.log_softmax(self(current, previous, ones, embedding, head), dim=-1)
        if mixture <= 0.0:
            return full
        return torch.logaddexp(full + math.log1p(-mixture), alone + math.log(mixture))


@dataclass
class SetupArtifacts:
    """What the fast path loads: the ranker, the position-0 table, duplicate groups."""

    ranker: Ranker
    table: torch.Tensor | None  # (V, d) fp16, state of each token alone at position 0
    duplicates: dict[int, list[int]]
    meta: dict[str, Any]
    mixture: float = DEFAULT_MIXTURE  # weight of the state-alone ranking

    @torch.no_grad()
    def rank(self, target: TargetModel, states: torch.Tensor) -> list[torch.Tensor]:
        """Candidate orders (best first) for every position of a (T, d) state sequence."""
        states = states.float().to(target.device)
        orders: list[torch.Tensor] = []
        if self.table is not None:
            first = (self.table.to(target.device).float() - states[0]).pow(2).sum(dim=-1)
        else:  # no table: the ranker reads the first state alone (trained to, with START)
            first = self.ranker.order_scores(
                states[:1], torch.zeros_like(states[:1]), target.embedding.float(), None, 1.0
            )[0].neg()
        orders.append(torch.argsort(first))
        if states.shape[0] > 1:
            scores = self.ranker.order_scores(
                states[1:], states[:-1], target.embedding.float(), target.prior_head(), self.mixture
            )
            orders.extend(torch.argsort(scores, dim=-1, descending=True))
        return [o.cpu() for o in orders]


def is_ready(target: TargetModel) -> bool:
    """Whether a finished setup is saved for this model and layer."""
    return (setup_dir(target) / "done.json").exists()


def load_setup(target: TargetModel) -> SetupArtifacts:
    """Load a finished setup; a clear error if there is none or it belongs to other weights."""
    folder = setup_dir(target)
    done = folder / "done.json"
    if not done.exists():
        raise StateError(
            f"the inversion auditor is not set up for this model ({target.key}); run "
            "`veil audit setup` once (about 3 minutes on two CPU cores for SmolLM2-135M, 4 for "
            "Qwen2.5-0.5B)"
        )
    meta = json.loads(done.read_text())
    if meta.get("key") != target.key:
        raise StateError(f"the setup in {folder} was made for other weights; delete it and rerun")
    if meta.get("format") != FORMAT_VERSION:
        raise StateError(
            f"the setup in {folder} was made by an older version of Veil; run "
            "`veil audit setup` again (it keeps the position-0 table and rebuilds the rest)"
        )
    state = torch.load(folder / "ranker.pt", map_location="cpu", weights_only=True)
    ranker = Ranker(
        target.hidden_size, target.embed_dim, target.vocab_size, meta["config"]["hidden"]
    )
    ranker.load_state_dict(state["model"])
    ranker.to(target.device).eval()
    table = None
    if meta.get("table", True):
        table = torch.load(folder / "table.pt", map_location="cpu", weights_only=True)
        if tuple(table.shape) != (target.vocab_size, target.hidden_size):
            raise StateError(
                f"the position-0 table in {folder} has the wrong shape; delete the folder"
            )
    return SetupArtifacts(
        ranker=ranker, table=table, duplicates=target.duplicate_groups(), meta=meta
    )


def run_setup(
    target: TargetModel,
    config: SetupConfig | None = None,
    *,
    progress: Progress = _no_progress,
    force: bool = False,
    should_stop: Callable[[], bool] | None = None,
) -> SetupArtifacts:
    """Build (or resume building) the per-model ranker and position-0 table.

    ``should_stop`` is checked between batches; when it turns true the setup
    raises ``InterruptedError`` and a later run resumes from what was saved.
    """
    config = config or SetupConfig()
    progress = _stopping(progress, should_stop)
    folder = setup_dir(target)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    config_file = folder / "config.json"
    if force:
        for path in folder.iterdir():
            path.unlink()
    if config_file.exists():
        _invalidate(folder, json.loads(config_file.read_text()), json.loads(config.fingerprint()))
    if (folder / "done.json").exists():
        return load_setup(target)
    config_file.write_text(config.fingerprint())
    clock = _StageClock(folder)
    table = wants_table(target, config)
    try:
        if table:
            build_table(target, config, folder, clock.wrap("table_s", progress))
            clock.stop()
        build_corpus(target, config, folder, clock.wrap("corpus_s", progress))
        clock.stop()
        report = _train_ranker(target, config, folder, clock.wrap("train_s", progress), table)
    finally:
        clock.stop()  # an interrupted run's time still counts when it resumes
    timings = clock.timings
    meta = {
        "format": FORMAT_VERSION,
        "key": target.key,
        "config": asdict(config),
        "timings": timings,
        "setup_seconds": sum(timings.values()),
        "ranker": report,
        "table": table,
        "torch_threads": torch.get_num_threads(),
    }
    (folder / "done.json").write_text(json.dumps(meta, indent=2))
    return load_setup(target)


def wants_table(target: TargetModel, config: SetupConfig) -> bool:
    """Whether this setup builds the position-0 table (``config.table``; "auto": cheap)."""
    if config.table != "auto":
        return config.table == "yes"
    params = sum(p.numel() for p in target.model.parameters())
    return target.vocab_size * params <= TABLE_BUDGET


_CORPUS_FIELDS = (
    "sequences",
    "length",
    "temperature",
    "random_fraction",
    "splice_fraction",
    "splice_rate",
    "generation_batch",
    "reduced_precision",
    "seed",
    "source",
    "text_version",
)


def _invalidate(folder: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Drop only the stages a configuration change affects (the table depends on none)."""
    old = {k: v for k, v in old.items() if k not in _INFERENCE_ONLY}
    new = {k: v for k, v in new.items() if k not in _INFERENCE_ONLY}
    if old == new:
        return
    stale = ["ranker", "done", "early"]
    if any(old.get(k) != new.get(k) for k in (*_CORPUS_FIELDS, "format")):
        stale.append("corpus")
    if any(old.get(k) != new.get(k) for k in (*_CORPUS_FIELDS, "format") if k != "sequences"):
        stale.append("chunks")
    for path in folder.iterdir():
        if path.name.split(".")[0] in stale:
            path.unlink()
    timings = folder / "timings.json"
    if timings.exists():  # the time of a stage that is rebuilt no longer counts
        spent = json.loads(timings.read_text())
        drop = {"ranker": "train_s", "corpus": "corpus_s"}
        kept = {k: v for k, v in spent.items() if k not in {drop[s] for s in stale if s in drop}}
        timings.write_text(json.dumps(kept))


class _StageClock:
    """Seconds spent per setup stage, saved every few seconds so interrupted runs still count."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "timings.json"
        self.timings: dict[str, float] = (
            json.loads(self.path.read_text()) if self.path.exists() else {}
        )
        self.stage: str | None = None
        self.last = time.perf_counter()
        self.saved = time.monotonic()

    def _tick(self) -> None:
        now = time.perf_counter()
        if self.stage is not None:
            self.timings[self.stage] = self.timings.get(self.stage, 0.0) + now - self.last
        self.last = now
        if time.monotonic() - self.saved > 5:
            self._save()

    def _save(self) -> None:
        self.path.write_text(json.dumps(self.timings))
        self.saved = time.monotonic()

    def wrap(self, stage: str, progress: Progress) -> Progress:
        self.stage = stage
        self.last = time.perf_counter()

        def report(name: str, done: int, total: int) -> None:
            self._tick()
            progress(name, done, total)

        return report

    def stop(self) -> None:
        self._tick()
        self.stage = None
        self._save()


def _train_ranker(
    target: TargetModel, config: SetupConfig, folder: Path, progress: Progress, table: bool
) -> dict[str, Any]:
    """Train the ranker on the states of the training text.

    Rows are positions t >= 1 (current and previous state, the prior from the
    previous one) and, without a position-0 table, also t = 0 with a zero previous
    state and no prior -- how :meth:`SetupArtifacts.rank` reads a first state.  With
    ``negatives`` the loss is a sampled softmax: each batch scores its own labels and
    ``negatives`` uniformly drawn tokens, not the whole vocabulary (Qwen's 152 k
    tokens made a full-softmax step ~4 s on two cores).
    """
    corpus = torch.load(folder / "corpus.pt", map_location="cpu", weights_only=True)
    n_val = max(1, corpus.shape[0] // 16)
    hidden = training_states(
        target, corpus, folder, progress, config.reduced_precision
    )  # (N, L, d)
    start = 0 if not table else 1
    cur = hidden[:, start:].reshape(-1, hidden.shape[-1])
    prev = torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], dim=1)
    prev = prev[:, start:].reshape(-1, hidden.shape[-1])
    labels = corpus[:, start:].reshape(-1)
    per_seq = corpus.shape[1] - start
    first = (torch.arange(start, corpus.shape[1]) == 0).repeat(corpus.shape[0])
    split = (corpus.shape[0] - n_val) * per_seq
    if config.early_rows:  # more first and second positions, for training only
        ids, states = early_states(target, config, folder, progress)  # (N, 2), (N, 2, d)
        parts = [(states[:, 1], states[:, 0], ids[:, 1], False)]
        if not table:
            parts.append((states[:, 0], torch.zeros_like(states[:, 0]), ids[:, 0], True))
        for c, p, y, is_first in parts:
            cur = torch.cat([cur[:split], c, cur[split:]])
            prev = torch.cat([prev[:split], p, prev[split:]])
            labels = torch.cat([labels[:split], y, labels[split:]])
            flag = torch.full((y.shape[0],), is_first, dtype=torch.bool)
            first = torch.cat([first[:split], flag, first[split:]])
            split += int(y.shape[0])
    ranker = Ranker(target.hidden_size, target.embed_dim, target.vocab_size, config.hidden)
    embedding = target.embedding.float()
    checkpoint = folder / "ranker.partial.pt"
    if not checkpoint.exists():
        progress("ridge initialisation", 0, 1)
        _ridge_init(target, ranker, cur[:split], prev[:split], labels[:split], embedding.cpu())
        progress("ridge initialisation", 1, 1)
    ranker.to(target.device)
    ranker.bias.requires_grad_(config.token_bias)
    trained = [p for p in ranker.parameters() if p.requires_grad]
    optimiser = torch.optim.Adam(trained, lr=config.learning_rate)
    steps_per_epoch = math.ceil(split / config.batch_size)
    total = steps_per_epoch * config.epochs
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, max_lr=config.learning_rate, total_steps=total, pct_start=0.1
    )
    first_epoch = 0
    gen = torch.Generator().manual_seed(config.seed + 1)
    if checkpoint.exists():
        saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
        ranker.load_state_dict(saved["model"])
        optimiser.load_state_dict(saved["optimiser"])
        schedule.load_state_dict(saved["schedule"])
        first_epoch = int(saved["epoch"])
        gen.set_state(saved["generator"])
    head = target.prior_head()
    sampled = 0 < config.negatives < target.vocab_size
    for epoch in range(first_epoch, config.epochs):
        ranker.train()
        order = torch.randperm(split, generator=gen)
        for step in range(steps_per_epoch):
            idx = order[step * config.batch_size : (step + 1) * config.batch_size]
            c, p = cur[idx].to(target.device), prev[idx].to(target.device)
            use = (torch.rand(idx.shape[0], generator=gen) >= config.prior_dropout).float()
            use[first[idx]] = 0.0  # a first position has no prior
            target_ids = labels[idx]
            index = None
            if sampled:
                drawn = torch.randint(target.vocab_size, (config.negatives,), generator=gen)
                index = torch.unique(torch.cat([target_ids, drawn]))
                target_ids = torch.searchsorted(index, target_ids)
                index = index.to(target.device)
            scores = ranker(c, p, use.to(target.device), embedding, head, index)
            loss = nn.functional.cross_entropy(scores, target_ids.to(target.device))
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            schedule.step()
            progress("training the ranker", epoch * steps_per_epoch + step + 1, total)
        _atomic_save(
            {
                "model": ranker.state_dict(),
                "optimiser": optimiser.state_dict(),
                "schedule": schedule.state_dict(),
                "epoch": epoch + 1,
                "generator": gen.get_state(),
            },
            checkpoint,
        )
    ranker.eval()
    held = torch.arange(split, cur.shape[0])
    held = held[~first[held]]
    report = _validate(target, ranker, cur[held], prev[held], labels[held], config.mixture)
    _atomic_save({"model": ranker.state_dict()}, folder / "ranker.pt")
    checkpoint.unlink(missing_ok=True)
    (folder / "states.partial.pt").unlink(missing_ok=True)
    (folder / "early.pt").unlink(missing_ok=True)
    return report


@torch.no_grad()
def _ridge_init(
    target: TargetModel,
    ranker: Ranker,
    cur: torch.Tensor,
    prev: torch.Tensor,
    labels: torch.Tensor,
    embedding: torch.Tensor,
) -> None:
    """Closed-form start: a ridge map from the standardised states to the token's embedding.

    The score ``s·(q·E[v] - ½‖E[v]‖²)`` ranks tokens by distance to the predicted
    embedding; the scale ``s`` is picked on a slice of the training text by
    likelihood; cross-entropy training then starts from there.
    """
    x = torch.cat([cur, prev], dim=-1)
    mean, std = x.mean(dim=0), x.std(dim=0).clamp_min(1e-4)
    ranker.mean.copy_(mean)
    ranker.std.copy_(std)
    z = (x - mean) / std
    n = min(z.shape[0], RIDGE_ROWS)  # the Gram matrix needs no more to settle
    y = embedding[labels[:n]]
    gram = z[:n].T @ z[:n]
    lam = 1e-3 * float(gram.diagonal().mean())
    weight = torch.linalg.solve(gram + lam * torch.eye(gram.shape[0]), z[:n].T @ y)  # (2d, e)
    last = ranker.mlp[-1]
    assert isinstance(last, nn.Linear)
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)
    sq = 0.5 * embedding.pow(2).sum(dim=-1)
    probe = torch.arange(0, z.shape[0], max(1, z.shape[0] // 512))[:512]
    prior = target.prior_logprobs(prev[probe].to(target.device))
    prior_cpu = prior.cpu() if prior is not None else None
    base = (z[probe] @ weight) @ embedding.T - sq
    best_scale, best_nll = 1.0, float("inf")
    for scale in (0.3, 1.0, 3.0, 10.0, 30.0, 100.0):
        scores = scale * base + (prior_cpu if prior_cpu is not None else 0.0)
        nll = float(nn.functional.cross_entropy(scores, labels[probe]))
        if nll < best_nll:
            best_scale, best_nll = scale, nll
    ranker.linear.weight.copy_(best_scale * weight.T)
    ranker.linear.bias.zero_()
    ranker.bias.copy_(-best_scale * sq)
    ranker.prior_weight.fill_(1.0 if prior is not None else 0.0)


@torch.no_grad()
def _validate(
    target: TargetModel,
    ranker: Ranker,
    cur: torch.Tensor,
    prev: torch.Tensor,
    labels: torch.Tensor,
    mixture: float,
) -> dict[str, Any]:
    """Rank of the true token (in the search order) on held-out generated text."""
    ranks = []
    embedding = target.embedding.float()
    head = target.prior_head()
    for start in range(0, cur.shape[0], 256):
        c = cur[start : start + 256].to(target.device)
        p = prev[start : start + 256].to(target.device)
        scores = ranker.order_scores(c, p, embedding, head, mixture)
        true = scores.gather(1, labels[start : start + 256].to(target.device).reshape(-1, 1))
        ranks.append((scores > true).sum(dim=1).cpu() + 1)
    r = torch.cat(ranks).float()
    return {
        "held_out_tokens": int(r.numel()),
        "top1": float((r <= 1).float().mean()),
        "top8": float((r <= 8).float().mean()),
        "top64": float((r <= 64).float().mean()),
        "top512": float((r <= 512).float().mean()),
        "median_rank": float(r.median()),
        "mean_rank": float(r.mean()),
    }
