"""``veil mcp serve`` and ``veil mcp proxy``: RootGuard for agents (MCP, stdio).

* ``veil mcp serve`` -- the MCP server of :mod:`companion.mcp.server` over stdio:
  ``get_value``, ``compute``, ``list_values``, ``protect_text`` on the person's
  record (``<veil home>/rootguard.json``, or ``--record FILE``).  The same server
  is at ``/mcp`` in the companion (``veil serve``), behind its token.
* ``veil mcp proxy --config FILE`` -- the proxy of :mod:`companion.mcp.proxy`
  over stdio, in front of the upstream servers ``FILE`` lists; every rewrite is
  appended to ``--log`` (JSON lines; never a true value).

stdout is the MCP channel: everything else goes to stderr.  Setting up the
record: ``veil rootguard init`` or ``veil rootguard import`` (docs/mcp.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from py_core.errors import InvalidParameterError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="RootGuard for agents: an MCP server of noisy values, and an MCP proxy",
        description="MCP (Model Context Protocol) over stdio. 'serve' gives agents the person's "
        "values as RootGuard's noisy values; 'proxy' sits in front of other MCP servers and "
        "replaces the person's values in every tool call. See docs/mcp.md.",
    )
    sub = parser.add_subparsers(dest="mcp_command", required=True)
    serve = sub.add_parser("serve", help="the MCP server over stdio")
    _record_argument(serve)
    serve.set_defaults(func=run_serve)
    proxy = sub.add_parser("proxy", help="the sanitizing MCP proxy over stdio")
    proxy.add_argument(
        "--config", required=True, metavar="FILE", help="JSON: {upstreams: {name: ...}}"
    )
    _record_argument(proxy)
    proxy.add_argument(
        "--log",
        metavar="FILE",
        help="append each rewrite here as a JSON line (default: <veil home>/mcp-proxy.log)",
    )
    proxy.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="seconds an upstream may take per call (default: the configuration's, else 30)",
    )
    proxy.add_argument(
        "--not-strict",
        action="store_true",
        help="leave numbers in fields that do not name a value alone even when they equal a "
        "declared value (default: replace them)",
    )
    proxy.set_defaults(func=run_proxy)


def _record_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="the person's RootGuard record (default: <veil home>/rootguard.json)",
    )


def _store(args: argparse.Namespace) -> Any:
    from companion.mcp.record import RecordStore, record_path
    from companion.settings import veil_home

    path = Path(args.record) if args.record else record_path(veil_home())
    store = RecordStore(path)
    store.require()  # refuse to start without a usable record: a clear message, exit 2
    return store


def run_serve(args: argparse.Namespace) -> int:
    import anyio

    from companion.mcp.guard import Guard
    from companion.mcp.server import build_server

    server = build_server(Guard(_store(args)))
    print("veil mcp serve: RootGuard's MCP server on stdio", file=sys.stderr)
    anyio.run(server.run_stdio_async)
    return 0


def _config(path: str, timeout: float | None) -> list[Any]:
    import dataclasses

    from companion.mcp.proxy import load_config

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidParameterError(f"no such file: {path!r}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidParameterError(
            f"cannot read the proxy configuration {path!r}: {exc}"
        ) from None
    upstreams = load_config(data)
    if timeout is not None:
        upstreams = [dataclasses.replace(u, timeout_s=timeout) for u in upstreams]
    return upstreams


def run_proxy(args: argparse.Namespace) -> int:
    import anyio
    from mcp.server.stdio import stdio_server

    from companion.mcp.guard import Guard
    from companion.mcp.proxy import Proxy, RewriteLog
    from companion.settings import veil_home

    upstreams = _config(args.config, args.timeout)
    guard = Guard(_store(args))
    log_path = Path(args.log) if args.log else veil_home() / "mcp-proxy.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)

    async def main() -> None:
        with open(log_path, "a", encoding="utf-8") as stream:
            proxy = Proxy(
                upstreams,
                guard.noise,
                strict=not args.not_strict,
                rewrite_log=RewriteLog(stream, summary=sys.stderr),
            )
            async with proxy:
                for name, why in proxy.down.items():
                    print(
                        f"veil mcp proxy: upstream {name!r} is unavailable: {why}", file=sys.stderr
                    )
                print(
                    f"veil mcp proxy: {len(proxy.clients)} upstream(s) on stdio; rewrites "
                    f"logged to {log_path}",
                    file=sys.stderr,
                )
                async with stdio_server() as (read, write):
                    await proxy.server.run(
                        read, write, proxy.server.create_initialization_options()
                    )

    anyio.run(main)
    return 0
