"""The per-model setup of the fast exact path: a candidate ranker and a position-0 table.

Inversion is a search: once the prefix is committed, a single forward pass proves
or refutes a candidate token.  What makes the search fast is the order in which
candidates are tried.

* **Position-0 table.**  The first position has no context, so its state depends
  on the token alone: the state of every vocabulary entry at position 0 is
  computed once per model (fp16 on disk) and the candidates are ordered by their
  distance to the leaked state.
* **Ranker.**  For t ≥ 1 a small network maps (h_t, h_{t-1}) to a query in the
  input-embedding space; a token's score is ``query · E[v] + b_v + a·logit(v | h_{t-1})``
  where the logit is the model's own next-token prediction from the previous leaked
  state.  It is trained with cross-entropy over the whole vocabulary on text the
  model generates itself by plain sampling at temperature 1 (plus randomly spliced
  tokens so it also learns to read unfamiliar tokens) — never on evaluation text.
  The prior term is dropped for a share of the training rows, so the same network
  also reads the state alone; candidates are ordered by the mixture
  ``(1-λ)·p(v | state, prior) + λ·p(v | state alone)`` (λ = 0.5, chosen on news
  windows disjoint from the evaluation's and on random tokens), which hedges
  against text the model itself finds unlikely (names, code, random tokens).

Everything is cached under ``veil_home()/audit/<model identity>-L<layer>/``; every
stage writes its output atomically and the position-0 table and the training
checkpoints are saved as they go, so an interrupted setup resumes.  ``should_stop``
is checked between batches of every stage (a cancelled setup raises
``InterruptedError`` within about a second and keeps what it saved).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from companion.audit.hidden import PriorHead, TargetModel, cache_of
from py_core.errors import InvalidParameterError, StateError

Progress = Callable[[str, int, int], None]
FORMAT_VERSION = 2
RIDGE_ROWS = 60_000
DEFAULT_MIXTURE = 0.5
# Settings used only when ranking, not when building: changing them rebuilds nothing.
_INFERENCE_ONLY = ("mixture",)


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
    """Sizes of the one-time per-model setup."""

    sequences: int = 2048  # generated training sequences
    length: int = 64  # tokens per sequence
    temperature: float = 1.0  # plain sampling: the text is as surprising as the model's own
    splice_fraction: float = 0.3  # share of sequences with random tokens spliced in
    splice_rate: float = 0.1  # share of positions replaced in those sequences
    generation_batch: int = 128
    epochs: int = 2
    batch_size: int = 512
    learning_rate: float = 1e-3
    hidden: int = 1024
    prior_dropout: float = 0.3  # share of training rows scored without the model's prior
    mixture: float = DEFAULT_MIXTURE  # weight of the state-alone ranking in the candidate order
    seed: int = 1234  # generated training text is an experiment artefact, not protection
    table_batch: int = 512

    def __post_init__(self) -> None:
        for name in ("sequences", "length", "generation_batch", "epochs", "batch_size", "hidden"):
            if int(getattr(self, name)) < 1:
                raise InvalidParameterError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.length < 2:
            raise InvalidParameterError(f"length must be at least 2, got {self.length}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise InvalidParameterError(f"temperature must be positive, got {self.temperature}")
        for name in ("splice_fraction", "splice_rate", "prior_dropout", "mixture"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise InvalidParameterError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    def fingerprint(self) -> str:
        return json.dumps({**asdict(self), "format": FORMAT_VERSION}, sort_keys=True)


def audit_home() -> Path:
    from companion.settings import veil_home

    return veil_home() / "audit"


def setup_dir(target: TargetModel) -> Path:
    return audit_home() / target.key


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


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
    ) -> torch.Tensor:
        """Scores (B, V).  ``use_prior`` (B,) in [0, 1] weighs the model's prior per row.

        The prior enters as the model's next-token *logits* from ``previous``: the
        log-normaliser is a per-row constant, so rankings and cross-entropy are
        those of the log-probabilities.  With tied input/output embeddings the
        prior folds into the query and costs nothing.
        """
        x = (torch.cat([current, previous], dim=-1) - self.mean) / self.std
        query = self.linear(x) + self.mlp(x)
        if head is None or use_prior is None:
            return query @ embedding.T + self.bias
        weight = (self.prior_weight * use_prior).unsqueeze(-1)
        if head.tied:
            scores = (query + weight * previous) @ embedding.T + self.bias
        else:
            scores = query @ embedding.T + self.bias + weight * (previous @ head.weight.T)
        if head.bias is not None:
            scores = scores + weight * head.bias
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
    table: torch.Tensor  # (V, d) fp16, state of each token alone at position 0
    duplicates: dict[int, list[int]]
    meta: dict[str, Any]
    mixture: float = DEFAULT_MIXTURE  # weight of the state-alone ranking

    @torch.no_grad()
    def rank(self, target: TargetModel, states: torch.Tensor) -> list[torch.Tensor]:
        """Candidate orders (best first) for every position of a (T, d) state sequence."""
        states = states.float().to(target.device)
        orders: list[torch.Tensor] = []
        table = self.table.to(target.device)
        first = (table.float() - states[0]).pow(2).sum(dim=-1)
        orders.append(torch.argsort(first))
        if states.shape[0] > 1:
            scores = self.ranker.order_scores(
                states[1:], states[:-1], target.embedding.float(), target.prior_head(), self.mixture
            )
            orders.extend(torch.argsort(scores, dim=-1, descending=True))
        return [o.cpu() for o in orders]


def is_ready(target: TargetModel) -> bool:
    return (setup_dir(target) / "done.json").exists()


def load_setup(target: TargetModel) -> SetupArtifacts:
    """Load a finished setup; a clear error if there is none or it belongs to other weights."""
    folder = setup_dir(target)
    done = folder / "done.json"
    if not done.exists():
        raise StateError(
            f"the inversion auditor is not set up for this model ({target.key}); run "
            "`veil audit setup` once (about 15 minutes on two CPU cores for SmolLM2-135M)"
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
    table = torch.load(folder / "table.pt", map_location="cpu", weights_only=True)
    if tuple(table.shape) != (target.vocab_size, target.hidden_size):
        raise StateError(f"the position-0 table in {folder} has the wrong shape; delete the folder")
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
    try:
        _build_table(target, config, folder, clock.wrap("table_s", progress))
        clock.stop()
        _build_corpus(target, config, folder, clock.wrap("corpus_s", progress))
        clock.stop()
        report = _train_ranker(target, config, folder, clock.wrap("train_s", progress))
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
        "torch_threads": torch.get_num_threads(),
    }
    (folder / "done.json").write_text(json.dumps(meta, indent=2))
    return load_setup(target)


_CORPUS_FIELDS = (
    "sequences",
    "length",
    "temperature",
    "splice_fraction",
    "splice_rate",
    "generation_batch",
    "seed",
)


def _invalidate(folder: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Drop only the stages a configuration change affects (the table depends on none)."""
    old = {k: v for k, v in old.items() if k not in _INFERENCE_ONLY}
    new = {k: v for k, v in new.items() if k not in _INFERENCE_ONLY}
    if old == new:
        return
    stale = ["ranker", "done"]
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


