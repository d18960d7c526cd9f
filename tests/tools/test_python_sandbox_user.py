"""The sandbox's break-outs tried by a trainer that is an ordinary user, at every level that user has.

Run as root, the test makes the user: a uid of its own with a home of its own (a ``.netrc`` of mode
0600 in it, as a Hugging Face token or a password file would be), and runs
``support/sandbox_as_user.py`` as that uid (no groups), with a Python it may read. Elsewhere it
skips, saying why. Each class of the sandbox issue: the trainer's own files and the project tree,
a unix socket under ``/run``, the kernel keyring, memory outside the process limits (memfd; no
cgroup for a user without a delegated one, and ``memory_cgroup: require`` refused saying so),
forged replies. Zombies under a trainer of any PID are ``test_python_sandbox_pid1.py``'s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from agentrl.tools.sandbox.isolation import interpreter_paths, unreadable_tops
from tests.tools.test_python_sandbox import AS_ROOT, REPO
from tests.tools.test_python_sandbox_view import run_socket as run_socket  # the fixture, under its own name

SCRIPT = REPO / "tests" / "support" / "sandbox_as_user.py"
USER_UID = 2_099_000_000 + os.getpid() % 100_000  # below the sandbox's own uids (2,100,000,000 on)

pytestmark = pytest.mark.skipif(not AS_ROOT, reason="making an ordinary user needs root")


def python_for_user(uid: int) -> tuple[str, dict[str, str]]:
    """An interpreter ``uid`` may run with this checkout and its packages: this one, or the system's
    of the same version with this environment's packages on its path; skips where there is none."""
    if not unreadable_tops(interpreter_paths(sys.executable), uid):
        return sys.executable, {"PYTHONPATH": str(REPO)}
    packages = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", f"/usr/bin/python{version}"):
        if not os.path.exists(candidate) or unreadable_tops([candidate, str(REPO), *packages], uid):
            continue
        asked = [candidate, "-c", "import sys; print(sys.version_info[:2])"]
        said = subprocess.run(asked, capture_output=True)
        if said.stdout.decode().strip() == str(sys.version_info[:2]):
            return candidate, {"PYTHONPATH": os.pathsep.join([str(REPO), *packages])}
    pytest.skip(f"no Python {version} here that uid {uid} may read, with this checkout's packages")


@pytest.fixture(scope="module")
def user():
    """The ordinary user: its uid, its home (0700, a 0600 ``.netrc``), the Python it runs."""
    home = Path(f"/home/agentrl-user-{USER_UID}")
    home.mkdir(mode=0o700)
    try:
        netrc = home / ".netrc"
        netrc.write_text("machine example.com login me password secret\n")
        netrc.chmod(0o600)
        for path in (home, netrc):
            os.chown(path, USER_UID, USER_UID)
        python, env = python_for_user(USER_UID)
        yield USER_UID, home, python, env
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_an_ordinary_users_trainer_keeps_every_class_of_break_out_in_at_every_level_it_has(user, run_socket):
    uid, home, python, env = user
    path, listener = run_socket
    levels = ["bwrap", "unshare", "audit"]
    settings = {"socket": path, "project_file": str(REPO / "pyproject.toml"), "levels": levels}
    done = subprocess.run(
        [python, str(SCRIPT), json.dumps(settings)],
        user=uid,
        group=uid,
        extra_groups=[],
        env={"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "HF_HUB_OFFLINE": "1", **env},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    levels = [level for level, seen in report.items() if "unavailable" not in seen]
    assert "audit" in levels and ("unshare" in levels or shutil.which("unshare") is None), report
    for level in levels:
        seen = report[level]
        assert seen["uid"] in (str(uid), "0"), (level, seen["uid"])  # "0": root of its own user namespace
        assert all(out in ("FileNotFoundError", "PermissionError") for out in seen["files"]), (level, seen)
        assert seen["socket"] in ("FileNotFoundError", "PermissionError"), (level, seen["socket"])
        if level == "audit":  # the guard refuses ctypes before the filter is reached
            assert all("the sandbox refuses ctypes" in out for out in seen["keyring"]), seen["keyring"]
        else:
            assert seen["keyring"] == ["Operation not permitted"] * 2, (level, seen["keyring"])
        assert seen["memfd"] == "1", (level, seen["memfd"])  # EPERM
        first, second = seen["forged"]
        assert "output_bytes is not a count" in first, (level, first)
        assert "A new Python interpreter was started" in second and second.endswith("second"), (level, second)
        if seen["memory"].startswith("no memory cgroup ("):  # no cgroup a user may write: said twice
            reason = seen["memory"][len("no memory cgroup (") : -1]
            assert f"memory_cgroup='require', but no cgroup here: {reason}" in seen["require"], seen
        else:
            assert seen["require"] == "started", seen
    with pytest.raises(BlockingIOError):  # nothing reached the listener
        listener.accept()
