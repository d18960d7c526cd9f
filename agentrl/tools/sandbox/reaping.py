"""Reaping a sandbox's orphans where they come to the trainer: it is PID 1 or a child subreaper.

A trainer that is PID 1 (a container started without an init) or a child subreaper inherits the
orphans of every process it starts, and nothing else will ever collect them: a zombie of a
sandbox's uid counts against that uid's ``RLIMIT_NPROC`` until it is reaped. ``reap_orphans``
reaps those of one sandbox (never another library's child), ``descendants`` lists a launcher's
processes before they are killed, so that the ones a launcher moved to a session of their own
(``bwrap --new-session``) are recognised too.
"""

from __future__ import annotations

import contextlib
import os
import time

PR_GET_CHILD_SUBREAPER = 37


def inherits_orphans() -> bool:
    """Whether orphans of the processes this one started come to it (it is PID 1, as a trainer in a
    container without an init is, or a child subreaper): then nothing but it will reap them."""
    if os.getpid() == 1:
        return True
    import ctypes  # only here: the common case never needs it

    flag = ctypes.c_int(0)
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and bool(flag.value)


def _processes() -> list[tuple[int, str, str, int, int]]:
    """Every process now: (pid, name, state, parent, session), from ``/proc/<pid>/stat``."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:  # it ended meanwhile
            continue
        state, ppid, _pgrp, sid = stat[stat.rindex(")") + 2 :].split()[:4]
        found.append((int(entry), stat[stat.index("(") + 1 : stat.rindex(")")], state, int(ppid), int(sid)))
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now (``bwrap --new-session`` puts its own in a session of theirs)."""
    children: dict[int, list[int]] = {}
    for child, _name, _state, parent, _sid in _processes():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def reap_orphans(
    session: int,
    uid: int | None,
    exclude: frozenset[int],
    family: frozenset[int] = frozenset(),
    names: frozenset[str] = frozenset(),
    wait_s: float = 0.5,
) -> int:
    """Reap this process's zombie children from a sandbox: in process session ``session`` (the
    launcher's), of ``uid``, in ``family`` (the launcher's descendants before the kill) or named one
    of ``names`` (a probe's launcher, gone before its children could be listed), never one in
    ``exclude`` (the launcher, its ``Popen``'s to wait for; the children a probe found). Waits up to
    ``wait_s`` for such children still dying; how many were reaped."""
    me, reaped = os.getpid(), 0
    deadline = time.monotonic() + wait_s
    while True:
        dying = False
        for pid, name, state, ppid, sid in _processes():
            if ppid != me or pid in exclude:
                continue
            try:
                owner = os.stat(f"/proc/{pid}").st_uid
            except OSError:  # it ended meanwhile
                continue
            if not (sid == session or owner == uid or pid in family or name in names):
                continue
            if state != "Z":
                dying = True  # killed, not yet a zombie
                continue
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
        if not dying or time.monotonic() > deadline:
            return reaped
        time.sleep(0.005)
