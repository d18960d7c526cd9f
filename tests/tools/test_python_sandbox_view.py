"""What the sandboxed code sees of the host's filesystem: not users' homes, not ``/run``'s sockets, not
the project tree, unless the tool's ``readable_paths`` bring a path back, read-only."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest

from agentrl.tools.sandbox.options import SandboxOptions
from tests.tools.test_python_sandbox import AS_ROOT, LEVELS, NAMESPACE_LEVELS, REPO, make, run_session
from tests.tools.test_python_sandbox import work_root as work_root  # the fixture, under its own name


@pytest.fixture
def run_socket():
    """A unix socket listening under ``/run``, as a daemon's would (mode 0777: anyone may connect)."""
    if not AS_ROOT:
        pytest.skip("a socket under /run needs root to make")
    directory = Path(f"/run/agentrl-sandbox-test-{os.getpid()}")
    directory.mkdir(mode=0o755)
    path = directory / "daemon.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    os.chmod(path, 0o777)
    listener.listen(8)
    listener.setblocking(False)
    yield str(path), listener
    listener.close()
    shutil.rmtree(directory)


@pytest.mark.parametrize("level", LEVELS)
def test_a_unix_socket_under_run_cannot_be_connected_to(level, work_root, run_socket):
    path, listener = run_socket
    code = (
        "import socket\ntry:\n    s = socket.socket(socket.AF_UNIX)\n"
        f"    s.connect({path!r})\n    print('connected')\n"
        "except OSError as e:\n    print(type(e).__name__)"
    )
    (out,) = run_session(make(level, work_root), code)
    assert out in ("FileNotFoundError", "PermissionError")
    with pytest.raises(BlockingIOError):  # and nothing reached the listener
        listener.accept()


@pytest.fixture
def home_file():
    """A world-readable file in a user's home under ``/home`` (where tokens and keys live)."""
    if not AS_ROOT:
        pytest.skip("a directory under /home needs root to make")
    directory = Path(f"/home/agentrl-sandbox-test-{os.getpid()}")
    (directory / "data").mkdir(parents=True)
    directory.chmod(0o755)
    (directory / "data").chmod(0o755)
    token = directory / "token"
    token.write_text("secret")
    token.chmod(0o644)
    (directory / "data" / "table.csv").write_text("a,b\n1,2\n")
    (directory / "data" / "table.csv").chmod(0o644)
    yield directory
    shutil.rmtree(directory)


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
def test_users_homes_the_project_tree_and_the_trainers_directory_are_not_visible(level, work_root, home_file):
    seen = [str(home_file / "token"), str(REPO / "pyproject.toml"), os.path.join(os.getcwd(), "README.md")]
    code = f"import json, os\nprint(json.dumps([os.path.exists(p) for p in {seen!r}]))\nimport numpy"
    (out,) = run_session(make(level, work_root), code)
    assert json.loads(out) == [False, False, False]  # numpy, in the interpreter's tree, still imports
    assert os.path.exists(os.path.join(os.getcwd(), "README.md"))  # the trainer's directory has one


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
def test_readable_paths_are_brought_back_read_only(level, work_root, home_file):
    data = str(home_file / "data")
    code = (
        f"print(open({data!r} + '/table.csv').read().split()[1])\n"
        f"try:\n    open({data!r} + '/new', 'w')\nexcept OSError as e:\n    print(type(e).__name__)\n"
        f"print(os.path.exists({str(home_file / 'token')!r}))"
    )
    (out,) = run_session(make(level, work_root, readable_paths=[data]), "import os\n" + code)
    assert out.split() == ["1,2", "OSError", "False"] or out.split() == ["1,2", "PermissionError", "False"]


def test_readable_paths_must_be_absolute_and_exist():
    with pytest.raises(ValueError, match="'readable_paths' must be a list of absolute paths"):
        SandboxOptions(readable_paths=["data"])
    with pytest.raises(ValueError, match="readable_paths: '/nonexistent-agentrl' does not exist"):
        SandboxOptions(readable_paths=["/nonexistent-agentrl"])


# what a fresh /dev may hold: bubblewrap's --dev, or the unshare level's own (repl.own_dev)
MINIMAL_DEV = {"null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout", "stderr"}
MINIMAL_DEV |= {"shm", "pts", "ptmx", "core"}  # bubblewrap's own additions


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
def test_dev_holds_only_the_minimal_devices_and_they_work(level, work_root):
    code = (
        "import json, os\n"
        "with open('/dev/null', 'w') as f: f.write('x')\n"
        "print(json.dumps([sorted(os.listdir('/dev')), len(open('/dev/urandom', 'rb').read(8))]))"
    )
    (out,) = run_session(make(level, work_root), code)
    listed, random_bytes = json.loads(out)
    host = set(os.listdir("/dev"))
    assert set(listed) <= MINIMAL_DEV, f"devices of the host in the sandbox: {set(listed) - MINIMAL_DEV}"
    assert host - MINIMAL_DEV, "this host's /dev has nothing beyond the minimal set: the test shows nothing"
    assert {"null", "urandom", "stdout"} <= set(listed) and random_bytes == 8


def test_at_audit_the_guard_refuses_reading_what_the_namespace_levels_hide(work_root, home_file):
    # no mount namespace at audit: the files are there, and the hook refuses opening them (a hurdle)
    hidden = [str(home_file / "token"), str(REPO / "pyproject.toml"), os.path.join(os.getcwd(), "README.md")]
    code = (
        "import json\nseen = []\n"
        f"for path in {hidden!r} + [{str(home_file / 'data' / 'table.csv')!r}]:\n"
        "    try:\n        seen.append(open(path).read()[:3])\n"
        "    except PermissionError as e:\n        seen.append('refused' if 'hides' in str(e) else str(e))\n"
        "print(json.dumps(seen))"
    )
    tool = make("audit", work_root, readable_paths=[str(home_file / "data")])
    (out,) = run_session(tool, code)
    assert json.loads(out) == ["refused", "refused", "refused", "a,b"]
