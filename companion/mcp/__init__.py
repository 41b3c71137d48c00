"""RootGuard where agents work: an MCP server of noisy values and a sanitizing MCP proxy.

* :mod:`companion.mcp.record` -- the person's record (profile, true values, state),
  shared with the extension by import/export;
* :mod:`companion.mcp.guard` -- noisy values from the record, drawn once;
* :mod:`companion.mcp.rewrite` -- a tool call's arguments with the values replaced;
* :mod:`companion.mcp.server` -- ``veil mcp serve`` (stdio) and ``/mcp`` (HTTP);
* :mod:`companion.mcp.proxy` -- ``veil mcp proxy``;
* :mod:`companion.mcp.http` -- the mount into the companion.

See docs/mcp.md.
"""
