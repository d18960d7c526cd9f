"""No zombie is left by the sandbox, whatever the trainer's PID: a trainer that is PID 1 (a container
without an init), and one whose PID 1 never reaps (an init that only waits for its own child), root's
or an ordinary user's, at every level, ``none`` included, with processes that leave the interpreter's
session."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrl.tools.sandbox.tool import DEFAULT_UID_BASE
from tests.tools.test_python_sandbox import LEVELS, REPO, python_for
from tests.tools.test_python_sandbox_user import python_for_user

# Runs as PID 1 of a fresh PID namespace. "pid1": it is the trainer; "under": it starts the trainer
# as its child and waits for that child alone, as an init that reaps nothing else (the child, given
# a user, runs this file again as that user, in mode "train"). The trainer runs eight sessions at
# each level given, each starting a process of a session of its own where the level allows
# subprocesses; then every zombie left in the namespace (pid, parent, uid), by level, is printed as
# JSON.
IN_A_PID_NAMESPACE = textwrap.dedent(
    """
    import asyncio, json, os, sys, tempfile, time
    from agentrl.tools.sandbox.tool import PythonSandboxTool

    ORPHAN = "import subprocess; subprocess.Popen(['sleep', '60'], start_new_session=True); print('ok')"

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
            code = "print('ok')" if level == "audit" else ORPHAN

            async def sessions():
                for _ in range(8):
                    session = await tool.open_session()
                    assert "ok" in (await session.call({"code": code})).text
                    await session.close()

            asyncio.run(sessions())
            report(level)

    mode, levels, uid_base = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    user = json.loads(sys.argv[4])  # null (root), or [uid, the Python it runs, its environment]
    def told(into, back):  # a trainer's report: the level is over; it waits while PID 1 looks
        def report(level):
            os.write(into, (level + "\\n").encode())
            os.read(back, 1)  # the trainer starts nothing while its zombies are counted
        return report

    if mode == "train":
        train(levels, uid_base, told(int(sys.argv[5]), int(sys.argv[6])))
        sys.exit(0)
    assert os.getpid() == 1
    report = {}
    if mode == "pid1":
        train(levels, uid_base, lambda level: report.update({level: zombies()}))
    else:
        out, into = os.pipe()
        back, ack = os.pipe()
        trainer = os.fork()
        if trainer == 0:
            os.close(out)
            os.close(ack)
            if user is None:
                train(levels, uid_base, told(into, back))
                os._exit(0)
            uid, python, env = user
            home = tempfile.mkdtemp()
            os.chown(home, uid, uid)
            os.set_inheritable(into, True)
            os.set_inheritable(back, True)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            argv = [python, __file__, "train", sys.argv[2], sys.argv[3], "null", str(into), str(back)]
            os.execve(python, argv, {**env, "HOME": home, "PATH": os.environ["PATH"]})
        os.close(into)
        os.close(back)
        with os.fdopen(out) as finished:
            for line in finished:  # a level's sessions are over: its zombies, if any, are ours now
                time.sleep(0.2)  # a killed process takes a moment to become a zombie
                report[line.strip()] = [z for z in zombies() if z[0] != trainer]
                os.write(ack, b"-")
        _, status = os.waitpid(trainer, 0)  # the trainer alone: an init that reaps nothing else
        assert status == 0, status
    print(json.dumps(report))
    """
)
USER_UID = 2_098_000_000 + os.getpid() % 100_000  # an ordinary user's trainer, below the sandbox's uids


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory any user may read (pytest's own are root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="agentrl-pid1-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="a PID namespace needs root")
@pytest.mark.parametrize(
    "mode, as_user",
    [("pid1", False), ("under", False), ("under", True)],
    ids=["the-trainer-is-pid-1", "pid-1-never-reaps", "pid-1-never-reaps-a-users-trainer"],
)
def test_eight_sessions_at_every_level_leave_no_zombie_whatever_the_trainers_pid(mode, as_user, shared_tmp):
    levels = [*LEVELS, "none"]
    user = None
    if as_user:  # the system's Python for the sessions: the user may read no other here
        python, env = python_for_user(USER_UID)
        user = [USER_UID, python, env]
        pythons = dict.fromkeys(levels, "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else python)
    else:
        pythons = {level: python_for(level) for level in levels}
    script = shared_tmp / "in_a_pid_namespace.py"  # a file: the user's trainer runs it again
    script.write_text(IN_A_PID_NAMESPACE)
    # uids of their own: where the machine's PID 1 does not reap either (a container's), zombies that
    # other tests' sessions may have left count against RLIMIT_NPROC of the uids they ran as
    uid_base = str(DEFAULT_UID_BASE + (2048 if mode == "pid1" else 2560))
    command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script)]
    command += [mode, json.dumps(pythons), uid_base, json.dumps(user)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {level: [] for level in pythons}
