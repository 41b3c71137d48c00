"""``GET /healthz``: is the companion up, which model, how many documents."""

from __future__ import annotations

from fastapi import APIRouter, Request

from companion.decoding.registry import DEFENSES
from companion.protocol import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness and what is loaded")
def healthz(request: Request) -> Health:
    engine = request.app.state.engine
    loaded = engine.loaded
    return Health(
        model=engine.model_id,
        model_loaded=loaded is not None,
        device=loaded.device if loaded is not None else None,
        dtype=loaded.dtype if loaded is not None else None,
        documents=len(request.app.state.rag.store.documents()),
        defenses=list(DEFENSES),
    )
