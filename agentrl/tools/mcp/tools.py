"""An MCP server's tools as agentrl tools, by config alone: one config element, one tool per listed tool.

```yaml
actor:
  rollout:
    tools:
      - class_path: agentrl.tools.mcp.MCPTools
        options:
          command: [python, my_server.py]   # stdio: the SDK launches it; or url: http://host:8000/mcp
          tools: [add, echo]                # optional allow-list (the server's names)
          prefix: calc_                     # optional: calc_add, calc_echo (to avoid a clash)
          timeout_s: 10                     # one call; connect_timeout_s bounds the server's start
```

**The design.** An element of ``actor.rollout.tools`` builds one tool, or, when its class is a
*tool set* (``registry.build_toolset``: an object with ``list_tools()``), every tool the set
lists. ``MCPTools`` is such a set: its constructor only checks the options (it connects to
nothing, so building it is free); ``list_tools()`` connects, lists the server's tools
(``tools/list``, every page) and stops the server again, returning one ``MCPTool`` per tool:
a schema tool (``typed.py``) whose ``ToolSpec`` is the server's name (``prefix`` + the name,
characters outside ``[A-Za-z0-9_]`` as ``_``), description and ``inputSchema``. To the rest of
the project each is an ordinary tool: its name is checked for clashes with every other tool
(the registry, and the driver's ``tools/check.py``, which lists the server once before
Ray starts), its calls are counted under its name (``rollout/tool_calls/<name>``), its
arguments are checked against its schema before the server sees them, and ``tool_error_policy``
decides what a failure becomes. Every process that builds the tools (the driver's check, the
rollout worker) lists them itself, so the server must list the same tools to each.

**Calls.** The tools of one server share one ``MCPClient`` (``client.py``): on the rollout's
event loop, the first call starts the server (or opens the HTTP session) and later calls share
it; the rollout's ``close()`` stops it, so a stdio server lives for one rollout (a server slow to
start is better run on its own and reached by ``url``). A result's text contents are joined by
newlines (other content is named in brackets; structured content alone is shown as JSON); a
result the server marks ``isError`` is the tool message as it is, an observation the policy can
learn from, counted in ``<name>/errors``. A call past ``timeout_s`` is a ``ToolTimeout``; a
server that died or cannot be reached is a ``ToolError`` (under ``tool_error_policy=observe``,
an error observation of that trajectory), and the next call starts it again, at most
``max_reconnects`` times per rollout.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

import mcp_types

from agentrl.tools.base import ToolResult
from agentrl.tools.mcp.client import MCPClient, MCPEndpoint
from agentrl.tools.rules import check_tag, check_timeout, did_you_mean
from agentrl.tools.spec import ToolSpec

__all__ = ["MCPTool", "MCPTools"]

_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_]")


class MCPTool:
    """One tool of an MCP server, as a schema tool (built by ``MCPTools.list_tools``)."""

    def __init__(self, spec: ToolSpec, remote_name: str, client: MCPClient, call_timeout_s: float) -> None:
        self.spec = spec
        self.name = spec.name
        self.remote_name = remote_name  # the name the server knows it by
        self.client = client
        self.call_timeout_s = call_timeout_s
        # The dispatcher's bound on one batch: a call, plus a server start when one is needed
        # first. The call itself is bounded by call_timeout_s (ToolTimeout), the start by the
        # client's connect_timeout_s (ToolError), so this outer bound never fires first.
        self.timeout_s = call_timeout_s + client.connect_timeout_s + 1.0

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r} -> {self.remote_name!r} on {self.client.endpoint})"

    async def call(self, arguments: list[dict[str, Any]]) -> list[ToolResult]:
        """One result per call; a batch's calls go to the server concurrently."""
        tasks = [asyncio.ensure_future(self._one(a)) for a in arguments]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:  # one call failed: the others' answers are not waited for
                task.cancel()

    async def _one(self, arguments: dict[str, Any]) -> ToolResult:
        result = await self.client.call_tool(self.remote_name, arguments, self.call_timeout_s)
        text = result_text(result)
        if result.is_error and not text:
            text = f"{self.name} failed (the server gave no reason)"
        return ToolResult(text, {f"{self.name}/errors": float(bool(result.is_error))})

    async def close(self) -> None:
        """Close the server's connection on this loop (shared: the first tool's close does it)."""
        await self.client.close()


