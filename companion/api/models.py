"""``GET /v1/models``: the one model this companion serves."""

from __future__ import annotations

from fastapi import APIRouter

from companion.api.deps import EngineDep, StartedDep
from companion.protocol import ModelCard, ModelList

router = APIRouter(tags=["models"])


@router.get("/v1/models", response_model=ModelList, summary="List models (OpenAI-compatible)")
def list_models(engine: EngineDep, started: StartedDep) -> ModelList:
    return ModelList(data=[ModelCard(id=engine.model_id, created=started)])