def _build_table(
    target: TargetModel, config: SetupConfig, folder: Path, progress: Progress
) -> None:
    final = folder / "table.pt"
    if final.exists():
        return
    partial = folder / "table.partial.pt"
    vocab = target.vocab_size
    table = torch.zeros(vocab, target.hidden_size, dtype=torch.float16)
    done = 0
    if partial.exists():
        saved = torch.load(partial, map_location="cpu", weights_only=True)
        table, done = saved["table"], int(saved["done"])
    last_save = time.monotonic()
    while done < vocab:
        stop = min(vocab, done + config.table_batch)
        ids = torch.arange(done, stop).reshape(-1, 1)
        table[done:stop] = target.batch_hidden_states(ids)[:, 0].half().cpu()
        done = stop
        try:
            progress("position-0 table", done, vocab)
        except InterruptedError:
            _atomic_save({"table": table, "done": done}, partial)  # resume from here
            raise
        if time.monotonic() - last_save > 20 and done < vocab:
            _atomic_save({"table": table, "done": done}, partial)
            last_save = time.monotonic()
    _atomic_save(table, final)
    partial.unlink(missing_ok=True)


@torch.no_grad()
def _build_corpus(
    target: TargetModel, config: SetupConfig, folder: Path, progress: Progress
) -> None:
    """Sequences sampled from the model itself (temperature sampling), some with random tokens.

    Generated chunks are kept in ``chunks.pt`` as they are made, so an interrupted
    run (or a later run asking for more sequences) continues the same stream.
    """
    final = folder / "corpus.pt"
    if final.exists():
        return
    chunk_file = folder / "chunks.pt"
    chunks: list[torch.Tensor] = []
    if chunk_file.exists():
        chunks = list(torch.load(chunk_file, map_location="cpu", weights_only=True))
    gen = torch.Generator().manual_seed(config.seed)
    model = target.model
    special = set(getattr(target.tokenizer, "all_special_ids", []) or [])
    allowed = torch.tensor([i for i in range(target.vocab_size) if i not in special])
    for _ in range(len(chunks)):  # advance the stream past the chunks already made
        _sample_chunk(model, target, config, gen, allowed, dry=True)
    made = sum(int(c.shape[0]) for c in chunks)
    while made < config.sequences:

        def step(made: int = made) -> None:
            progress("generating training text", made, config.sequences)

        chunks.append(_sample_chunk(model, target, config, gen, allowed, dry=False, step=step))
        made += int(chunks[-1].shape[0])
        _atomic_save(chunks, chunk_file)
        progress("generating training text", min(made, config.sequences), config.sequences)
    corpus = torch.cat(chunks)[: config.sequences].clone()
    splice = torch.Generator().manual_seed(config.seed + 7)
    n_splice = round(config.splice_fraction * corpus.shape[0])
    for row in range(n_splice):
        mask = torch.rand(config.length, generator=splice) < config.splice_rate
        count = int(mask.sum())
        picks = allowed[torch.randint(len(allowed), (count,), generator=splice)]
        corpus[row, mask] = picks
    _atomic_save(corpus, final)


