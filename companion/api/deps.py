"""What a route may use, as FastAPI dependencies: settings, the model engine, RAG, audit jobs,
guest keys, conversations, and who is calling.

All of them are created once, by :func:`companion.app.create_app` and its
lifespan, and kept on the app; routes declare what they need
(``settings: SettingsDep``) instead of reading ``request.app.state``, and tests
replace any of them with ``app.dependency_overrides[get_rag] = ...``.

Access: :func:`check_access` is a dependency of the whole app (``create_app``
passes it to ``FastAPI(dependencies=...)``), so every route -- including ones
added later -- is the owner's unless :data:`companion.keys.GUEST_ROUTES` lists
it.  Routes that behave differently for guests take ``principal: PrincipalDep``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, cast

from fastapi import Depends, Request

from companion.errors import APIError, ErrorCode
from companion.keys import GUEST_ROUTES, PUBLIC, KeyStore, Principal
from companion.settings import Settings

if TYPE_CHECKING:
    from companion.audit.jobs import JobManager
    from companion.conversations.store import ConversationStore
    from companion.engine import Engine
    from companion.rag.service import RagService


def _state(request: Request, name: str) -> Any:
    value = getattr(request.app.state, name, None)
    if value is None:  # pragma: no cover - the lifespan always sets it
        raise RuntimeError(f"the app has no {name}: was it started through its lifespan?")
    return value


def get_settings(request: Request) -> Settings:
    return cast(Settings, _state(request, "settings"))


def get_engine(request: Request) -> Engine:
    return cast("Engine", _state(request, "engine"))


def get_rag(request: Request) -> RagService:
    return cast("RagService", _state(request, "rag"))


def get_audit_jobs(request: Request) -> JobManager:
    return cast("JobManager", _state(request, "audit_jobs"))


def get_keys(request: Request) -> KeyStore:
    return cast(KeyStore, _state(request, "keys"))


def get_conversations(request: Request) -> ConversationStore:
    """The app's conversation store (``<home>/conversations.sqlite3``, opened by the lifespan)."""
    return cast("ConversationStore", _state(request, "conversations"))


def get_started(request: Request) -> int:
    return cast(int, _state(request, "started"))


def get_principal(request: Request) -> Principal:
    """Who is calling, as the security middleware identified them (public if it did not)."""
    principal = request.scope.get("veil.principal", PUBLIC)
    assert isinstance(principal, Principal)
    return principal


def check_access(request: Request) -> None:
    """A guest may call only the routes of GUEST_ROUTES (the middleware checked the path too)."""
    principal = get_principal(request)
    if principal.kind != "guest":
        return
    route = request.scope.get("route")
    template = getattr(route, "path_format", None) or request.url.path
    if (request.method, template) not in GUEST_ROUTES:
        raise APIError(
            403,
            ErrorCode.GUEST_FORBIDDEN,
            f"{request.method} {template} needs the owner's token; a guest key can only chat",
        )


def require_owner(request: Request) -> Principal:
    """The owner, or 403 for a guest (for a route that must never be opened to guests)."""
    principal = get_principal(request)
    if principal.kind == "guest":
        raise APIError(
            403,
            ErrorCode.GUEST_FORBIDDEN,
            f"{request.method} {request.url.path} needs the owner's token, not a guest key",
        )
    return principal


SettingsDep = Annotated[Settings, Depends(get_settings)]
EngineDep = Annotated["Engine", Depends(get_engine)]
RagDep = Annotated["RagService", Depends(get_rag)]
AuditJobsDep = Annotated["JobManager", Depends(get_audit_jobs)]
StartedDep = Annotated[int, Depends(get_started)]
KeysDep = Annotated[KeyStore, Depends(get_keys)]
ConversationsDep = Annotated["ConversationStore", Depends(get_conversations)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
OwnerDep = Annotated[Principal, Depends(require_owner)]
