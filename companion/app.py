"""The companion's FastAPI application.

``create_app(settings)`` builds the app: the security middleware around
everything, the error envelope, the routers of :mod:`companion.api`, the chat
page at ``/`` and its static files.  The lifespan opens the document store,
loads the sentence embedder, creates the auditor's job manager and (unless
``preload_model`` is off) loads the chat model, so the first answer does not
pay for loading.  Routes reach all of these through :mod:`companion.api.deps`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from companion.api import OPTIONAL_ROUTERS, ROUTERS
from companion.api.deps import check_access
from companion.engine import ModelEngine
from companion.errors import install_error_handlers
from companion.keys import KeyStore, keys_path
from companion.mcp import http as mcp_http
from companion.security import SecurityMiddleware, ensure_token
from companion.settings import VERSION, Settings, get_settings

STATIC_DIR = Path(__file__).with_name("static")


def _include_routers(app: FastAPI) -> list[str]:
    included = []
    for name in ROUTERS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if name in OPTIONAL_ROUTERS and exc.name == name:
                continue
            raise
        app.include_router(module.router)
        included.append(name)
    return included


def create_app(settings: Settings | None = None, *, embedder: Any = None) -> FastAPI:
    """Build the companion app.

    ``embedder`` replaces the MiniLM loader (tests).  Everything a route uses is
    reached through :mod:`companion.api.deps`, which tests override with
    ``app.dependency_overrides``.
    """
    settings = settings or get_settings()
    token = ensure_token(settings.resolved_token_path())
    keys = KeyStore(keys_path(settings.resolved_home()))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from companion.audit.jobs import JobManager
        from companion.rag.service import RagService
        from companion.rag.store import DocumentStore

        emb = embedder
        if emb is None:
            from companion.models import load_embedder

            emb = await asyncio.to_thread(load_embedder, settings.device)
        store = DocumentStore(settings.resolved_store_path())
        app.state.rag = RagService(store=store, embedder=emb)
        app.state.audit_jobs = JobManager()
        if settings.preload_model:
            await asyncio.to_thread(app.state.engine.load)
        try:
            async with mcp_http.lifespan(app):  # the SDK's session manager for /mcp
                yield
        finally:
            store.close()

    app = FastAPI(
        title="Veil companion",
        version=VERSION,
        summary="Local RAG chat with privacy-aware decoding; OpenAI-compatible API.",
        lifespan=lifespan,
        # Every route is the owner's unless companion.keys.GUEST_ROUTES lists it.
        dependencies=[Depends(check_access)],
    )
    app.state.settings = settings
    app.state.keys = keys
    app.state.token = token
    app.state.started = int(time.time())
    app.state.engine = ModelEngine(
        spec=settings.model,
        device=settings.device,
        dtype=settings.dtype,
        queue_size=settings.queue_size,
        queue_timeout_s=settings.queue_timeout_s,
        generation_timeout_s=settings.generation_timeout_s,
    )
    install_error_handlers(app)
    app.state.routers = _include_routers(app)
    mcp_http.mount(app, settings.resolved_home())  # /mcp: RootGuard for agents

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(
        SecurityMiddleware,
        token=token,
        port=settings.port,
        extension_ids=settings.extension_ids,
        max_body_bytes=settings.max_body_bytes,
        max_upload_bytes=settings.max_upload_bytes,
        keys=keys,
    )
    return app
