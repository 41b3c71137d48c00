"""The setup's forward passes: the position-0 table, the training text's states and the
first two positions' states (:mod:`companion.audit.ranker` trains on them).  Each is saved
as it goes, so an interrupted setup resumes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from companion.audit.corpus import atomic_save
from companion.audit.hidden import TargetModel

if TYPE_CHECKING:
    from companion.audit.ranker import Progress, SetupConfig


def build_table(target: TargetModel, config: SetupConfig, folder: Path, progress: Progress) -> None:
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
        # Full precision: a first state's norm is large (the attention sink), and bfloat16
        # tables put SmolLM2's true first token at rank 2,000-8,000 in 6 of 40 windows.
        table[done:stop] = target.batch_hidden_states(ids)[:, 0].half().cpu()
        done = stop
        try:
            progress("position-0 table", done, vocab)
        except InterruptedError:
            atomic_save({"table": table, "done": done}, partial)  # resume from here
            raise
        if time.monotonic() - last_save > 20 and done < vocab:
            atomic_save({"table": table, "done": done}, partial)
            last_save = time.monotonic()
    atomic_save(table, final)
    partial.unlink(missing_ok=True)


def training_states(
    target: TargetModel,
    corpus: torch.Tensor,
    folder: Path,
    progress: Progress,
    reduced: bool,
) -> torch.Tensor:
    """The states (N, L, d) of the training text, saved as they go (a cancelled setup
    resumes from the last saved batch)."""
    partial = folder / "states.partial.pt"
    chunks: list[torch.Tensor] = []
    if partial.exists():
        chunks = list(torch.load(partial, map_location="cpu", weights_only=True))
    done = sum(int(c.shape[0]) for c in chunks)
    last_save = time.monotonic()
    while done < corpus.shape[0]:
        rows = corpus[done : done + 32]
        chunks.append(target.batch_hidden_states(rows, reduced=reduced).cpu())
        done += int(chunks[-1].shape[0])
        try:
            progress("hidden states of training text", done, corpus.shape[0])
        except InterruptedError:
            atomic_save(chunks, partial)
            raise
        if time.monotonic() - last_save > 20 and done < corpus.shape[0]:
            atomic_save(chunks, partial)
            last_save = time.monotonic()
    return torch.cat(chunks)


def early_states(
    target: TargetModel, config: SetupConfig, folder: Path, progress: Progress
) -> tuple[torch.Tensor, torch.Tensor]:
    """``config.early_rows`` two-token sequences (a random first token, a distinct second
    one) and their states (N, 2, d).  Saved once made."""
    from companion.audit.corpus import allowed_tokens

    saved = folder / "early.pt"
    if saved.exists():
        data = torch.load(saved, map_location="cpu", weights_only=True)
        return data["ids"], data["states"]
    allowed = allowed_tokens(target)
    gen = torch.Generator().manual_seed(config.seed + 11)
    second = allowed[torch.randperm(len(allowed), generator=gen)[: config.early_rows]]
    first = allowed[torch.randint(len(allowed), (second.shape[0],), generator=gen)]
    ids = torch.stack([first, second], dim=1)
    chunks = []
    for start in range(0, ids.shape[0], config.table_batch):
        rows = ids[start : start + config.table_batch]
        chunks.append(target.batch_hidden_states(rows, reduced=config.reduced_precision).cpu())
        progress("first two positions", start + rows.shape[0], ids.shape[0])
    states = torch.cat(chunks)
    atomic_save({"ids": ids, "states": states}, saved)
    return ids, states
