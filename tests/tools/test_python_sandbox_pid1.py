"""A trainer that is PID 1 (a container without an init) is left no zombie by the sandbox, at every level."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from agentrl.tools.sandbox.tool import DEFAULT_UID_BASE
from tests.tools.test_python_sandbox import LEVELS, REPO, python_for

# Runs as PID 1 of a fresh PID namespace: eight sessions at each level given, then every zombie
# left in the namespace (pid, parent, uid), by level.
AS_PID_ONE = textwrap.dedent(
    """
    import asyncio, json, os, sys, tempfile
    from agentrl.tools.sandbox.tool import PythonSandboxTool

    def zombies():
        found = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{entry}/stat").read()
                fields = stat[stat.rindex(")") + 2 :].split()
                if fields[0] == "Z":
                    found.append([int(entry), int(fields[1]), os.stat(f"/proc/{entry}").st_uid])
            except OSError:
                pass
        return found

    assert os.getpid() == 1
    report = {}
    levels, UID_BASE = json.loads(sys.argv[1]), int(sys.argv[2])
    for level, python in levels.items():
        tool = PythonSandboxTool(
            isolation=level,
            python=python,
            work_root=tempfile.mkdtemp(),
            max_interpreters=4,
            processes=4,
            uid_base=UID_BASE,
        )

        async def sessions():
            for _ in range(8):
                session = await tool.open_session()
                assert "ok" in (await session.call({"code": "print('ok')"})).text
                await session.close()

        asyncio.run(sessions())
        report[level] = zombies()
    print(json.dumps(report))
    """
)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="a PID namespace needs root")
def test_a_trainer_that_is_pid_one_is_left_no_zombie_by_eight_sessions_at_every_level():
    pythons = {level: python_for(level) for level in LEVELS}
    # uids of its own: where the machine's PID 1 does not reap either (a container's), zombies that
    # other tests' sessions left count against RLIMIT_NPROC of the uids they ran as
    uid_base = str(DEFAULT_UID_BASE + 2048)
    command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", AS_PID_ONE]
    command += [json.dumps(pythons), uid_base]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {level: [] for level in LEVELS}
