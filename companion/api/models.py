"""``GET /v1/models``: the one model this companion serves."""

from __future__ import annotations

from fastapi import APIRouter, Request

from companion.protocol import ModelCard, ModelList

router = APIRouter(tags=["models"])


@router.get("/v1/models", response_model=ModelList, summary="List models (OpenAI-compatible)")
def list_models(request: Request) -> ModelList:
    engine = request.app.state.engine
    return ModelList(data=[ModelCard(id=engine.model_id, created=request.app.state.started)])
