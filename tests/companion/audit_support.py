"""What the audit API and audit page tests share: the companion app with a tiny model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from companion.audit.hidden import TargetModel
from companion.audit.jobs import JobManager
from companion.audit.ranker import SetupConfig
from companion.audit.service import ModelPool

SMALL = SetupConfig(sequences=64, length=20, generation_batch=32, epochs=3, hidden=96)


class NoEmbedder:
    """The chat's document embedder is not used by the audit routes."""

    def encode(self, texts, **kwargs):
        return np.zeros((len(texts), 384), dtype=np.float32)


def audit_app(
    home: Path,
    opener: Callable[[str | None, int], TargetModel],
    **settings: Any,
) -> Any:
    """The real app (token, Host, Origin checks) with ``opener`` behind the audit routes."""
    from companion.api.deps import get_audit_jobs
    from companion.app import create_app
    from companion.settings import Settings

    app = create_app(Settings(home=home, preload_model=False, **settings), embedder=NoEmbedder())
    jobs = JobManager(pool=ModelPool(opener=opener), setup_config=SMALL)
    app.dependency_overrides[get_audit_jobs] = lambda: jobs
    return app
