"""What a route may use, as FastAPI dependencies: settings, the model engine, RAG, audit jobs.

All of them are created once, by :func:`companion.app.create_app` and its
lifespan, and kept on the app; routes declare what they need
(``settings: SettingsDep``) instead of reading ``request.app.state``, and tests
replace any of them with ``app.dependency_overrides[get_rag] = ...``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request

from companion.settings import Settings

if TYPE_CHECKING:
    from companion.audit.jobs import JobManager
    from companion.engine import ModelEngine
    from companion.rag.service import RagService


def _state(request: Request, name: str) -> Any:
    value = getattr(request.app.state, name, None)
    if value is None:  # pragma: no cover - the lifespan always sets it
        raise RuntimeError(f"the app has no {name}: was it started through its lifespan?")
    return value


def get_settings(request: Request) -> Settings:
    settings: Settings = _state(request, "settings")
    return settings


def get_engine(request: Request) -> ModelEngine:
    engine: ModelEngine = _state(request, "engine")
    return engine


def get_rag(request: Request) -> RagService:
    rag: RagService = _state(request, "rag")
    return rag


def get_audit_jobs(request: Request) -> JobManager:
    jobs: JobManager = _state(request, "audit_jobs")
    return jobs


def get_started(request: Request) -> int:
    started: int = _state(request, "started")
    return started


SettingsDep = Annotated[Settings, Depends(get_settings)]
EngineDep = Annotated["ModelEngine", Depends(get_engine)]
RagDep = Annotated["RagService", Depends(get_rag)]
AuditJobsDep = Annotated["JobManager", Depends(get_audit_jobs)]
StartedDep = Annotated[int, Depends(get_started)]