def _sample_chunk(
    model: Any,
    target: TargetModel,
    config: SetupConfig,
    gen: torch.Generator,
    allowed: torch.Tensor,
    *,
    dry: bool,
    step: Callable[[], None] | None = None,
) -> torch.Tensor:
    batch = config.generation_batch
    first = allowed[torch.randint(len(allowed), (batch,), generator=gen)]
    seeds = torch.randint(0, 2**62, (1,), generator=gen)
    if dry:
        return first.reshape(-1, 1)
    local = torch.Generator().manual_seed(int(seeds))
    ids = first.reshape(batch, 1).to(target.device)
    out = ids
    cache = None
    step_ids = ids
    for _ in range(config.length - 1):
        if step is not None:
            step()  # progress, and where a cancelled setup stops
        kwargs: dict[str, Any] = {"input_ids": step_ids, "use_cache": True}
        if cache is not None:
            kwargs[target._cache_kw] = cache
        result = model(**kwargs)
        cache = cache_of(result)
        logits = result.logits[:, -1].float().cpu()
        probs = torch.softmax(logits / config.temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=local)
        step_ids = nxt.to(target.device)
        out = torch.cat([out, step_ids], dim=1)
    return out.cpu()


def _train_ranker(
    target: TargetModel, config: SetupConfig, folder: Path, progress: Progress
) -> dict[str, Any]:
    corpus = torch.load(folder / "corpus.pt", map_location="cpu", weights_only=True)
    n_val = max(1, corpus.shape[0] // 16)
    states = []
    for start in range(0, corpus.shape[0], 32):
        states.append(target.batch_hidden_states(corpus[start : start + 32]).cpu())
        progress(
            "hidden states of training text", min(corpus.shape[0], start + 32), corpus.shape[0]
        )
    hidden = torch.cat(states)  # (N, L, d)
    cur = hidden[:, 1:].reshape(-1, hidden.shape[-1])
    prev = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    labels = corpus[:, 1:].reshape(-1)
    per_seq = corpus.shape[1] - 1
    split = (corpus.shape[0] - n_val) * per_seq
    ranker = Ranker(target.hidden_size, target.embed_dim, target.vocab_size, config.hidden)
    embedding = target.embedding.float()
    checkpoint = folder / "ranker.partial.pt"
    if not checkpoint.exists():
        progress("ridge initialisation", 0, 1)
        _ridge_init(target, ranker, cur[:split], prev[:split], labels[:split], embedding.cpu())
        progress("ridge initialisation", 1, 1)
    ranker.to(target.device)
    optimiser = torch.optim.Adam(ranker.parameters(), lr=config.learning_rate)
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
    for epoch in range(first_epoch, config.epochs):
        ranker.train()
        order = torch.randperm(split, generator=gen)
        for step in range(steps_per_epoch):
            idx = order[step * config.batch_size : (step + 1) * config.batch_size]
            c, p = cur[idx].to(target.device), prev[idx].to(target.device)
            use = (torch.rand(idx.shape[0], generator=gen) >= config.prior_dropout).float()
            scores = ranker(c, p, use.to(target.device), embedding, head)
            loss = nn.functional.cross_entropy(scores, labels[idx].to(target.device))
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
    report = _validate(target, ranker, cur[split:], prev[split:], labels[split:], config.mixture)
    _atomic_save({"model": ranker.state_dict()}, folder / "ranker.pt")
    checkpoint.unlink(missing_ok=True)
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
