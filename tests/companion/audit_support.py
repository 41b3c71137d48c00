"""What the audit API and audit page tests share: the companion app with a tiny model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from companion.audit.hidden import TargetModel
from companion.audit.jobs import JobManager
from companion.audit.ranker import SetupConfig
from companion.audit.service import ModelPool, Opener
from tests.companion.fakes import ConstantEmbedder


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One torch thread (a module imports this to use it): the tiny models are
    latency-bound and CI cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def opener_for(loaded: Any) -> Opener:
    """A pool opener that serves one loaded model at any layer and source."""
    return lambda spec, layer, source: TargetModel(loaded, layer=layer, source=source)


SMALL = SetupConfig(sequences=64, length=20, generation_batch=32, epochs=3, hidden=96)


def audit_app(
    home: Path,
    opener: Opener,
    *,
    setup_config: SetupConfig = SMALL,
    **settings: Any,
) -> Any:
    """The real app (token, Host, Origin checks) with ``opener`` behind the audit routes.

    The job manager takes its limits from the settings, as the lifespan's does, and
    is the app's own (``app.state.audit_jobs``), so the app's shutdown cancels its jobs.
    """
    from companion.app import create_app
    from companion.settings import Settings

    config = Settings(home=home, preload_model=False, **settings)
    jobs = JobManager(
        pool=ModelPool(opener=opener),
        setup_config=setup_config,
        max_queued=config.audit_max_queued,
        max_running=config.audit_max_running,
        abandon_after_s=config.audit_abandon_s,
    )
    return create_app(config, embedder=ConstantEmbedder(), audit_jobs=jobs)
