"""``veil mcp proxy``: an MCP server in front of other MCP servers that sanitizes every call.

The agent connects to the proxy (stdio); the proxy connects to the upstream
servers of its configuration (stdio commands or streamable-HTTP URLs) and lists
their tools as its own -- under their own names with one upstream, as
``<upstream>__<tool>`` with several.  Every ``tools/call``:

1. the arguments are rewritten (:class:`~companion.mcp.rewrite.Rewriter`) with the
   person's noisy values -- a root drawn for the first time is saved in the
   record before anything is sent;
2. the rewrite is logged (tool, JSON path, value name, how it was found, what was
   sent; never what was there);
3. the call goes upstream and its result comes back unchanged.

An upstream error reaches the agent as an MCP error naming the upstream and the
tool; an upstream that does not answer within its ``timeout_s`` gives a
``REQUEST_TIMEOUT`` error; an unreachable one says so.  A call that cannot be
sanitized without guessing (:class:`~companion.mcp.rewrite.ArgumentRefused`) is
not forwarded at all.

Configuration (JSON; ``mcpServers`` is accepted for ``upstreams``, as MCP clients
write it)::

    {"timeout_s": 30,
     "upstreams": {
       "clinic": {"command": "python", "args": ["clinic_server.py"], "env": {}},
       "labs":   {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ..."},
                  "timeout_s": 10}}}
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from companion.mcp.guard import error_text
from companion.mcp.rewrite import ArgumentRefused, Rewrite, Rewriter
from py_core.errors import InvalidParameterError, VeilError
from py_core.rootguard.cache import canonical_json
from py_core.rootguard.profile import Profile

__all__ = ["DEFAULT_TIMEOUT_S", "Proxy", "RewriteLog", "Upstream", "load_config"]

log = logging.getLogger("veil.mcp.proxy")

DEFAULT_TIMEOUT_S = 30.0
SEPARATOR = "__"
NoiseFactory = Callable[[str], AbstractContextManager[Any]]  # yields a NoiseSource


@dataclass(frozen=True, slots=True)
class Upstream:
    """One upstream MCP server: a command (stdio), a URL (streamable HTTP) or, in tests
    and the evaluation, an in-process server object."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    server: Any = None

    def __post_init__(self) -> None:
        given = [k for k in ("command", "url", "server") if getattr(self, k) is not None]
        if len(given) != 1:
            raise InvalidParameterError(
                f"upstream {self.name!r} needs exactly one of 'command' (stdio) or 'url' "
                f"(streamable HTTP); got {given or 'neither'}"
            )
        if not (isinstance(self.timeout_s, int | float) and 0 < self.timeout_s <= 3600):
            raise InvalidParameterError(
                f"upstream {self.name!r}: timeout_s must be a number of seconds in (0, 3600]; "
                f"got {self.timeout_s!r}"
            )
        if SEPARATOR in self.name or not self.name:
            raise InvalidParameterError(
                f"upstream name {self.name!r} must be non-empty and must not contain {SEPARATOR!r}"
            )

    def target(self) -> Any:
        if self.server is not None:
            return self.server
        if self.command is not None:
            return StdioServerParameters(
                command=self.command,
                args=list(self.args),
                env=dict(self.env) if self.env is not None else None,
                cwd=self.cwd,
            )
        http = httpx2.AsyncClient(
            headers=dict(self.headers),
            timeout=httpx2.Timeout(self.timeout_s, read=max(self.timeout_s, 300.0)),
        )
        return _HttpTransport(str(self.url), http)


class _HttpTransport:
    """streamable_http_client with an httpx2 client (headers) that it closes afterwards."""

    def __init__(self, url: str, http: httpx2.AsyncClient) -> None:
        self.url, self.http = url, http
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Any:
        self._stack = AsyncExitStack()
        await self._stack.enter_async_context(self.http)
        return await self._stack.enter_async_context(
            streamable_http_client(self.url, http_client=self.http)
        )

    async def __aexit__(self, *exc: object) -> None:
        assert self._stack is not None
        await self._stack.aclose()


