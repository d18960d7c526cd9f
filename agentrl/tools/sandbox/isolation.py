"""Which isolation a sandboxed interpreter gets, and the command line and settings that start one.

Four levels, strongest first (``auto`` takes the first one that works on this machine):

* ``bwrap``: bubblewrap, when on ``PATH``: fresh network, PID, IPC and UTS namespaces (no
  network at all: a connect, even to the host's loopback, fails), the whole filesystem
  read-only but the session's working directory, a fresh ``/dev`` and ``/proc``, the sandbox
  ended when its host dies (``--die-with-parent``); the interpreter is the namespace's PID 1
  (``--as-pid-1``: bubblewrap's own init reports its child's exit before it is reaped, and its
  launcher then exits and orphans it);
* ``unshare``: the same namespaces through util-linux's ``unshare`` (as root, or inside a
  user namespace of its own otherwise); the interpreter sets up the mounts itself
  (``repl.setup_mounts``);
* ``audit``: no namespaces: an audit hook inside the interpreter refuses sockets,
  subprocesses, fork, ``ctypes`` and writes outside the working directory. A hurdle for
  code that reaches for the network by accident, not a wall against code that tries.
* ``none``: only the resource limits (and the uid drop, as root). Refused unless
  ``allow_unisolated=True``.

At every level the interpreter runs under the resource limits of ``SandboxLimits``, and,
when the host runs as root, as an unprivileged uid of its own (``pool.py``). Each
level is probed once per process by starting it for real (``probe``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from agentrl.tools.sandbox.cgroup import SessionCgroup

LEVELS = ("bwrap", "unshare", "audit", "none")
REPL_SCRIPT = str(Path(__file__).with_name("repl.py"))
HIDDEN_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable, full of other programs' files
# the host's that are nobody's business in a sandbox: users' homes (tokens, keys), the runtime
# directory's sockets (a path-bound socket is reached whatever the network namespace, and
# read-only mounts still allow connect: the docker socket is root on the host)
PRIVATE_DIRS = ("/home", "/root", "/run", "/var/run")
NAMESPACES = ["--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--mount-proc", "--kill-child"]
_probed: dict[tuple[str, int], str | None] = {}


class SandboxUnavailable(RuntimeError):
    """The isolation asked for cannot be had here (the message says why and what to set)."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one interpreter may use; every call gets ``wall_time_s`` and ``cpu_time_s`` afresh."""

    wall_time_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_mb: int = 1024
    processes: int = 32
    file_size_mb: int = 64
    open_files: int = 256
    max_output_bytes: int = 8192
    workdir_mb: int = 128

    def __post_init__(self) -> None:
        for name in (f.name for f in fields(SandboxLimits)):  # a subclass's own fields are its own
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"python sandbox: {name} must be a number > 0, got {value!r}")
        if self.processes < 2 or self.open_files < 16 or self.memory_mb < 32:
            raise ValueError(
                "python sandbox: processes must be >= 2, open_files >= 16 and memory_mb >= 32 "
                "(the interpreter itself needs them)"
            )


@dataclass(frozen=True)
class Isolation:
    """The level in force and how it was chosen (both logged at start-up)."""

    level: str
    detail: str


def probe(level: str) -> str | None:
    """None when ``level`` works here, else the reason it does not (cached per process and uid)."""
    key = (level, os.geteuid())
    if key not in _probed:
        _probed[key] = _probe(level)
    return _probed[key]


