"""The memory cgroup of each session, where the host lets the trainer make one (cgroup v2, or v1).

``RLIMIT_AS`` bounds one process's address space; what a session holds in all its processes
together, in its tmpfs working directory and in whatever else the kernel charges to it is bounded
only by a memory cgroup. ``find_memory_cgroups`` looks once per process for a place where the
trainer may make cgroups with the memory controller:

* v2: the trainer's own cgroup (the ``0::`` line of ``/proc/self/cgroup``, under the ``cgroup2``
  mount) when its ``cgroup.subtree_control`` has ``memory`` (a delegated subtree: a cgroup that
  holds processes cannot enable it for its children itself); a session's limit is its
  ``memory.max``, with ``memory.swap.max`` 0;
* v1: the ``memory`` hierarchy's mount and the trainer's cgroup in it; a session's limit is its
  ``memory.limit_in_bytes``, and ``memory.memsw.limit_in_bytes`` where swap is accounted.

Where neither can be written (an ordinary user without a delegated cgroup, a container whose
cgroups are read-only) it says why, and sessions have none: memfd and SysV shared memory stay
refused by the system-call filter, so the per-process limits hold but for the working directory's
tmpfs (``workdir_mb``). A session's interpreter script joins its cgroup first thing
(``repl.join_cgroup``), before its reaper forks, so every process of the sandbox is in it; the
cgroup is removed when the session ends, and those a crashed trainer left are removed by the next
one to look.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
from dataclasses import dataclass

PREFIX = "agentrl-python-"
_names = itertools.count()  # a session cgroup's number in this process
_found: dict[int, MemoryCgroups | str] = {}


@dataclass(frozen=True)
class SessionCgroup:
    """One session's cgroup: its directory, its version and its limit in bytes."""

    path: str
    version: int
    limit_bytes: int

    @property
    def procs(self) -> str:
        """The file a process writes its pid to, to join."""
        return os.path.join(self.path, "cgroup.procs")

    def oom_kills(self) -> int:
        """How many of the session's processes the kernel killed for the limit."""
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError), open(os.path.join(self.path, events)) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def remove(self, wait_s: float = 2.0) -> bool:
        """Remove the cgroup once its last process has left it (they were killed); whether it went."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:  # EBUSY: a killed process still leaving
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.005)


@dataclass(frozen=True)
class MemoryCgroups:
    """Where this trainer makes its sessions' cgroups: ``parent`` (its own cgroup) of ``version``."""

    parent: str
    version: int

    def make(self, limit_bytes: int) -> SessionCgroup:
        """A new cgroup with ``limit_bytes`` of memory (swap included) for one session."""
        path = os.path.join(self.parent, f"{PREFIX}{os.getpid()}-{next(_names)}")
        os.mkdir(path)
        cgroup = SessionCgroup(path, self.version, limit_bytes)
        try:
            if self.version == 2:
                _write(path, "memory.max", limit_bytes)
                _write(path, "memory.swap.max", 0, missing_ok=True)  # no swap accounting: no swap file
            else:
                _write(path, "memory.limit_in_bytes", limit_bytes)
                _write(path, "memory.memsw.limit_in_bytes", limit_bytes, missing_ok=True)
        except OSError:
            cgroup.remove(wait_s=0)
            raise
        return cgroup


def _write(directory: str, name: str, value: int, missing_ok: bool = False) -> None:
    try:
        with open(os.path.join(directory, name), "w", encoding="ascii") as f:
            f.write(str(value))
    except FileNotFoundError:
        if not missing_ok:
            raise


def _mounts() -> list[tuple[str, str, list[str]]]:
    """(mount point, filesystem type, super options) of every mount this process sees."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _source, options = (right.split() + ["", "", ""])[:3]
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), left.split()[4])  # "\040": a space
            found.append((point, fstype, options.split(",")))
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per hierarchy: ``""`` for v2, the controllers' names for v1."""
    own = {}
    with open("/proc/self/cgroup", encoding="ascii") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            own[controllers] = path
    return own


def _candidate() -> MemoryCgroups | str:
    """Where sessions' cgroups can go, or why nowhere."""
    try:
        mounts, own = _mounts(), _own_cgroups()
    except OSError as exc:
        return f"cannot read this process's cgroups: {exc}"
    reasons = []
    v2 = next((point for point, fstype, _ in mounts if fstype == "cgroup2"), None)
    if v2 is not None and "" in own:
        parent = os.path.join(v2, own[""].lstrip("/"))
        try:
            with open(os.path.join(parent, "cgroup.subtree_control"), encoding="ascii") as f:
                delegated = "memory" in f.read().split()
        except OSError:
            delegated = False
        if delegated and os.access(parent, os.W_OK):
            return MemoryCgroups(parent, 2)
        reasons.append(f"cgroup v2: {parent} does not give its children the memory controller to write")
    v1 = next((point for point, fstype, opts in mounts if fstype == "cgroup" and "memory" in opts), None)
    controllers = next((c for c in own if "memory" in c.split(",")), None)
    if v1 is not None and controllers is not None:
        parent = os.path.join(v1, own[controllers].lstrip("/"))
        if os.access(parent, os.W_OK):
            return MemoryCgroups(parent, 1)
        reasons.append(f"cgroup v1: {parent} is not writable by uid {os.geteuid()}")
    return "; ".join(reasons) or "no memory cgroup hierarchy is mounted"


def _remove_stale(cgroups: MemoryCgroups) -> None:
    """The session cgroups of trainers that are gone (a crash), emptied by the kernel with them."""
    with contextlib.suppress(OSError):
        for entry in os.listdir(cgroups.parent):
            pid = entry[len(PREFIX) :].split("-", 1)[0]
            if entry.startswith(PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(cgroups.parent, entry))


def find_memory_cgroups() -> MemoryCgroups | str:
    """Where this process makes its sessions' memory cgroups, or the reason it cannot (once per
    process and uid; a test of writing one is part of the look)."""
    key = os.geteuid()
    if key not in _found:
        found = _candidate()
        if isinstance(found, MemoryCgroups):
            _remove_stale(found)
            try:
                found.make(64 << 20).remove(wait_s=0)
            except OSError as exc:
                found = f"cgroup v{found.version}: cannot make a cgroup under {found.parent}: {exc}"
        _found[key] = found
    return _found[key]