def load_config(data: object) -> list[Upstream]:
    """The upstreams of a proxy configuration (see the module docstring); every problem listed."""
    if not isinstance(data, Mapping):
        raise InvalidParameterError("the proxy configuration must be a JSON object")
    servers = data.get("upstreams", data.get("mcpServers"))
    if not isinstance(servers, Mapping) or not servers:
        raise InvalidParameterError(
            "the proxy configuration needs 'upstreams': {name: {command, args} or {url}}"
        )
    default_timeout = data.get("timeout_s", DEFAULT_TIMEOUT_S)
    problems, out = [], []
    for name, spec in servers.items():
        if not isinstance(spec, Mapping):
            problems.append(f"upstream {name!r} must be an object")
            continue
        unknown = set(spec) - {"command", "args", "env", "cwd", "url", "headers", "timeout_s"}
        if unknown:
            problems.append(f"upstream {name!r}: unknown keys {sorted(unknown)}")
            continue
        try:
            out.append(
                Upstream(
                    name=str(name),
                    command=spec.get("command"),
                    args=tuple(str(a) for a in spec.get("args", ())),
                    env=spec.get("env"),
                    cwd=spec.get("cwd"),
                    url=spec.get("url"),
                    headers=dict(spec.get("headers") or {}),
                    timeout_s=spec.get("timeout_s", default_timeout),
                )
            )
        except InvalidParameterError as exc:
            problems.append(str(exc))
    if problems:
        raise InvalidParameterError("invalid proxy configuration: " + "; ".join(problems))
    return out


class RewriteLog:
    """Where the proxy writes what it replaced: JSON lines to a file, a summary to stderr."""

    def __init__(self, stream: TextIO | None = None, *, summary: TextIO | None = sys.stderr):
        self.stream = stream
        self.summary = summary
        self.entries: list[dict[str, Any]] = []
        self.keep = stream is None and summary is None  # in memory (tests, evaluation)

    def write(self, upstream: str, tool: str, rewrites: list[Rewrite]) -> None:
        entry = {
            "ts": round(time.time(), 3),
            "upstream": upstream,
            "tool": tool,
            "replaced": [r.to_dict() for r in rewrites],
        }
        if self.keep:
            self.entries.append(entry)
        if self.stream is not None:
            self.stream.write(json.dumps(entry) + "\n")
            self.stream.flush()
        if self.summary is not None and rewrites:
            what = ", ".join(f"{r.name} at {r.path} ({r.how})" for r in rewrites)
            print(f"veil mcp proxy: {upstream}.{tool}: replaced {what}", file=self.summary)

    def refused(self, upstream: str, tool: str, reason: str) -> None:
        """A call that was not forwarded, and why (the reason names places and values,
        never a number)."""
        entry = {"ts": round(time.time(), 3), "upstream": upstream, "tool": tool, "refused": reason}
        if self.keep:
            self.entries.append(entry)
        if self.stream is not None:
            self.stream.write(json.dumps(entry) + "\n")
            self.stream.flush()
        if self.summary is not None:
            print(f"veil mcp proxy: {upstream}.{tool}: not forwarded: {reason}", file=self.summary)


