"""A small MCP server for the tests, built with the official SDK (``mcp.server.mcpserver``).

Run as ``python tests/support/mcp_server.py [--http PORT] [--dead-marker PATH]``: over stdio by
default, over streamable HTTP on 127.0.0.1:PORT (path ``/mcp``) with ``--http``. Its tools:

* ``add(a, b)``: the sum of two integers; ``echo(text)``: the text back;
* ``search(query)``: no results (its name clashes with the search tool's);
* ``fail(reason)``: a tool error (the SDK answers it with ``isError``);
* ``sleep(seconds)``: answers after sleeping; ``pid()``: the server's process id;
* ``served_calls()``: how many tool calls this server process ran before this one;
* ``die()``: the server process exits at once, mid-call. With ``--dead-marker PATH`` it first
  writes PATH, and a server started while PATH exists exits before it serves anything: a server
  that died for good, whose restarts fail.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def build_server(dead_marker: Path | None) -> Any:
    """The SDK's ``MCPServer`` with the tools above (imported here: a dead server exits sooner)."""
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("agentrl-test-server", log_level="WARNING")
    served = [0]  # tool calls run so far

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        served[0] += 1
        return str(a + b)

    @server.tool(description="Say the text back.")
    def echo(text: str) -> str:
        served[0] += 1
        return text

    @server.tool(description="Search nothing (a name that clashes with the search tool's).")
    def search(query: str) -> str:
        served[0] += 1
        return f"no results for {query!r}"

    @server.tool(description="Fail with the given reason.")
    def fail(reason: str) -> str:
        served[0] += 1
        raise ToolError(reason)

    @server.tool(description="Sleep, then answer.")
    async def sleep(seconds: float) -> str:
        served[0] += 1
        await anyio.sleep(seconds)  # the server goes on serving meanwhile
        return f"slept {seconds}"

    @server.tool(description="The server's process id.")
    def pid() -> str:
        served[0] += 1
        return str(os.getpid())

    @server.tool(description="How many tool calls this server ran before this one.")
    def served_calls() -> str:
        return str(served[0])

    @server.tool(description="Exit the server process at once.")
    def die() -> str:
        if dead_marker is not None:
            dead_marker.write_text("dead")
        os._exit(3)

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on this port")
    parser.add_argument("--dead-marker", type=Path, default=None)
    args = parser.parse_args()
    if args.dead_marker is not None and args.dead_marker.exists():
        sys.exit(4)  # died for good: a restart fails
    server = build_server(args.dead_marker)
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
