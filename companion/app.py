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
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

from companion.api.deps import check_access
from companion.engine import ModelEngine
from companion.errors import install_error_handlers
from companion.keys import KeyStore, keys_path
from companion.mcp import http as mcp_http
from companion.models import default_model
from companion.security import SecurityMiddleware, ensure_token
from companion.settings import VERSION, Settings, get_settings

STATIC_DIR = Path(__file__).with_name("static")

# Every response carries this policy: scripts, styles and connections from the
# companion itself only, nothing framed, no plugins.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
DOCS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Veil companion API</title></head>
<body><h1>Veil companion API</h1>
<p>The interactive API pages are off: they would load scripts from a public CDN on the
origin where the chat page keeps its token. The OpenAPI schema is at
<a href="/openapi.json">/openapi.json</a>; open it in any OpenAPI viewer.</p>
</body></html>
"""


class ContentSecurityPolicy:
    """Adds :data:`CSP` (and nosniff) to every HTTP response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_csp(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [
                    *message.get("headers", []),
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                ]
            await send(message)

        await self.app(scope, receive, send_with_csp)


def private_tree(home: Path) -> None:
    """Folders under the home 0700, files 0600 (tightens what an older version made)."""
    if not home.is_dir():
        return
    os.chmod(home, 0o700)
    for root, dirs, files in os.walk(home):  # symlinks are not followed
        for name in dirs:
            path = Path(root) / name
            if not path.is_symlink():
                os.chmod(path, 0o700)
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                os.chmod(path, 0o600)


def shutdown(app: FastAPI, timeout: float = 5.0) -> None:
    """Cancel the running generation and every audit job (the first SIGTERM ends the server)."""
    engine = getattr(app.state, "engine", None)
    if engine is not None:
        engine.close()
    jobs = getattr(app.state, "audit_jobs", None)
    if jobs is not None:
        jobs.shutdown(timeout=timeout)


def _include_routers(app: FastAPI) -> list[str]:
    """Every route of the companion, one router per capability, in this order."""
    from companion.api import (
        audit,
        budget,
        chat,
        conversations,
        defenses,
        digest,
        documents,
        health,
        keys,
        models,
    )

    modules = (
        health,
        models,
        chat,
        defenses,
        documents,
        digest,
        budget,
        audit,
        keys,
        conversations,
    )
    for module in modules:
        app.include_router(module.router)
    return [module.__name__ for module in modules]


def build_routes(app: FastAPI) -> None:
    """Build FastAPI's table of every included router's routes now, at startup.

    FastAPI (0.165 here) builds it the first time a request passes each included router,
    on the event loop: every route's dependencies and body schemas, ~0.15-0.35 s of CPU
    on two cores, during which no other request is answered -- what 40 concurrent
    ``POST /v1/audit/setup`` on a fresh server stalled ``/healthz`` on (issue 24).
    """
    for route in app.router.routes:
        for name in ("effective_route_contexts", "effective_low_priority_routes"):
            build = getattr(route, name, None)  # an included router (private to FastAPI)
            if callable(build):
                for _context in build():
                    pass


def make_engine(settings: Settings) -> ModelEngine:
    """The engine the settings name: the in-process loop, or vLLM (companion.vllm)."""
    common: dict[str, Any] = {
        "spec": settings.model or default_model(),  # chosen once: the id stays while serving
        "device": settings.device,
        "dtype": settings.dtype,
        "backend": settings.backend,
        "queue_size": settings.queue_size,
        "queue_timeout_s": settings.queue_timeout_s,
        "generation_timeout_s": settings.generation_timeout_s,
        "max_loaded": settings.max_loaded_models,
    }
    if settings.engine == "vllm":
        from companion.vllm.engine import VllmEngine

        return VllmEngine(
            **common,
            url=settings.vllm_url,
            api_key=settings.vllm_api_key,
            python=settings.vllm_python,
            ledgers=settings.vllm_ledger_dir or settings.resolved_home() / "vllm-ledgers",
            max_concurrency=settings.vllm_max_concurrency,
            server_args=tuple(settings.vllm_args),
            fallback=ModelEngine(**common) if settings.vllm_fallback else None,
        )
    return ModelEngine(**common)


def create_app(
    settings: Settings | None = None, *, embedder: Any = None, audit_jobs: Any = None
) -> FastAPI:
    """Build the companion app.

    ``embedder`` replaces the MiniLM loader and ``audit_jobs`` the auditor's job
    manager (tests).  Everything a route uses is
    reached through :mod:`companion.api.deps`, which tests override with
    ``app.dependency_overrides``.
    """
    settings = settings or get_settings()
    os.umask(0o077)  # everything the companion writes under its home is the person's alone
    token = ensure_token(settings.resolved_token_path())
    keys = KeyStore(keys_path(settings.resolved_home()))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from companion.audit.jobs import JobManager
        from companion.conversations.store import ConversationStore
        from companion.rag.service import RagService
        from companion.rag.store import DocumentStore

        emb = embedder
        if emb is None:
            from companion.models import load_embedder

            emb = await asyncio.to_thread(load_embedder, settings.device)
        store = DocumentStore(settings.resolved_store_path())
        app.state.conversations = ConversationStore(settings.resolved_conversations_path())
        private_tree(settings.resolved_home())
        app.state.rag = RagService(
            store=store,
            embedder=emb,
            max_chars=settings.max_document_chars,
            max_chunks=settings.max_document_chunks,
            chunk_max_tokens=settings.chunk_max_tokens,
        )
        if settings.answer_cache:
            from companion.answer.cache import AnswerCache

            app.state.rag.answers = AnswerCache.beside(
                settings.resolved_store_path(),
                embed=app.state.rag.embed,
                ttl_seconds=settings.answer_cache_ttl_s,
            )
        app.state.audit_jobs = audit_jobs or JobManager(
            max_queued=settings.audit_max_queued,
            max_running=settings.audit_max_running,
            abandon_after_s=settings.audit_abandon_s,
        )
        if settings.preload_model:
            await asyncio.to_thread(app.state.engine.load)
        build_routes(app)  # not on the loop while requests wait (FastAPI builds it lazily)
        try:
            async with mcp_http.lifespan(app):  # the SDK's session manager for /mcp
                yield
        finally:
            shutdown(app)
            store.close()
            if app.state.rag.answers is not None:
                app.state.rag.answers.close()
            app.state.conversations.close()
            keys.close()  # opened again if the app is started again

    app = FastAPI(
        title="Veil companion",
        version=VERSION,
        summary="Local RAG chat with privacy-aware decoding; OpenAI-compatible API.",
        lifespan=lifespan,
        # No page loads scripts from a CDN: the interactive docs are off, /docs points to
        # the schema (companion.app.DOCS_PAGE).
        docs_url=None,
        redoc_url=None,
        # Every route is the owner's unless companion.keys.GUEST_ROUTES lists it.
        dependencies=[Depends(check_access)],
    )
    app.state.settings = settings
    app.state.keys = keys
    app.state.token = token
    app.state.started = int(time.time())
    app.state.engine = make_engine(settings)
    install_error_handlers(app)
    app.state.routers = _include_routers(app)
    mcp_http.mount(app, settings.resolved_home())  # /mcp: RootGuard for agents

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/docs", include_in_schema=False)
    @app.get("/redoc", include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(DOCS_PAGE)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(ContentSecurityPolicy)
    app.add_middleware(
        SecurityMiddleware,
        token=token,
        port=settings.port,
        extension_ids=settings.extension_ids,
        max_body_bytes=settings.max_body_bytes,
        max_upload_bytes=settings.max_upload_bytes,
        keys=keys,
        max_header_bytes=settings.max_header_bytes,
        token_path=str(settings.resolved_token_path()),
    )
    return app
