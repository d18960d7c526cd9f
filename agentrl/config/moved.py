"""Class paths that moved: a config saved before a move still loads, with a warning naming the new path.

Tools are configured by import path (``actor.rollout.tools[i].class_path``), so a saved run's
``config.yaml`` and users' own configs name modules by where they were when they were written.
When a module moves, its old path is listed here: ``current_class_path`` gives the path it has
now and warns (``FutureWarning``, shown by default) with the key and both paths, the way a
renamed config key is named with its new place (``loader.RENAMED``). The loader applies it to
every configured tool, and the tool registry to a ``ToolConfig`` built in code.
"""

from __future__ import annotations

import warnings

__all__ = ["MOVED_MODULES", "current_class_path"]

# Old module -> the module its classes are imported from now. The tool modules map to their
# family's package, which exports its tools (``agentrl.tools.retrieval.SearchTool``).
MOVED_MODULES = {
    "agentrl.agent.tools": "agentrl.tools",
    "agentrl.agent.tools.base": "agentrl.tools.base",
    "agentrl.agent.tools.spec": "agentrl.tools.spec",
    "agentrl.agent.tools.typed": "agentrl.tools.typed",
    "agentrl.agent.tools.sessions": "agentrl.tools.sessions",
    "agentrl.agent.tools.registry": "agentrl.tools.registry",
    "agentrl.agent.tools.calculator": "agentrl.tools.calculator",
    "agentrl.agent.tools.search": "agentrl.tools.retrieval",
    "agentrl.agent.tools.page_reader": "agentrl.tools.retrieval",
    "agentrl.agent.tools.search_client": "agentrl.tools.retrieval.client",
    "agentrl.agent.tools.retriever_tool": "agentrl.tools.retrieval.connection",
    "agentrl.agent.tools.web_search": "agentrl.tools.web",
    "agentrl.agent.tools.web_client": "agentrl.tools.web.client",
    "agentrl.agent.tools.web_cache": "agentrl.tools.web.cache",
    "agentrl.agent.tools.mcp_tools": "agentrl.tools.mcp",
    "agentrl.agent.tools.mcp_client": "agentrl.tools.mcp.client",
    "agentrl.agent.tools.python_sandbox": "agentrl.tools.sandbox",
    "agentrl.agent.tools.sandbox": "agentrl.tools.sandbox.isolation",
    "agentrl.agent.tools.sandbox_process": "agentrl.tools.sandbox.process",
    "agentrl.agent.tools.sandbox_pool": "agentrl.tools.sandbox.pool",
}


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
    warnings.warn(
        f"{key} {path!r} names a module that moved: it is now {new!r} (the old path still loads; "
        "update the config to stop this warning)",
        FutureWarning,
        stacklevel=2,
    )
    return new
