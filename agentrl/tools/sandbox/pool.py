"""The bounded pool of interpreter slots: at most N interpreters alive, each with a uid of its own.

A session takes a slot before it starts an interpreter and gives it back when it closes, so
64 trajectories calling Python at once never mean 64 interpreters: the 17th waits (at most
``queue_timeout_s``) for one of 16 to close. Waiting is on a ``threading`` primitive, so the
pool serves sessions of any event loop (a session's blocking work runs on a thread).

When the host runs as root, each slot carries an unprivileged uid (and gid of the same
number, with no members) that no other live slot has, in this process or in any other on
this machine: a uid is claimed by ``flock`` on ``<lock_dir>/<uid>.lock`` (one directory for
the whole machine, ``/run/agentrl-python-uids`` by default), which the kernel releases when
its holder dies. So ``RLIMIT_NPROC`` counts one session's processes
only, one session cannot read another's 0700 working directory, and whatever a crashed
holder left running under a uid is killed before the uid is handed out again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import threading
import time
from dataclasses import dataclass

from agentrl.tools.sandbox.options import SandboxOptions


class PoolTimeout(TimeoutError):
    """No slot became free within the pool's wait."""


@dataclass
class Slot:
    """One live interpreter's place: its uid and gid (None when the host is not root)."""

    uid: int | None
    gid: int | None
    lock_fd: int | None = None


def processes_of(uid: int) -> list[int]:
    """Every live (not zombie) pid on this machine whose real uid is ``uid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:  # it ended meanwhile
            continue
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            pids.append(int(entry))
    return pids


def kill_user(uid: int, rounds: int = 20) -> int:
    """SIGKILL every process of ``uid`` (never 0) until none is left; how many were signalled."""
    if uid == 0:
        raise ValueError("refusing to kill the processes of uid 0")
    killed = 0
    for round_ in range(rounds):  # again: one may have forked between the listing and its kill
        time.sleep(0.002 * round_)  # a killed process takes a moment to leave /proc
        pids = processes_of(uid)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed += len(pids)
    return killed


class InterpreterPool:
    """``options.max_interpreters`` slots; as root, uids from ``[uid_base, uid_base + uid_count)``
    claimed in ``options.lock_dir``."""

    def __init__(self, options: SandboxOptions) -> None:
        size, uid_base, uid_count = options.max_interpreters, options.uid_base, options.uid_count
        self.size = size
        self.as_root = os.geteuid() == 0
        if self.as_root and (uid_base < 1000 or uid_count < size or uid_base + uid_count > 2**32 - 2):
            raise ValueError(
                f"python sandbox: uids [{uid_base}, {uid_base + uid_count}) must lie in [1000, 2**32 - 2) "
                f"and number at least max_interpreters={size}"
            )
        self.lock_dir, self.uid_base, self.uid_count = options.lock_dir, uid_base, uid_count
        self._free = threading.Semaphore(size)
        self._lock = threading.Lock()
        self._next = 0
        self.in_use = 0

    def acquire(self, timeout_s: float) -> Slot:
        """A free slot, waiting at most ``timeout_s``; ``PoolTimeout`` past it."""
        if not self._free.acquire(timeout=timeout_s):
            raise PoolTimeout(
                f"no Python interpreter became free within {timeout_s:g} s "
                f"(max_interpreters={self.size}, all in use)"
            )
        try:
            slot = self._claim_uid() if self.as_root else Slot(None, None)
        except BaseException:
            self._free.release()
            raise
        with self._lock:
            self.in_use += 1
        return slot

    def release(self, slot: Slot) -> None:
        """Give ``slot`` back; anything still running under its uid is killed first."""
        if slot.uid is not None:
            kill_user(slot.uid)
        if slot.lock_fd is not None:
            os.close(slot.lock_fd)  # the flock goes with it
            slot.lock_fd = None
        with self._lock:
            self.in_use -= 1
        self._free.release()

    def _claim_uid(self) -> Slot:
        os.makedirs(self.lock_dir, mode=0o700, exist_ok=True)
        st = os.lstat(self.lock_dir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            raise PermissionError(f"python sandbox: {self.lock_dir} must be a directory only root may write")
        with self._lock:
            start, self._next = self._next, (self._next + 1) % self.uid_count
        for i in range(self.uid_count):
            uid = self.uid_base + (start + i) % self.uid_count
            fd = os.open(os.path.join(self.lock_dir, f"{uid}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another slot, here or in another process, holds it
                os.close(fd)
                continue
            kill_user(uid)  # a crashed holder's leftovers
            return Slot(uid, uid, fd)
        raise PoolTimeout(f"all {self.uid_count} sandbox uids from {self.uid_base} are taken")
