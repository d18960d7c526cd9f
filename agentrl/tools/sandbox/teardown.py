"""Ending a sandbox without orphaning a process: what runs under its launcher first, the launcher after.

A sandbox is a launcher (``bwrap``, ``unshare``, or, at ``audit`` and ``none``, the interpreter's
script itself) above the sandbox's reaper (``repl.become_reaped_child``: PID 1 of the sandbox's
PID namespace, or a child subreaper), whose child is the interpreter. Killed first, the launcher
would orphan that reaper to whatever reaps the trainer's orphans: the trainer itself when it is a
container's PID 1, or an init that never reaps, which keeps the zombie for good, counted against
its uid's ``RLIMIT_NPROC``. So ``end_sandbox`` kills the interpreter and what else the reaper has
as children, the reaper exits (with it the namespace; as subreaper it first kills and reaps what
it was left), the launcher reaps it and exits on its own, reporting the interpreter's end, and
only a launcher that does not is killed with its process group. Each launcher reaps its child
before it exits (bubblewrap too, with ``--as-pid-1``), so nothing ever reaches the host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def children(pid: int) -> list[int]:
    """``pid``'s children now (``/proc/<pid>/task/*/children``)."""
    found: list[int] = []
    with contextlib.suppress(OSError):  # it ended meanwhile
        for task in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(OSError),
                open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f,
            ):
                found += [int(child) for child in f.read().split()]
    return found


def end_sandbox(launcher: subprocess.Popen, depth: int, grace_s: float = 5.0) -> int | None:
    """Kill the sandbox under ``launcher``, whose interpreter is ``depth`` generations below it (1:
    the launcher is the reaper; 2: the reaper is its child), then reap the launcher (module
    docstring); its exit status, None if even its process group's kill left it unreaped within
    10 s (it is the kernel's then)."""
    generation = [launcher.pid]
    for _ in range(depth):
        generation = [child for pid in generation for child in children(pid)]
    for pid in generation:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if generation:  # none (a start cut short): nothing to orphan, the launcher goes at once
        with contextlib.suppress(subprocess.TimeoutExpired):
            return launcher.wait(timeout=grace_s)
    for pid in children(launcher.pid):  # a reaper with no interpreter yet
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(launcher.pid, signal.SIGKILL)
    try:
        return launcher.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None
