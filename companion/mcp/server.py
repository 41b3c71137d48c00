"""``veil mcp serve``: the person's values for agents, as RootGuard's noisy values only.

:func:`build_server` makes an :class:`mcp.server.mcpserver.MCPServer` (the
official SDK) with four tools over a :class:`~companion.mcp.guard.Guard`:

* ``get_value(name)`` -- a root's cached noisy value, or a derived value computed
  from the noisy roots;
* ``compute(expression)`` -- a built-in formula (``fib4``, ``homa_ir``, ...) or a
  safe expression over the person's values (``weight_kg / (height_cm / 100) ** 2``),
  evaluated on the noisy values;
* ``list_values()`` -- every value with its ε per privacy unit and over the domain,
  and what has been spent;
* ``protect_text(text, krr_epsilon)`` -- RootGuard on a text, then k-RR when
  ``krr_epsilon`` is given.

The same server runs over stdio (``veil mcp serve``) and over streamable HTTP
inside the companion at ``/mcp`` (:mod:`companion.mcp.http`).  The true values
stay in the process: every answer is a noisy value or computed from noisy
values, and a tool's error names values, never numbers.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from companion.mcp.guard import Guard, error_text
from companion.settings import VERSION

__all__ = ["INSTRUCTIONS", "build_server"]

log = logging.getLogger("veil.mcp")

INSTRUCTIONS = (
    "Veil holds the person's health numbers (age, height, weight, blood pressure, labs). "
    "Ask it instead of asking the person: every value it gives is a differentially private "
    "noisy value, drawn once and reused, so the same number can be sent to any service any "
    "number of times without revealing more. Use compute for derived values (BMI, FIB-4, "
    "HOMA-IR, eGFR, ...), list_values to see what is declared and what it costs in privacy, "
    "protect_text before sending text that mentions the person's numbers."
)


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # every failure becomes a tool error without values
        if not isinstance(exc, ValueError):
            log.exception("veil mcp: %s failed", getattr(fn, "__name__", "tool"))
        raise ToolError(error_text(exc)) from None


def build_server(guard: Guard, *, name: str = "veil") -> MCPServer:
    """The MCP server over ``guard`` (not started)."""
    server: MCPServer = MCPServer(
        name,
        title="Veil RootGuard",
        version=VERSION,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    # get_value, compute and protect_text may draw a root the first time (and save it): not
    # read-only, but idempotent -- asking again gives the same answer.
    draws_once = ToolAnnotations(read_only_hint=False, idempotent_hint=True, open_world_hint=False)

    @server.tool(annotations=draws_once)
    def get_value(
        name: Annotated[str, Field(description="a value of the person's profile, e.g. weight_kg")],
    ) -> dict[str, Any]:
        """The person's value as RootGuard's noisy value (drawn once, then always the same).

        A derived value (bmi, fib4, ...) is computed from the noisy roots.
        """
        return _call(guard.get_value, name)

    @server.tool(annotations=draws_once)
    def compute(
        expression: Annotated[
            str,
            Field(
                description="a formula name (bmi, fib4, homa_ir, egfr, apri, tyg, map, whtr) or "
                "an arithmetic expression over the person's values, e.g. "
                "'weight_kg / (height_cm / 100) ** 2' (+ - * / **, sqrt, log, exp, abs, min, max)"
            ),
        ],
    ) -> dict[str, Any]:
        """A derived value computed from the person's noisy values (never from the true ones)."""
        return _call(guard.compute, expression)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def list_values() -> dict[str, Any]:
        """The person's declared values: unit, domain, noisy value if drawn, and their ε.

        ε per privacy unit (two values one privacy unit apart are e^ε-indistinguishable)
        and ε over the whole domain, per root, and what all draws have spent.
        """
        return _call(guard.list_values)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False))
    def protect_text(
        text: Annotated[str, Field(description="text that may mention the person's numbers")],
        krr_epsilon: Annotated[
            float | None,
            Field(
                description="if given, also perturb every other character with k-ary randomized "
                "response at this ε per character (0.5-11)",
                ge=0,
            ),
        ] = None,
    ) -> dict[str, Any]:
        """The text with the person's values replaced by their noisy values (then k-RR, optional)."""
        return _call(guard.protect_text, text, krr_epsilon)

    return server
