"""Modules that moved: old class paths in configs and old imports in users' code still work, with a warning.

Tools are configured by import path (``actor.rollout.tools[i].class_path``), so a saved run's
``config.yaml`` and users' own configs name modules by where they were when they were written,
and users' tool modules import the tool contract from where the docs of their day showed it.
When a module moves, its old path is listed here. ``current_class_path`` gives a class path as it
reads now and warns (``FutureWarning``, shown by default) with the key and both paths, the way a
renamed config key is named with its new place (``loader.RENAMED``); the loader applies it to
every configured tool, the tool registry and the driver's tool check to a ``ToolConfig`` built in
code. ``install_module_aliases`` makes ``import`` of an old module give the new one, with the
same warning; the package that held the old modules installs it (``agentrl/agent/__init__.py``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["MOVED_MODULES", "current_class_path", "install_module_aliases"]

# Old module -> the module that holds its code now: the tools, which lived in agentrl.agent.tools.
MOVED_MODULES = {
    "agentrl.agent.tools": "agentrl.tools",
    "agentrl.agent.tools.base": "agentrl.tools.base",
    "agentrl.agent.tools.spec": "agentrl.tools.spec",
    "agentrl.agent.tools.typed": "agentrl.tools.typed",
    "agentrl.agent.tools.sessions": "agentrl.tools.sessions",
    "agentrl.agent.tools.registry": "agentrl.tools.registry",
    "agentrl.agent.tools.calculator": "agentrl.tools.calculator",
    "agentrl.agent.tools.search": "agentrl.tools.retrieval.search",
    "agentrl.agent.tools.page_reader": "agentrl.tools.retrieval.page_reader",
    "agentrl.agent.tools.search_client": "agentrl.tools.retrieval.client",
    "agentrl.agent.tools.retriever_tool": "agentrl.tools.retrieval.connection",
    "agentrl.agent.tools.web_search": "agentrl.tools.web.search",
    "agentrl.agent.tools.web_client": "agentrl.tools.web.client",
    "agentrl.agent.tools.web_cache": "agentrl.tools.web.cache",
    "agentrl.agent.tools.mcp_tools": "agentrl.tools.mcp.tools",
    "agentrl.agent.tools.mcp_client": "agentrl.tools.mcp.client",
    "agentrl.agent.tools.python_sandbox": "agentrl.tools.sandbox.tool",
    "agentrl.agent.tools.sandbox": "agentrl.tools.sandbox.isolation",
    "agentrl.agent.tools.sandbox_process": "agentrl.tools.sandbox.process",
    "agentrl.agent.tools.sandbox_pool": "agentrl.tools.sandbox.pool",
    "agentrl.agent.tools.sandbox_repl": "agentrl.tools.sandbox.repl",
}


def _moved(old: str, new: str, what: str) -> None:
    warnings.warn(
        f"{what} names a module that moved: it is now {new!r} (the old path still loads; "
        "update it to stop this warning)",
        FutureWarning,
        stacklevel=3,
    )


def current_class_path(path: str, key: str = "class_path") -> str:
    """``path`` as it reads now: the same string unless its module moved, then the new path (in
    the same form, ``pkg.module.Name`` or ``pkg.module:Name``) and a ``FutureWarning`` naming
    ``key`` (e.g. ``actor.rollout.tools[0].class_path``), the old path and the new one."""
    if not isinstance(path, str):
        return path  # the import's own check names a path that is not a string
    separator = ":" if ":" in path else "."
    module, _, attr = path.partition(":") if separator == ":" else path.rpartition(".")
    moved = MOVED_MODULES.get(module)
    if moved is None or not attr:
        return path
    new = f"{moved}{separator}{attr}"
    _moved(path, new, f"{key} {path!r}")
    return new


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import`` of a module of :data:`MOVED_MODULES` gives the module it moved to."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> ModuleType:
        new = MOVED_MODULES[spec.name]
        _moved(spec.name, new, f"import of {spec.name!r}")
        return importlib.import_module(new)  # the same module object: one copy of its state

    def exec_module(self, module: ModuleType) -> None:
        """Nothing: the module was imported where it lives now."""


def install_module_aliases() -> None:
    """Make the old modules of :data:`MOVED_MODULES` importable (once per process)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())
