"""Build tools from config by import path, so adding a tool never touches the manager.

``ToolConfig(class_path="my_pkg.tools.Weather", options={"api_url": ...})`` (or
``"my_pkg.tools:Weather"``) imports the class and calls it with ``options`` as keyword
arguments. Options are checked first (``rules.check_options``: the constructor's keywords, or
the fields of the tool's ``options_class``), so a typo fails with the tool's path, the option's
name and the closest one the tool takes instead of a bare ``TypeError``. Tag tools and schema
tools (``typed.py``) are both built and checked here; two tools sharing a tag or a name are
refused (``rules.Claims``).

One element builds one tool, or several: a class whose instances have ``list_tools()`` (and
neither a ``spec`` nor an ``execute``) is a **tool set**, e.g. ``mcp.MCPTools``, the
tools of one MCP server; the element stands for every tool the set lists, each a tool of its
own (name, schema, calls, metrics). ``build_toolset`` is that expansion, the one place it
happens; ``build_tools`` collects every element's tools; ``build_tool`` builds an element that
is one tool and refuses a tool set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentrl.config.moved import current_class_path
from agentrl.config.schema import ToolConfig
from agentrl.importing import import_object
from agentrl.tools.base import Tool
from agentrl.tools.rules import Claims, check_options
from agentrl.tools.typed import as_typed


def is_tool_set(obj: Any) -> bool:
    """Whether ``obj`` is a tool set (it lists tools) rather than a tool."""
    return (
        callable(getattr(obj, "list_tools", None))
        and not hasattr(obj, "spec")
        and not hasattr(obj, "execute")
    )


def _instantiate(config: ToolConfig | Mapping[str, Any]) -> tuple[Any, str]:
    """The object one config element names, built with its options, and the element's path."""
    if isinstance(config, Mapping):
        unknown = set(config) - {"class_path", "options"}
        if unknown:
            raise ValueError(
                f"tool config has unknown key(s) {sorted(unknown)}; expected class_path, options"
            )
        config = ToolConfig(**config)
    path = current_class_path(config.class_path, "tool class_path")
    options = dict(config.options or {})
    cls = import_object(path, "tool class_path")
    if not callable(cls):
        raise TypeError(f"tool class_path {path!r} names {type(cls).__name__}, not a class")
    check_options(cls, options, f"tool {path!r}")
    try:
        return cls(**options), path
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"tool {path!r}: {exc}") from exc


def build_toolset(config: ToolConfig | Mapping[str, Any]) -> list[Tool]:
    """The tools one config element builds: its one tool, or every tool its tool set lists."""
    built, path = _instantiate(config)
    if not is_tool_set(built):
        as_typed(built, f"tool {path!r}")  # checked: the attributes its kind needs, tag, timeout, spec
        return [built]
    try:
        tools = list(built.list_tools())
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"tool {path!r}: {exc}") from exc
    for i, tool in enumerate(tools):
        as_typed(tool, f"tool {path!r}, listed tool {i}")
    return tools


def build_tool(config: ToolConfig | Mapping[str, Any]) -> Tool:
    """Instantiate one tool from its config (a ``ToolConfig`` or a plain mapping); a tool set is refused."""
    built, path = _instantiate(config)
    if is_tool_set(built):
        raise TypeError(f"tool {path!r} is a tool set (it lists several tools): build it with build_toolset")
    as_typed(built, f"tool {path!r}")  # checked: the attributes its kind needs, tag, timeout, spec
    return built


def build_tools(configs: Iterable[ToolConfig | Mapping[str, Any]]) -> dict[str, Tool]:
    """All configured tools by tag, tool sets expanded; two tools may not share a tag or a name."""
    tools: dict[str, Tool] = {}
    claims: Claims[Any] = Claims()
    for config in configs:
        for tool in build_toolset(config):
            typed = as_typed(tool)
            clash = claims.claim(tool, tag=typed.tag, name=typed.name)
            if clash is not None:
                shown = f"<{clash.value}>" if clash.kind == "tag" else repr(clash.value)
                first, second = type(clash.holder).__name__, type(tool).__name__
                raise ValueError(f"tools {first} and {second} both use {clash.kind} {shown}")
            tools[typed.tag] = tool
    return tools
