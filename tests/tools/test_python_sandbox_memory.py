"""A session's memory is bounded as a whole where a memory cgroup can be made: the processes it starts
together, and the files of its tmpfs working directory, not only each process's address space."""

from __future__ import annotations

import os

import pytest

from agentrl.tools.sandbox.cgroup import MemoryCgroups, find_memory_cgroups
from tests.tools.test_python_sandbox import (
    LEVELS,
    NAMESPACE_LEVELS,
    assert_nothing_left,
    descendants,
    make,
    run_session,
)
from tests.tools.test_python_sandbox import work_root as work_root  # the fixture, under its own name

CGROUPS = find_memory_cgroups()
needs_cgroup = pytest.mark.skipif(
    not isinstance(CGROUPS, MemoryCgroups), reason=f"no memory cgroup can be made here: {CGROUPS}"
)
# Each process may map 512 MB (RLIMIT_AS); together the session may hold 200.
LIMITS = {"memory_mb": 512, "session_memory_mb": 200, "processes": 12}
# four processes of 90 MB each: each within its own limit, twice the session's together
FOUR_PROCESSES = """
import subprocess, sys, time
hold = "x = bytearray(90 << 20); import time; time.sleep(60)"
procs = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(4)]
time.sleep(2.5)
print(sorted(str(p.poll()) for p in procs))
"""
# audit refuses subprocesses: the interpreter itself holds 300 MB, within its address-space limit
IN_THE_INTERPRETER = "x = bytearray(150 << 20)\ny = bytearray(150 << 20)\nprint('held')"


def session_cgroups() -> list[str]:
    return [e for e in os.listdir(CGROUPS.parent) if e.startswith(f"agentrl-python-{os.getpid()}-")]


@needs_cgroup
@pytest.mark.parametrize("level", LEVELS)
def test_processes_that_each_fit_their_limit_cannot_hold_more_than_the_session_together(level, work_root):
    before = descendants()
    tool = make(level, work_root, **LIMITS)
    (out,) = run_session(tool, IN_THE_INTERPRETER if level == "audit" else FOUR_PROCESSES)
    if level == "audit":
        assert out.startswith("Error: the interpreter was killed by the kernel at the session's memory limit")
        assert "200 MB" in out
    else:  # the kernel killed some of them; without the cgroup all four hold their 90 MB
        statuses = eval(out)  # noqa: S307  (the list the code printed)
        assert "-9" in statuses, out
    assert_nothing_left(before)
    assert session_cgroups() == [], "the session's cgroup is removed with it"


@needs_cgroup
@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
def test_files_in_the_tmpfs_working_directory_count_against_the_session(level, work_root):
    tool = make(level, work_root, workdir_mb=400, file_size_mb=400, **LIMITS)
    code = (
        "try:\n    with open('big', 'wb') as f:\n        for _ in range(30):\n"
        "            f.write(b'x' * (10 << 20))\n    print('written')\n"
        "except OSError as e:\n    print(type(e).__name__, e.errno)"
    )
    (out,) = run_session(tool, code)
    assert out != "written", "300 MB of files were held against a session limit of 200"


@needs_cgroup
def test_the_start_up_line_states_the_session_limit_and_off_has_none(work_root):
    level = LEVELS[0]
    assert f"200 MB a session (cgroup v{CGROUPS.version})" in make(level, work_root, **LIMITS).describe()
    off = make(level, work_root, memory_cgroup="off", **LIMITS)
    assert off.cgroups is None and "no memory cgroup (memory_cgroup=off)" in off.describe()
    (out,) = run_session(off, IN_THE_INTERPRETER)
    assert out == "held"  # what the cgroup stops: 300 MB within the process's own 512


def test_a_bad_memory_option_is_refused_by_name(work_root):
    refused = "memory_cgroup must be one of .* got 'requires'.*did you mean 'require'"
    with pytest.raises(ValueError, match=refused):
        make("audit", work_root, memory_cgroup="requires")
    with pytest.raises(ValueError, match="session_memory_mb must be >= 32, got 8"):
        make("audit", work_root, session_memory_mb=8)
