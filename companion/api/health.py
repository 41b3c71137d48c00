"""``GET /healthz``: is the companion up, which model, how many documents."""

from __future__ import annotations

from fastapi import APIRouter

from companion.api.deps import EngineDep, RagDep
from companion.decoding.registry import DEFENSES
from companion.protocol import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness and what is loaded")
async def healthz(engine: EngineDep, rag: RagDep) -> Health:
    """Answered on the event loop itself (no worker thread), so it stays fast under load."""
    loaded = engine.loaded
    return Health(
        model=engine.model_id,
        model_loaded=loaded is not None,
        device=loaded.device if loaded is not None else None,
        dtype=loaded.dtype if loaded is not None else None,
        backend=loaded.backend if loaded is not None else None,
        runtime=getattr(loaded.model, "runtime", None) if loaded is not None else None,
        documents=rag.store.document_count(),
        defenses=list(DEFENSES),
    )