class Proxy:
    """The proxy: connect with ``async with``, then serve :attr:`server` on any transport."""

    def __init__(
        self,
        upstreams: list[Upstream],
        noise: NoiseFactory,
        *,
        strict: bool = True,
        rewrite_log: RewriteLog | None = None,
    ) -> None:
        names = [u.name for u in upstreams]
        if len(set(names)) != len(names) or not names:
            raise InvalidParameterError(f"upstream names must be unique and given; got {names}")
        self.upstreams = {u.name: u for u in upstreams}
        self.noise = noise
        self.strict = strict
        self.rewrite_log = rewrite_log or RewriteLog(None, summary=None)
        self.clients: dict[str, Client] = {}
        self.down: dict[str, str] = {}
        self._schemas: dict[tuple[str, str], dict[str, Any]] = {}
        self._rewriters: dict[str, Rewriter] = {}
        self._stack: AsyncExitStack | None = None
        self.server: Server[Any] = Server(
            "veil-proxy",
            instructions="Veil's RootGuard proxy: the tools of the upstream servers; the "
            "person's numbers in every call are replaced by their differentially private "
            "noisy values before they are sent.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    async def __aenter__(self) -> Proxy:
        self._stack = AsyncExitStack()
        for name, upstream in self.upstreams.items():
            client = Client(upstream.target(), read_timeout_seconds=upstream.timeout_s)
            try:  # the client's read timeout bounds the handshake (a cancel scope may not wrap it)
                self.clients[name] = await self._stack.enter_async_context(client)
            except Exception as exc:  # an upstream that is down must not stop the others
                self.down[name] = _failure(exc)
                log.warning("veil mcp proxy: upstream %r is unavailable: %s", name, self.down[name])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._stack is not None:
            await self._stack.aclose()

    # -- naming -----------------------------------------------------------------------------
    def exposed(self, upstream: str, tool: str) -> str:
        return tool if len(self.upstreams) == 1 else f"{upstream}{SEPARATOR}{tool}"

    def resolve(self, exposed: str) -> tuple[str, str]:
        if len(self.upstreams) == 1:
            return next(iter(self.upstreams)), exposed
        upstream, sep, tool = exposed.partition(SEPARATOR)
        if not sep or upstream not in self.upstreams:
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown tool {exposed!r}: proxied tools are named <upstream>{SEPARATOR}<tool>, "
                f"upstreams: {', '.join(self.upstreams)}",
            )
        return upstream, tool

    def rewriter(self, profile: Profile) -> Rewriter:
        key = canonical_json(profile.source)
        if key not in self._rewriters:
            self._rewriters[key] = Rewriter(profile, strict=self.strict)
        return self._rewriters[key]

    # -- handlers ---------------------------------------------------------------------------
    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = []
        for name, client in self.clients.items():
            try:
                with anyio.fail_after(self.upstreams[name].timeout_s):
                    listed = await _all_tools(client)
            except Exception as exc:
                log.warning("veil mcp proxy: upstream %r did not list its tools: %s", name, exc)
                continue
            for tool in listed:
                self._schemas[(name, tool.name)] = dict(tool.input_schema)
                tools.append(tool.model_copy(update={"name": self.exposed(name, tool.name)}))
        return types.ListToolsResult(tools=tools)

    async def _schema(self, upstream: str, tool: str) -> dict[str, Any] | None:
        if (upstream, tool) not in self._schemas:
            with contextlib.suppress(Exception):
                with anyio.fail_after(self.upstreams[upstream].timeout_s):
                    listed = await _all_tools(self.clients[upstream])
                for t in listed:
                    self._schemas[(upstream, t.name)] = dict(t.input_schema)
        return self._schemas.get((upstream, tool))

    def sanitize(
        self,
        upstream: str,
        tool: str,
        arguments: Mapping[str, Any],
        schema: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """The arguments to forward (the record's new draws saved first), logged."""
        try:
            with self.noise(f"proxy {upstream}.{tool}") as source:
                args, rewrites = self.rewriter(source.profile).rewrite(arguments, schema, source)
        except ArgumentRefused as exc:
            self.rewrite_log.refused(upstream, tool, str(exc))
            raise MCPError(types.INVALID_PARAMS, f"Veil did not forward {tool!r}: {exc}") from None
        except VeilError as exc:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"Veil could not sanitize the call to {tool!r}, so it was not sent: "
                + error_text(exc),
            ) from None
        self.rewrite_log.write(upstream, tool, rewrites)
        return args

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        upstream, tool = self.resolve(params.name)
        if upstream in self.down:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"upstream {upstream!r} is unavailable ({self.down[upstream]}); {tool!r} was not sent",
            )
        client = self.clients[upstream]
        schema = await self._schema(upstream, tool)
        args = await anyio.to_thread.run_sync(
            self.sanitize, upstream, tool, dict(params.arguments or {}), schema
        )
        timeout = self.upstreams[upstream].timeout_s
        try:
            with anyio.fail_after(timeout):
                result = await client.call_tool(tool, args)
        except TimeoutError:
            raise MCPError(
                types.REQUEST_TIMEOUT,
                f"upstream {upstream!r} did not answer {tool!r} within {timeout:g} s (the "
                "sanitized call was sent; no result came back)",
            ) from None
        except MCPError as exc:
            raise MCPError(
                exc.code, f"upstream {upstream!r} refused {tool!r}: {exc.message}", exc.data
            ) from None
        except Exception as exc:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"upstream {upstream!r} could not be reached for {tool!r}: {_failure(exc)}",
            ) from None
        return result  # unchanged

    async def call_direct(self, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Run one call through the proxy without an MCP client in front (the evaluation)."""
        return await self._call_tool(
            None, types.CallToolRequestParams(name=name, arguments=dict(arguments))
        )


async def _all_tools(client: Client) -> list[types.Tool]:
    """Every tool of an upstream, page after page."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _failure(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_failure(e) for e in exc.exceptions)
    return str(exc).strip() or type(exc).__name__
