"""``GET /v1/defenses``: the decoding defenses from the registry, for clients and the chat page."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from companion.api.deps import SettingsDep
from companion.decoding.registry import DEFAULT_DEFENSE, all_defenses

router = APIRouter(tags=["chat"])


@router.get("/v1/defenses", summary="The decoding defenses: guarantee, defaults and knobs")
def list_defenses(settings: SettingsDep) -> dict[str, Any]:
    """``default`` is what the owner's request without ``defense`` gets
    (``Settings.owner_defense``); ``guest_default`` what a new guest key gets unless the
    owner names another."""
    return {
        "default": settings.owner_defense,
        "guest_default": DEFAULT_DEFENSE,
        "data": [d.describe() for d in all_defenses()],
    }
