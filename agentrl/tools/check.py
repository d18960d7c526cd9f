"""The configured tools, checked on the driver before Ray starts: class path, options, tags.

Each tool of ``actor.rollout.tools`` is imported and built once here, as the rollout will
build it in the actor, so a typo costs a second instead of a worker's start-up. Every
error names the list element (``actor.rollout.tools[1]``) and, where one is close, what
was meant: a class name the module does have, an option the tool does take. The rules are
those of ``rules.py``, the same the registry applies: the options a tool takes
(``check_options``), a tag the protocol reserves (``think``, ``information``, ``answer``), two
tools sharing a tag or a name (``Claims``); here they are worded by list element.

The rules live apart from this driver because the registry applies them too and this module
builds the tools with the registry: one module holding both would import itself in a circle.

A tool's constructor runs here on the driver: it should open connections lazily (as
``SearchTool`` does), on its first call inside the worker. An element that is a tool set
(``registry.build_toolset``: an MCP server's tools, ``MCPTools``) is listed here, once: each
tool it lists is checked like any other (a clash names the element that has the name first),
and a set that cannot be listed (a server that does not start) stops the run by its element.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from agentrl.config.moved import current_class_path
from agentrl.config.schema import ToolConfig
from agentrl.importing import import_object
from agentrl.tool_identity import FORMAT_TRAITS, ToolIdentity
from agentrl.tools.base import ToolError
from agentrl.tools.registry import build_toolset, is_tool_set
from agentrl.tools.rules import Claims, check_options, did_you_mean
from agentrl.tools.typed import as_typed

__all__ = ["ToolConfigError", "check_tools"]

WORKERS_HINT = (
    "the module must be importable where the trainer is launched: from the launch directory, "
    "from a directory on PYTHONPATH, or installed (docs/adding_a_tool.md, 'Ray workers')"
)


class ToolConfigError(ValueError):
    """A configured tool cannot be built; the message names the element and the problem."""


def _tool_class(path: str, where: str) -> Any:
    """The class ``path`` names; a missing name gets the module's closest public name."""
    try:
        return import_object(path, "tool class_path")
    except ImportError as exc:
        module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except Exception:  # the module itself is the problem: say where modules are found
            raise ToolConfigError(f"{where}: {exc}; {WORKERS_HINT}") from None
        public = [n for n in dir(module) if not n.startswith("_")]
        raise ToolConfigError(f"{where}: {exc}{did_you_mean(attr, public)}") from None
    except ValueError as exc:
        raise ToolConfigError(f"{where}: {exc}") from None


def check_tools(configs: Sequence[ToolConfig], tool_format: str = "tags") -> ToolIdentity:
    """Build every configured tool once, as the rollout does; return the run's tool identity: the
    tools' tags and names in order, and the traits of ``tool_format`` (``actor.rollout.tool_format``).

    Raises ``ToolConfigError`` naming ``actor.rollout.tools[i]`` for a class path that does
    not import, an unknown option, a constructor that refuses its options, a reserved tag,
    or a tag or name another tool already uses; an unknown format is refused by name.
    """
    if tool_format not in FORMAT_TRAITS:
        choices = sorted(FORMAT_TRAITS)
        raise ToolConfigError(f"actor.rollout.tool_format must be one of {choices}, got {tool_format!r}")
    tags: list[str] = []
    names: list[str] = []
    claims: Claims[int] = Claims()  # the element that has each tag and name first
    for i, config in enumerate(configs):
        path = current_class_path(config.class_path, f"actor.rollout.tools[{i}].class_path")
        config = ToolConfig(path, config.options)  # a moved module's old path: checked as the new one
        where = f"actor.rollout.tools[{i}] ({path})"
        cls = _tool_class(path, where)
        try:
            check_options(cls, dict(config.options or {}), where)
        except (TypeError, ValueError) as exc:
            raise ToolConfigError(str(exc)) from None
        try:
            built = [as_typed(tool, "tool") for tool in build_toolset(config)]
        except (ImportError, TypeError, ValueError, ToolError) as exc:
            raise ToolConfigError(f"{where}: {exc}") from None
        for tool in built:
            clash = claims.claim(i, tag=tool.tag, name=tool.name)
            if clash is not None:
                first = f"actor.rollout.tools[{clash.holder}]"
                hint = "; a tool set's options may rename its tools (MCPTools: 'prefix')"
                raise ToolConfigError(
                    f"{where}: {clash.kind} '{clash.value}' is already used by {first}"
                    + (hint if is_tool_set(cls) else "")
                )
            tags.append(tool.tag)
            names.append(tool.name)
    return ToolIdentity(tuple(tags), tuple(names), FORMAT_TRAITS[tool_format])
