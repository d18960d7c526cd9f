"""An MCP server's tools as agentrl tools, on the official ``mcp`` SDK (stdio or streamable HTTP)."""

from agentrl.tools.mcp.tools import MCPTool, MCPTools

__all__ = ["MCPTool", "MCPTools"]
