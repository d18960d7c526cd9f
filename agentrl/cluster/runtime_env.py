"""The Ray runtime environment of every worker: where user code imports from, and the worker's variables."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _installed(path: Path) -> bool:
    """Whether ``path`` is inside the Python installation (the standard library, site-packages)."""
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return any(path == prefix or prefix in path.parents for prefix in prefixes)


def driver_import_roots() -> list[str]:
    """The directories the driver imports user code from, in its order: the launch directory,
    then every directory on its ``sys.path`` outside the Python installation (a script's own
    directory, the driver's ``PYTHONPATH``, an editable install's source)."""
    roots: list[str] = []
    for entry in [os.getcwd(), *sys.path]:
        if not entry or not os.path.isdir(entry):  # "" is the launch directory; hooks are no dirs
            continue
        path = Path(entry).resolve()
        if str(path) not in roots and not _installed(path):
            roots.append(str(path))
    return roots


def worker_runtime_env(torch_threads: int | None = None) -> dict[str, Any]:
    """The Ray runtime environment of every worker.

    ``PYTHONPATH`` starts with :func:`driver_import_roots`, then the driver's own
    ``PYTHONPATH``: user code a config names by import path (a tool's ``class_path``, a
    scorer) imports in a worker from where it imports in the driver, on a single node without
    any setup. Workers on other nodes see the same paths, so there the code must sit at the
    same place or be installed (docs/adding_a_tool.md, "Ray workers").
    """
    env = dict(WORKER_ENV)
    inherited = os.environ.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join([*driver_import_roots(), *filter(None, inherited.split(os.pathsep))])
    if torch_threads is not None:
        env["AGENTRL_TORCH_THREADS"] = str(torch_threads)
    elif "AGENTRL_TORCH_THREADS" in os.environ:
        env["AGENTRL_TORCH_THREADS"] = os.environ["AGENTRL_TORCH_THREADS"]
    return {"env_vars": env}
