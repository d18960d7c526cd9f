"""No zombie is left by the sandbox, whatever the trainer's PID: a trainer that is PID 1 (a container
without an init), and one whose PID 1 never reaps (an init that only waits for its own child), at
every level, ``none`` included, with processes that leave the interpreter's session."""

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

# Runs as PID 1 of a fresh PID namespace. "pid1": it is the trainer; "under": it starts the trainer
# as its child and waits for that child alone, as an init that reaps nothing else. The trainer runs
# eight sessions at each level given, each starting a process of a session of its own where the level
# allows subprocesses; then every zombie left in the namespace (pid, parent, uid), by level, is
# printed as JSON.
IN_A_PID_NAMESPACE = textwrap.dedent(
    """
    import asyncio, json, os, sys, tempfile, time
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

    def train(levels, uid_base, report):
        for level, python in levels.items():
            tool = PythonSandboxTool(
                isolation=level,
                python=python,
                work_root=tempfile.mkdtemp(),
                max_interpreters=4,
                processes=4,
                uid_base=uid_base,
                allow_unisolated=level == "none",
            )
            # where subprocesses are allowed, one that leaves the interpreter's session and group
            code = "print('ok')" if level == "audit" else ORPHAN

            async def sessions():
                for _ in range(8):
                    session = await tool.open_session()
                    assert "ok" in (await session.call({"code": code})).text
                    await session.close()

            asyncio.run(sessions())
            report(level)

    ORPHAN = "import subprocess; subprocess.Popen(['sleep', '60'], start_new_session=True); print('ok')"
    assert os.getpid() == 1
    mode, levels, uid_base = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    report = {}
    if mode == "pid1":
        train(levels, uid_base, lambda level: report.update({level: zombies()}))
    else:
        out, into = os.pipe()
        trainer = os.fork()
        if trainer == 0:
            os.close(out)
            done = lambda level: os.write(into, (level + "\\n").encode())  # a level's sessions ended
            train(levels, uid_base, done)
            os._exit(0)
        os.close(into)
        with os.fdopen(out) as finished:
            for line in finished:  # a level's sessions are over: its zombies, if any, are ours now
                time.sleep(0.2)  # a killed process takes a moment to become a zombie
                report[line.strip()] = [z for z in zombies() if z[0] != trainer]
        _, status = os.waitpid(trainer, 0)  # the trainer alone: an init that reaps nothing else
        assert status == 0, status
    print(json.dumps(report))
    """
)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="a PID namespace needs root")
@pytest.mark.parametrize("mode", ["pid1", "under"], ids=["the-trainer-is-pid-1", "pid-1-never-reaps"])
def test_eight_sessions_at_every_level_leave_no_zombie_whatever_the_trainers_pid(mode):
    pythons = {level: python_for(level) for level in [*LEVELS, "none"]}
    # uids of their own: where the machine's PID 1 does not reap either (a container's), zombies that
    # other tests' sessions may have left count against RLIMIT_NPROC of the uids they ran as
    uid_base = str(DEFAULT_UID_BASE + (2048 if mode == "pid1" else 2560))
    command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", IN_A_PID_NAMESPACE]
    command += [mode, json.dumps(pythons), uid_base]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {level: [] for level in pythons}