class MCPTools:
    """The tools of one MCP server, a tool set (see the module docstring).

    ``command`` (argv, or one string split as a shell would) launches a stdio server, with
    ``env`` (merged over the SDK's safe default environment) and ``cwd``; ``url`` reaches a
    streamable HTTP server. ``tools``: the server's names to expose (default: all it lists);
    ``prefix`` is put before each name; ``timeout_s`` bounds one call, ``connect_timeout_s`` a
    server's start (and the listing), ``max_reconnects`` the restarts per rollout.
    """

    def __init__(
        self,
        command: Sequence[str] | str | None = None,
        url: str | None = None,
        tools: Sequence[str] | None = None,
        prefix: str = "",
        timeout_s: float = 30.0,
        connect_timeout_s: float = 30.0,
        max_reconnects: int = 3,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.endpoint = MCPEndpoint.of(command, url, env, cwd)
        if tools is not None and (isinstance(tools, str) or not all(isinstance(t, str) for t in tools)):
            raise ValueError(f"MCP option 'tools' must be a list of tool names, got {tools!r}")
        if prefix and not prefix.isidentifier():
            raise ValueError(f"MCP option 'prefix' must start an identifier, like 'fs_', got {prefix!r}")
        self.allowed = None if tools is None else list(tools)
        self.prefix = prefix
        self.timeout_s = check_timeout(timeout_s, f"{self.endpoint}")
        self.client = MCPClient(
            self.endpoint, check_timeout(connect_timeout_s, str(self.endpoint)), max_reconnects
        )
        self._listed: list[MCPTool] | None = None

    def __repr__(self) -> str:
        return f"MCPTools({self.endpoint})"

    def list_tools(self) -> list[MCPTool]:
        """One ``MCPTool`` per tool the server lists (or per allowed one), in the server's order.

        Connects, lists and stops the server again (once per instance; later calls reuse the list).
        Raises ``ToolError`` when the server cannot be reached, ``ValueError`` for an allowed name
        the server does not list, a name that is not usable, or an input schema that is not valid.
        """
        if self._listed is None:
            listed = self.client.list_tools_blocking(self.timeout_s)
            self._listed = self._tools_of(listed)
        return list(self._listed)

    def _tools_of(self, listed: list[mcp_types.Tool]) -> list[MCPTool]:
        by_name = {tool.name: tool for tool in listed}
        if self.allowed is not None:
            unknown = [name for name in self.allowed if name not in by_name]
            if unknown:
                hints = "".join(did_you_mean(name, by_name, for_name=True) for name in unknown)
                raise ValueError(
                    f"{self.endpoint} lists no tool {unknown}{hints}; it lists {sorted(by_name)}"
                )
            listed = [by_name[name] for name in self.allowed]
        built: list[MCPTool] = []
        seen: dict[str, str] = {}
        for tool in listed:
            name = self.prefix + _NOT_IN_NAME.sub("_", tool.name)
            where = f"{self.endpoint}, tool {tool.name!r}"
            if name in seen:
                raise ValueError(f"{where}: its name {name!r} is also that of its tool {seen[name]!r}")
            seen[name] = tool.name
            check_tag(name, f"{where} (set the option 'prefix' to rename)")
            spec = ToolSpec(name, _description(tool), _parameters(tool, where))
            built.append(MCPTool(spec, tool.name, self.client, self.timeout_s))
        return built

    async def close(self) -> None:
        """Close the server's connection on this loop, if any."""
        await self.client.close()


def _description(tool: mcp_types.Tool) -> str:
    return (tool.description or tool.title or f"The {tool.name} tool of an MCP server.").strip()


def _parameters(tool: mcp_types.Tool, where: str) -> dict[str, Any]:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    if schema["type"] != "object":
        raise ValueError(f"{where}: its inputSchema must have type 'object', got {schema['type']!r}")
    return schema


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text the policy reads: text contents joined by newlines, other contents named in brackets,
    structured content as JSON when there is nothing else."""
    parts = [_content_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    return "\n".join(parts)


def _content_text(block: Any) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.EmbeddedResource):
        text = getattr(block.resource, "text", None)
        return text if isinstance(text, str) else f"[resource {block.resource.uri}]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link {block.uri}]"
    kind = getattr(block, "type", type(block).__name__)
    mime = getattr(block, "mime_type", None)
    return f"[{kind} content{f' ({mime})' if mime else ''}]"
