"""The ranker's training text: real text shipped with Python, or the model's own samples.

Two sources (``SetupConfig.source``):

* ``text`` (the default): windows of real text this machine already has, tokenized by
  the model's tokenizer (:func:`training_text`: Python's reference prose, the installed
  packages' descriptions, the standard library's source).  No generation: the setup's
  cost is one forward pass per training token, which is what makes it fit in minutes for
  a 0.5B model on two CPU cores (sampling 2048 x 64 tokens from the model took 344 s for
  SmolLM2-135M alone, and grows with the model).  ``json`` is not among
  :data:`TEXT_MODULES` (the inversion evaluation inverts ``json.decoder``'s source) and no
  news is read (it inverts the Lee corpus), so the ranker never sees evaluation text.
* ``generated``: sequences sampled from the model itself at temperature 1 (the first
  setup's source, docs/inversion/report.md), as surprising to the model as its own text.

Either way half of the sequences (``random_fraction``) are uniformly random tokens and a
share of the rest gets random tokens spliced in, so the ranker learns to read the current
token from its state, not only from context, and tokens no text would put there.  Sampling here is an experiment artefact
(which windows, which spliced tokens), seeded for resumability, not protection.
"""

from __future__ import annotations

import importlib
import inspect
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from companion.audit.hidden import TargetModel, cache_of

if TYPE_CHECKING:
    from companion.audit.ranker import Progress, SetupConfig

# Bumped when what the ``text`` source reads changes: a setup made from other text is rebuilt.
TEXT_VERSION = 2
# Standard-library modules whose source (docstrings and code) is the training text.
TEXT_MODULES = (
    "argparse",
    "collections",
    "textwrap",
    "logging",
    "subprocess",
    "pathlib",
    "email.message",
    "http.client",
    "unittest.case",
    "typing",
    "functools",
    "datetime",
    "decimal",
    "random",
    "statistics",
    "calendar",
    "difflib",
    "smtplib",
    "tarfile",
    "zipfile",
    "csv",
    "pydoc",
)


def package_descriptions() -> list[str]:
    """The long descriptions of the installed distributions (their README: English prose in
    Markdown or reStructuredText, 1.7 MB in Veil's environment), by name; Veil's own left out."""
    import importlib.metadata as metadata

    found: dict[str, str] = {}
    for dist in metadata.distributions():
        meta: Any = dist.metadata  # an email.message.Message underneath
        name = str(meta.get("Name") or "").lower()
        if not name or name == "veil" or name in found:
            continue
        body = meta.get_payload() if hasattr(meta, "get_payload") else None
        text = str(meta.get("Description") or body or "")
        if len(text) > 500:
            found[name] = text
    return [found[name] for name in sorted(found)]


def training_text() -> str:
    """Real text this machine already has: Python's reference prose (``pydoc_data.topics``,
    0.5 MB of English), the installed packages' descriptions, and the source of
    :data:`TEXT_MODULES` (docstrings and code).  Trained on code and reference prose alone,
    SmolLM2's ranker put news tokens at rank 5 000-14 000 that the model's own prior ranks
    under 100."""
    parts: list[str] = []
    try:
        from pydoc_data.topics import topics

        parts.extend(topics[name] for name in sorted(topics))
    except ImportError:  # a stripped install: the rest alone
        pass
    parts.extend(package_descriptions())
    for name in TEXT_MODULES:
        try:
            parts.append(inspect.getsource(importlib.import_module(name)))
        except (ImportError, OSError, TypeError):  # a stripped install: skip the module
            continue
    return "\n\n".join(parts)


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary name, then renamed: a reader never sees half a file."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def allowed_tokens(target: TargetModel) -> torch.Tensor:
    special = set(getattr(target.tokenizer, "all_special_ids", []) or [])
    return torch.tensor([i for i in range(target.vocab_size) if i not in special])


