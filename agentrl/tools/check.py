"""The configured tools, checked on the driver before Ray starts: class path, options, tags.

Each tool of ``actor.rollout.tools`` is imported and built once here, as the rollout will
build it in the actor, so a typo costs a second instead of a worker's start-up. Every
error names the list element (``actor.rollout.tools[1]``) and, where one is close, what
was meant: a class name the module does have, an option the constructor does take. A tag
the protocol reserves (``think``, ``information``, ``answer``) and two tools sharing a tag
or a name are refused by the registry's own checks, with the element named.

A tool's constructor runs here on the driver: it should open connections lazily (as
``SearchTool`` does), on its first call inside the worker. An element that is a tool set
(``registry.build_toolset``: an MCP server's tools, ``MCPTools``) is listed here, once: each
tool it lists is checked like any other (a clash names the element that has the name first),
and a set that cannot be listed (a server that does not start) stops the run by its element.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Sequence
from typing import Any, NamedTuple

from agentrl.config.schema import ToolConfig
from agentrl.importing import import_object
from agentrl.tools.base import ToolError
from agentrl.tools.registry import build_toolset, is_tool_set
from agentrl.tools.typed import as_typed

__all__ = ["ToolConfigError", "ToolNames", "check_tools"]

WORKERS_HINT = (
    "the module must be importable where the trainer is launched: from the launch directory, "
    "from a directory on PYTHONPATH, or installed (docs/adding_a_tool.md, 'Ray workers')"
)


class ToolConfigError(ValueError):
    """A configured tool cannot be built; the message names the element and the problem."""


class ToolNames(NamedTuple):
    """The configured tools' tags and names, in config order (``tags[i]`` and ``names[i]`` are one tool's).

    ``tags`` are the grammar of the ``tags`` format (``RunContext.tool_tags``); ``names`` key every
    per-tool count (``RunContext.tool_names``), as the rollout counts calls by name. A tag tool's
    name is its tag; a schema tool's tag may differ from its name. In the order of
    ``RunContext.from_config``'s ``tool_tags, tool_names``."""

    tags: tuple[str, ...]
    names: tuple[str, ...]


def _did_you_mean(name: str, choices: Sequence[str]) -> str:
    match = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


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
        raise ToolConfigError(f"{where}: {exc}{_did_you_mean(attr, public)}") from None
    except ValueError as exc:
        raise ToolConfigError(f"{where}: {exc}") from None


def _check_option_names(cls: Any, options: dict[str, Any], where: str) -> None:
    """Every option is a keyword the constructor takes; a typo gets the closest one."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): the build decides
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = sorted(n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    unknown = [name for name in options if name not in accepted]
    if unknown:
        named = ", ".join(f"'{name}'{_did_you_mean(name, accepted)}" for name in unknown)
        raise ToolConfigError(f"{where}: {cls.__name__} takes no option {named}; its options are {accepted}")


def check_tools(configs: Sequence[ToolConfig]) -> ToolNames:
    """Build every configured tool once, as the rollout does; return their tags and names in order.

    Raises ``ToolConfigError`` naming ``actor.rollout.tools[i]`` for a class path that does
    not import, an unknown option, a constructor that refuses its options, a reserved tag,
    or a tag or name another tool already uses.
    """
    tags: list[str] = []
    names: list[str] = []
    owner: dict[tuple[str, str], int] = {}  # (kind, tag or name) -> the element that has it first
    for i, config in enumerate(configs):
        where = f"actor.rollout.tools[{i}] ({config.class_path})"
        cls = _tool_class(config.class_path, where)
        _check_option_names(cls, dict(config.options or {}), where)
        try:
            built = [as_typed(tool, "tool") for tool in build_toolset(config)]
        except (ImportError, TypeError, ValueError, ToolError) as exc:
            raise ToolConfigError(f"{where}: {exc}") from None
        for tool in built:
            for kind, key in (("tag", tool.tag), ("name", tool.name)):
                if (kind, key) in owner:
                    hint = "; a tool set's options may rename its tools (MCPTools: 'prefix')"
                    raise ToolConfigError(
                        f"{where}: {kind} '{key}' is already used by actor.rollout.tools[{owner[kind, key]}]"
                        + (hint if is_tool_set(cls) else "")
                    )
                owner[kind, key] = i
            tags.append(tool.tag)
            names.append(tool.name)
    return ToolNames(tuple(tags), tuple(names))
