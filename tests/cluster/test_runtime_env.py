"""A worker imports user code (a tool's class_path) from where the driver imports it, without Ray."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.cluster.runtime_env import WORKER_ENV, driver_import_roots, worker_runtime_env


@pytest.fixture
def driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A driver launched from ``launch/`` running a script in ``project/`` with ``extra/`` on PYTHONPATH."""
    dirs = {name: tmp_path / name for name in ("launch", "project", "extra", "elsewhere")}
    for path in dirs.values():
        path.mkdir()
    (dirs["project"] / "my_lookup.py").write_text("class LookupTool:\n    tag = 'lookup'\n")
    (dirs["extra"] / "my_scorer.py").write_text("def score(inp):\n    return 1.0\n")
    monkeypatch.chdir(dirs["launch"])
    monkeypatch.setattr(sys, "path", [str(dirs["project"]), *sys.path])  # as `python project/train.py`
    monkeypatch.setenv("PYTHONPATH", str(dirs["extra"]))
    monkeypatch.delenv("AGENTRL_TORCH_THREADS", raising=False)
    return dirs


def test_the_workers_path_starts_where_the_driver_imports_user_code(driver):
    env = worker_runtime_env()["env_vars"]
    path = env["PYTHONPATH"].split(os.pathsep)
    assert path[:2] == [str(driver["launch"].resolve()), str(driver["project"].resolve())]
    assert str(driver["extra"]) in path  # the driver's own PYTHONPATH is kept
    assert not any("site-packages" in p for p in path)  # the installation is the worker's own
    assert all(os.path.isdir(p) for p in driver_import_roots())
    assert {k: env[k] for k in WORKER_ENV} == WORKER_ENV and "AGENTRL_TORCH_THREADS" not in env
    assert worker_runtime_env(3)["env_vars"]["AGENTRL_TORCH_THREADS"] == "3"


def test_a_fresh_interpreter_with_the_workers_environment_imports_the_drivers_tool_module(driver):
    env = {"PATH": os.environ.get("PATH", ""), **worker_runtime_env()["env_vars"]}
    probe = "import my_lookup, my_scorer; print(my_lookup.LookupTool.tag)"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=driver["elsewhere"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "lookup"
    without = {**env, "PYTHONPATH": ""}  # what a worker had without the driver's roots
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=driver["elsewhere"], env=without, capture_output=True, text=True
    )
    assert done.returncode != 0 and "my_lookup" in done.stderr