def build_corpus(
    target: TargetModel, config: SetupConfig, folder: Path, progress: Progress
) -> None:
    """``corpus.pt``: (sequences, length) token ids from ``config.source``, some spliced."""
    final = folder / "corpus.pt"
    if final.exists():
        return
    allowed = allowed_tokens(target)
    if config.source == "text":
        corpus = _text_windows(target, config, allowed, progress)
    else:
        corpus = _generated(target, config, folder, allowed, progress)
    splice = torch.Generator().manual_seed(config.seed + 7)
    rows = torch.randperm(corpus.shape[0], generator=splice)  # random rows spread evenly
    n_random = round(config.random_fraction * corpus.shape[0])
    n_splice = round(config.splice_fraction * (corpus.shape[0] - n_random))
    for row in rows[:n_random].tolist():
        corpus[row] = allowed[torch.randint(len(allowed), (config.length,), generator=splice)]
    for row in rows[n_random : n_random + n_splice].tolist():
        mask = torch.rand(config.length, generator=splice) < config.splice_rate
        count = int(mask.sum())
        picks = allowed[torch.randint(len(allowed), (count,), generator=splice)]
        corpus[row, mask] = picks
    atomic_save(corpus, final)


def _text_windows(
    target: TargetModel, config: SetupConfig, allowed: torch.Tensor, progress: Progress
) -> torch.Tensor:
    """Windows of the standard library's source at seeded random offsets (with
    repetition only when the text is shorter than what was asked); where even one window
    does not fit (a tiny tokenizer's text), random tokens fill the rest."""
    progress("reading training text", 0, 1)
    ids = target.tokenizer(training_text(), add_special_tokens=False).input_ids
    ids = [int(i) for i in ids if int(i) < target.vocab_size]
    rng = random.Random(config.seed)
    rows = []
    gen = torch.Generator().manual_seed(config.seed + 3)
    slots = max(0, len(ids) - config.length)
    starts = (
        rng.sample(range(slots), config.sequences)
        if slots >= config.sequences
        else [rng.randrange(slots) if slots else 0 for _ in range(config.sequences)]
    )
    for start in starts:
        window = ids[start : start + config.length]
        if len(window) < config.length:
            fill = allowed[
                torch.randint(len(allowed), (config.length - len(window),), generator=gen)
            ]
            window = window + fill.tolist()
        rows.append(window)
    progress("reading training text", 1, 1)
    return torch.tensor(rows, dtype=torch.long)


def _generated(
    target: TargetModel,
    config: SetupConfig,
    folder: Path,
    allowed: torch.Tensor,
    progress: Progress,
) -> torch.Tensor:
    """Sequences sampled from the model itself (temperature sampling).

    Generated chunks are kept in ``chunks.pt`` as they are made, so an interrupted
    run (or a later run asking for more sequences) continues the same stream.
    """
    chunk_file = folder / "chunks.pt"
    chunks: list[torch.Tensor] = []
    if chunk_file.exists():
        chunks = list(torch.load(chunk_file, map_location="cpu", weights_only=True))
    gen = torch.Generator().manual_seed(config.seed)
    for _ in range(len(chunks)):  # advance the stream past the chunks already made
        _sample_chunk(target, config, gen, allowed, dry=True)
    made = sum(int(c.shape[0]) for c in chunks)
    while made < config.sequences:

        def step(made: int = made) -> None:
            progress("generating training text", made, config.sequences)

        chunks.append(_sample_chunk(target, config, gen, allowed, dry=False, step=step))
        made += int(chunks[-1].shape[0])
        atomic_save(chunks, chunk_file)
        progress("generating training text", min(made, config.sequences), config.sequences)
    return torch.cat(chunks)[: config.sequences].clone()


@torch.no_grad()
def _sample_chunk(
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
        result = target.model(**kwargs)
        cache = cache_of(result)
        logits = result.logits[:, -1].float().cpu()
        probs = torch.softmax(logits / config.temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=local)
        step_ids = nxt.to(target.device)
        out = torch.cat([out, step_ids], dim=1)
    return out.cpu()
