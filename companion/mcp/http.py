"""The MCP server over streamable HTTP inside the companion, at ``/mcp``.

:func:`mount` adds the SDK's streamable-HTTP endpoint to the companion's FastAPI
app as a plain route, so the companion's :class:`~companion.security.SecurityMiddleware`
wraps it like every other path: Host must be loopback, an Origin must be the
companion's own page or the Veil extension, and ``/mcp`` needs the owner's token
(``Authorization: Bearer <token>``; guest keys get 403).  The SDK's own Host and
Origin checks are off: they would be a second, different list (they refuse the
extension's origin), and the companion's are the ones its tests pin.

The SDK's session manager needs a running task group: the companion's lifespan
enters :func:`lifespan` (``session_manager.run()``), which a server instance allows
once -- so every app builds its own server.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from companion.mcp.guard import Guard
from companion.mcp.record import RecordStore, record_path
from companion.mcp.server import build_server

__all__ = ["MCP_PATH", "lifespan", "mount"]

MCP_PATH = "/mcp"


def mount(app: FastAPI, home: Path) -> MCPServer:
    """Add ``/mcp`` to ``app``, over the record in ``home``; the server, kept in app.state.mcp."""
    server = build_server(Guard(RecordStore(record_path(home))))
    sub = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    app.router.routes.extend(sub.routes)
    app.state.mcp = server
    return server


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Run the MCP session manager for as long as the app runs (no-op without ``/mcp``)."""
    server: MCPServer | None = getattr(app.state, "mcp", None)
    if server is None:
        yield
        return
    async with server.session_manager.run():
        yield