def _probe(level: str) -> str | None:
    if level in ("audit", "none"):
        return None
    launchers = ["bwrap"] if level == "bwrap" else ["unshare", "setpriv"]
    for launcher in launchers:
        if shutil.which(launcher) is None:
            return f"{launcher} is not on PATH"
    launcher = launchers[0]
    if level == "bwrap":
        argv = [_which("bwrap"), "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--as-pid-1"]
        argv += ["--die-with-parent", "true"]
    else:
        argv = [*_unshare(), *_userns(), *NAMESPACES, "true"]
    try:  # each launcher reaps its child before it exits: nothing is orphaned to us
        done = subprocess.run(argv, capture_output=True, timeout=30, env=base_env("/"), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{launcher} failed: {exc}"
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        return f"{launcher} failed: {message[-1] if message else f'exit status {done.returncode}'}"
    return None


def choose_isolation(requested: str, allow_unisolated: bool) -> Isolation:
    """The level to run at: ``requested`` (``auto`` or one of ``LEVELS``), or an error naming the options."""
    if requested not in ("auto", *LEVELS):
        raise ValueError(f"python sandbox: isolation must be 'auto' or one of {LEVELS}, got {requested!r}")
    if requested == "none" and not allow_unisolated:
        raise SandboxUnavailable(
            "python sandbox: isolation='none' runs the policy's code with resource limits only; "
            "set allow_unisolated=True to accept that"
        )
    if requested != "auto":
        reason = probe(requested)
        if reason is not None:
            raise SandboxUnavailable(f"python sandbox: isolation={requested!r} is not available: {reason}")
        return Isolation(requested, "as configured")
    skipped = []
    for level in ("bwrap", "unshare"):
        reason = probe(level)
        if reason is None:
            return Isolation(level, "; ".join(skipped) or "the strongest level")
        skipped.append(f"{level}: {reason}")
    return Isolation("audit", "no namespaces here (" + "; ".join(skipped) + ")")


def _which(program: str) -> str:
    """``program``'s full path on the trainer's ``PATH`` (the sandbox's own ``PATH`` is minimal)."""
    return shutil.which(program) or program


def _unshare() -> list[str]:
    """``unshare``, under ``setpriv`` so that it ends with the host, and everything inside with it."""
    return [_which("setpriv"), "--pdeathsig", "KILL", _which("unshare")]


def _userns() -> list[str]:
    """Without root, namespaces come inside a user namespace that maps our uid to its root."""
    return [] if os.geteuid() == 0 else ["--user", "--map-root-user"]


def base_env(workdir: str) -> dict[str, str]:
    """The whole environment of a sandbox: nothing of the host's (no keys, no tokens)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "MPLCONFIGDIR": workdir,
        "MPLBACKEND": "Agg",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",  # each thread reserves address space RLIMIT_AS counts
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def interpreter_paths(python: str) -> list[str]:
    """The directories ``python`` reads at start-up and on import (its prefixes and ``sys.path``)."""
    script = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix] + sys.path))"
    try:
        done = subprocess.run(
            [python, "-I", "-c", script], capture_output=True, timeout=60, env=base_env("/"), check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"python sandbox: cannot run the interpreter {python!r}: {exc}") from None
    paths = {os.path.dirname(os.path.realpath(python)), os.path.dirname(REPL_SCRIPT)}
    paths.update(p for p in json.loads(done.stdout) if p and os.path.isdir(p))
    return sorted(paths)


def _may_traverse(path: str, uid: int) -> bool:
    st = os.stat(path)
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    return bool(st.st_mode & stat.S_IXOTH)  # the sandbox user has no groups


def _outermost(paths: list[str]) -> list[str]:
    """``paths`` without those inside another one, outer first."""
    ordered = sorted(set(paths))
    return [p for p in ordered if not any(p.startswith(q.rstrip("/") + "/") for q in ordered if q != p)]


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def unreadable_tops(paths: list[str], uid: int) -> list[str]:
    """The outermost directories ``uid`` cannot traverse on the way to ``paths``."""
    tops = []
    for path in paths:
        parts = Path(path).parts
        for depth in range(1, len(parts) + 1):
            here = str(Path(*parts[:depth]))
            if not _may_traverse(here, uid):
                tops.append(here)
                break
    return _outermost(tops)


@dataclass(frozen=True)
class MountPlan:
    """What a namespace level hides and what it brings back (read-only) inside what it hides.

    ``cover`` gets an empty tmpfs each: the shared temporary directories (other programs'
    files), the private ones (``private_dirs``: homes, ``/run``'s sockets, the trainer's working
    directory and the project tree), ``work_root`` (every other session's directory) and each
    directory the sandbox user cannot enter on the way to the interpreter. ``keep`` are the
    interpreter's directories under those and the tool's ``readable_paths``, bound back
    read-only where they were; the session's own working directory is mounted writable.
    """

    cover: list[str]
    keep: list[str]


def project_tree() -> str | None:
    """The checkout ``agentrl`` runs from (reward code, data kept beside it), or None when it is an
    installed package (its directory is then site-packages, the interpreter's own)."""
    root = Path(__file__).resolve().parents[3]
    return str(root) if (root / "pyproject.toml").exists() and root.parent != root else None


def private_dirs() -> list[str]:
    """What a namespace level hides beside the temporary directories: ``PRIVATE_DIRS``, the
    trainer's home and working directory, and the project tree (module ``PRIVATE_DIRS``)."""
    dirs = [*PRIVATE_DIRS, os.path.expanduser("~"), os.getcwd(), project_tree()]
    return [d for d in dirs if d and d != "/"]  # "/": a home or working directory that is the root


def mount_plan(interpreter: list[str], uid: int, work_root: str, readable: tuple[str, ...] = ()) -> MountPlan:
    """The plan for an interpreter reading ``interpreter`` as ``uid``, with sessions under
    ``work_root``; ``readable``: paths the code may read inside what is hidden."""
    hidden = [d for d in (*HIDDEN_DIRS, *private_dirs()) if os.path.isdir(d) and not os.path.islink(d)]
    cover = sorted(set(unreadable_tops(interpreter, uid) + hidden + [work_root]), key=len)
    shown = [*interpreter, *(os.path.realpath(p) for p in readable)]
    keep = _outermost([p for p in shown if any(_under(p, top) for top in cover)])
    return MountPlan(cover, keep)


@dataclass(frozen=True)
class Launch:
    """How to start one interpreter: the command, its environment, and how many generations below
    the command's process the interpreter runs (1: the command is the interpreter's script, its
    reaper; 2: a launcher whose child is the reaper), which ``teardown.end_sandbox`` reads."""

    argv: list[str]
    env: dict[str, str]
    depth: int = 1


@dataclass(frozen=True)
class SandboxSetup:
    """What every interpreter of one tool starts from: the isolation ``level`` in force, the
    ``python`` to run, the ``work_root`` its working directory lies under, the ``limits`` and the
    ``plan`` of what a namespace level hides and binds back."""

    level: str
    python: str
    work_root: str
    limits: SandboxLimits
    plan: MountPlan


def launch(
    setup: SandboxSetup, workdir: str, user: tuple[int, int] | None, cgroup: SessionCgroup | None = None
) -> Launch:
    """The command that starts one interpreter of ``setup`` in ``workdir``, as ``user`` when given,
    every process of it in ``cgroup`` when given (the interpreter's script joins it first thing,
    before its reaper forks: at ``bwrap`` the cgroup's directory is bound in writable for that)."""
    level, limits = setup.level, setup.limits
    config: dict[str, Any] = {
        "workdir": workdir,
        "work_root": setup.work_root,
        "limits": asdict(limits),
        "user": list(user) if user else None,
        "env": base_env(workdir),
        "guard": level == "audit",
        "seccomp": level != "none",  # repl.install_seccomp
        "drop_caps": level == "unshare" and os.geteuid() != 0,
        "parent": os.getpid() if level in ("audit", "none") else None,  # it dies with us
        "chown_workdir": level == "bwrap" and user is not None,
        "cgroup": None if cgroup is None else cgroup.procs,  # repl.join_cgroup
    }
    if level == "audit":  # no mount namespace: the guard refuses reading what the others hide
        config["hidden"] = {"cover": setup.plan.cover, "keep": setup.plan.keep}
    if level == "unshare":
        config["mounts"] = {
            "cover": setup.plan.cover,
            "keep": setup.plan.keep,
            "workdir": workdir,
            "workdir_mb": limits.workdir_mb,
        }
    command = [setup.python, "-I", REPL_SCRIPT, json.dumps(config)]
    if level == "bwrap":
        joined = [] if cgroup is None else ["--bind", cgroup.path, cgroup.path]
        command = [*_bwrap_arguments(workdir, user, setup.plan, limits.workdir_mb), *joined, "--", *command]
    elif level == "unshare":
        command = [*_unshare(), *_userns(), *NAMESPACES, "--", *command]
    return Launch(command, base_env(workdir), depth=2 if level in ("bwrap", "unshare") else 1)


def _bwrap_arguments(
    workdir: str, user: tuple[int, int] | None, plan: MountPlan, workdir_mb: int
) -> list[str]:
    args = [_which("bwrap"), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for top in plan.cover:
        args += ["--tmpfs", top]
    for path in plan.keep:
        top = next(t for t in plan.cover if _under(path, t))
        between = Path(path).parents
        for parent in reversed([str(p) for p in between if _under(str(p), top) and str(p) != top]):
            args += ["--perms", "0755", "--dir", parent]  # bwrap would make them 0700
        args += ["--ro-bind", path, path]
    args += ["--size", str(workdir_mb << 20), "--perms", "0700", "--tmpfs", workdir]
    for top in plan.cover:  # the covers themselves read-only; what is bound into them keeps its mode
        args += ["--remount-ro", top]
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--as-pid-1"]
    args += ["--die-with-parent", "--new-session", "--chdir", workdir]
    if user is not None:  # root: the interpreter needs these to give itself the working directory and drop
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_CHOWN"]
    return args


def python_of(python: str | None) -> str:
    """The interpreter to run: ``python``, or the one running the trainer."""
    chosen = python or sys.executable
    if not chosen or not os.path.isfile(chosen):
        raise SandboxUnavailable(
            f"python sandbox: no Python interpreter at {chosen!r}; set the python option"
        )
    return chosen
