"""Tools the policy can call (by tag or by schema), and the registry that builds them from config."""

from agentrl.tools.base import Tool, ToolContractError, ToolError, ToolResult, ToolTimeout
from agentrl.tools.registry import build_tool, build_tools, build_toolset
from agentrl.tools.spec import ToolSpec, argument_errors
from agentrl.tools.typed import SchemaTool, ToolSession, TypedTool, as_typed

__all__ = [
    "SchemaTool",
    "Tool",
    "ToolContractError",
    "ToolError",
    "ToolResult",
    "ToolSession",
    "ToolSpec",
    "ToolTimeout",
    "TypedTool",
    "argument_errors",
    "as_typed",
    "build_tool",
    "build_tools",
    "build_toolset",
]
