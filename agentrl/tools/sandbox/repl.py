# long: one unit by necessity: the sandbox runs this file alone, as a script under any Python, so
# it imports the standard library only and cannot be split into modules of its own
"""The interpreter inside the sandbox: set the sandbox up, then run code chunks in one namespace.

This file runs as a script (``python -I repl.py CONFIG_JSON``) in the process the
host started for one session (``process.py``), inside whatever isolation the host
chose (``isolation.py``). It imports the standard library only, so it runs under any Python.
In order, before any of the policy's code runs:

0. **memory cgroup** (where the host made one for the session): this process joins it, so every
   process the sandbox starts is in it;
1. **mounts** (``unshare`` level only; bubblewrap does its own): a ``/dev`` of its own (a tmpfs
   holding ``null``, ``zero``, ``full``, ``random``, ``urandom`` and ``tty`` bound from the
   host's and the ``fd``/``std*`` links: none of the host's other devices), an empty tmpfs over
   each directory of the host's ``isolation.MountPlan`` (``/tmp`` and the other shared temporary
   directories, the directory of every session's working directory, any directory the
   sandbox user cannot enter on the way to the interpreter, such as ``/root`` above a
   pyenv), the interpreter's own directories bound back into them, the working directory a
   tmpfs of its own (``workdir_mb``, 0700, the sandbox user's; gone with the namespace), then
   every mount read-only but the working directory;
2. **reaper** (every level): it forks, and the parent only reaps: as PID 1 of the sandbox's PID
   namespace (``bwrap``, ``unshare``) its exit ends every process left there; without one
   (``audit``, ``none``) it is a child subreaper, so the interpreter's orphans come to it, and
   when the interpreter ends it kills and reaps them before it exits. Either way no process of
   the sandbox is ever orphaned to the host: the host ends a session by killing what runs under
   this reaper, which then exits for its launcher to reap (``teardown.py``). The reaper keeps the
   uid it was started with (a parent-death signal is only sent where its sender may signal);
3. **privileges** (the interpreter's): from root to the session's own uid/gid, no groups, no
   capabilities (or, as root of a user namespace mapping one uid, every capability dropped and
   root's special treatment on ``exec`` off); ``no_new_privs``; a parent-death signal (it dies
   with the reaper);
4. **limits** (the interpreter's, after the reaper's fork: where the sandbox shares the trainer's
   uid, ``RLIMIT_NPROC`` counts the trainer's processes too, and the reaper must start whatever
   their number): ``RLIMIT_AS``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE`` (``SIGXFSZ`` ignored, so an
   oversized write fails with ``EFBIG`` instead of killing the process), ``RLIMIT_NOFILE``, no
   core files; ``RLIMIT_CPU`` is set per call (below);
5. **guard** (``audit`` level only): an audit hook that refuses sockets, subprocesses, fork,
   ``ctypes``, signals to other processes, writes outside the working directory, reads of
   other sessions' directories and of what the namespace levels hide (the plan's covers: homes,
   ``/run``, the temporary directories, the trainer's directory and the project tree, but the
   interpreter's own directories and ``readable_paths``).

Then it answers frames on its stdin/stdout (an 8-byte big-endian length, then JSON):
``{"code": ..., "nonce": ...}`` → ``{"output", "output_bytes", "value", "error", "limit", "nonce"}``.
During a call file descriptors 1 and 2 (and ``sys.stdout``/``sys.stderr``) write to one memory
file, so a subprocess's output lands in order with ``print``'s; only the first
``max_output_bytes`` are sent back, with the total. The per-call CPU budget is the soft
``RLIMIT_CPU``: past it the kernel sends ``SIGXCPU``, raised in the code as
``CPUTimeExceeded``. The host enforces the wall time by killing the process. End of input ends
the interpreter.
"""

from __future__ import annotations

import ast
import codecs
import contextlib
import ctypes
import io
import json
import linecache
import math
import os
import resource
import signal
import struct
import sys
import traceback

HEADER = struct.Struct(">Q")
MAX_REQUEST = 64 << 20

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MOUNT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 38, 24, 28
PR_SET_CHILD_SUBREAPER = 36
# the devices a sandbox's own /dev holds, bound from the host's (none of its disks, GPUs, kmsg, fuse)
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
SECBIT_NOROOT_ALL = 0x3F  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS-off, each with its lock bit


class CPUTimeExceeded(BaseException):
    """The call used its CPU time (a ``BaseException``, so ``except Exception`` does not eat it)."""


# --- setup -------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _mount_points() -> list[tuple[str, list[str]]]:
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # "\040" for a space
            points.append((point, fields[5].split(",")))
    return points


def own_dev() -> None:
    """A tmpfs over ``/dev`` with ``DEVICES`` bound from the host's and ``DEV_LINKS``."""
    nodes = [(name, os.open(f"/dev/{name}", os.O_PATH)) for name in DEVICES if os.path.exists(f"/dev/{name}")]
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name, fd in nodes:
        with open(f"/dev/{name}", "w"):  # the mount point: a file, as the node is one
            pass
        _mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, MS_BIND)
        os.close(fd)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"/dev/{name}")


def setup_mounts(mounts: dict, user: list[int] | None) -> None:
    """Step 1 of the module docstring (we are root of this mount namespace)."""
    workdir = mounts["workdir"]
    kept = [(path, os.open(path, os.O_PATH)) for path in mounts["keep"]]  # held: the covers hide them
    own_dev()  # first: a cover under /dev (/dev/shm) is made inside it
    for top in mounts["cover"]:  # outer first; an inner one is made inside the outer's tmpfs
        os.makedirs(top, exist_ok=True)
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
    for path, fd in kept:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    os.makedirs(workdir, exist_ok=True)
    owner = f",uid={user[0]},gid={user[1]}" if user else ""
    _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={mounts['workdir_mb']}m,mode=0700{owner}")
    done = {workdir}
    for point, options in reversed(_mount_points()):  # children first, the topmost of a point first
        # a mount hidden under a new one (the host's /dev/pts) is reached by no path: leave it
        if point in done or not os.path.lexists(point):
            continue
        done.add(point)
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in options:  # a bind remount must keep the flags it had
            flags |= MOUNT_FLAGS.get(option, 0)
        _mount(None, point, None, flags)


def apply_limits(limits: dict) -> None:
    """Step 4 of the module docstring."""
    mb = 1 << 20
    for name, value in (
        (resource.RLIMIT_AS, limits["memory_mb"] * mb),
        (resource.RLIMIT_NPROC, limits["processes"]),
        (resource.RLIMIT_FSIZE, limits["file_size_mb"] * mb),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(name, (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def drop_privileges(user: list[int] | None, drop_caps: bool) -> None:
    """Step 3 of the module docstring."""
    if user is not None:
        uid, gid = user
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)  # the effective and permitted capabilities go with root
    elif drop_caps:
        _check(_libc.prctl(PR_SET_SECUREBITS, SECBIT_NOROOT_ALL, 0, 0, 0), "securebits")
        for cap in range(64):
            if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                break  # past the last capability this kernel knows
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty
    _check(_libc.capset(header, data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def children_of_self() -> list[int]:
    """This process's children now (it has one thread: the reaper's)."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children", encoding="ascii") as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:
        return []


def die_with_parent(parent: int | None) -> None:
    """SIGKILL when our parent dies (the launcher, which dies with the host; or the reaper), set after
    every uid change, which clears it; exit at once if ``parent`` is already gone."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # it died before the line above


def become_reaped_child(channel: tuple[int, int]) -> int:
    """Step 2 of the module docstring: return the reaper's pid in the child; the reaper never returns.

    The reaper keeps the uid it was started with: a parent-death signal needs its sender to be
    allowed to signal the receiver, and a launcher that dropped its capabilities (bubblewrap's) may
    signal its own uid only."""
    namespace_init = os.getpid() == 1
    if not namespace_init:  # the interpreter's orphans come to us, not to the host's init
        _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
    reaper = os.getpid()
    child = os.fork()
    if not child:
        return reaper
    for fd in (0, 1, 2, *channel):
        os.close(fd)
    code = None
    while True:
        if code is not None and not namespace_init:  # the interpreter is gone: so is what it left
            for pid in children_of_self():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        try:
            pid, status = os.wait()
        except ChildProcessError:  # nothing left: a signal N as status 128 + N, as a shell reports it
            os._exit(0 if code is None else 128 - code if code < 0 else code)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            if namespace_init:  # our exit ends every process left in the namespace
                os._exit(128 - code if code < 0 else code)


# System calls the policy's code has no use for and the host's kernel state would leak or grow
# through: the kernel keyrings (a key outlives the session, and the next session of the uid reads
# it), tracing, BPF, perf, userfaultfd, mounts and namespaces, io_uring (unfiltered system calls),
# kernel modules, file handles, other processes' memory, and memory no limit counts (memfd, SysV
# shared memory). x86-64 numbers; refused with EPERM. clone3 answers ENOSYS (its flags are behind
# a pointer a filter cannot read), so the C library falls back to clone, whose flags are checked:
# no new user namespace.
REFUSED_X86_64 = {
    "add_key": 248, "request_key": 249, "keyctl": 250, "ptrace": 101, "bpf": 321,
    "perf_event_open": 298, "userfaultfd": 323, "mount": 165, "umount2": 166, "pivot_root": 155,
    "unshare": 272, "setns": 308, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "process_vm_readv": 310, "process_vm_writev": 311, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "memfd_create": 319,
    "memfd_secret": 447, "shmget": 29, "swapon": 167, "swapoff": 168, "reboot": 169, "syslog": 103,
    "acct": 163,
}  # fmt: skip
X86_64_CLONE, X86_64_CLONE3, CLONE_NEWUSER = 56, 435, 0x10000000
AUDIT_ARCH_X86_64, X32_SYSCALL_BIT = 0xC000003E, 0x40000000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
RET_ALLOW, RET_ERRNO, EPERM, ENOSYS = 0x7FFF0000, 0x00050000, 1, 38
LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|..., BPF_RET|K


def seccomp_program() -> list[tuple[int, int, int, int]]:
    """The filter (classic BPF over ``struct seccomp_data``: nr at 0, arch at 4, args from 16)."""
    refused = sorted(REFUSED_X86_64.values())
    body: list[tuple[int, int, int, int]] = [(LD_ABS, 0, 0, 0)]
    body += [(JGE, 0, 0, X32_SYSCALL_BIT)]  # placeholder jt filled below: the x32 ABI's numbers
    body += [(JEQ, 0, 0, nr) for nr in refused]
    body += [(JEQ, 0, 0, X86_64_CLONE3), (JEQ, 0, 0, X86_64_CLONE), (RET, 0, 0, RET_ALLOW)]
    body += [(LD_ABS, 0, 0, 16), (JSET, 0, 0, CLONE_NEWUSER), (RET, 0, 0, RET_ALLOW)]
    enosys = len(body)
    body += [(RET, 0, 0, RET_ERRNO | ENOSYS)]
    deny = len(body)
    body += [(RET, 0, 0, RET_ERRNO | EPERM)]
    head = [(LD_ABS, 0, 0, 4), (JEQ, 1, 0, AUDIT_ARCH_X86_64), (RET, 0, 0, RET_ERRNO | EPERM)]
    program = head + body
    shift = len(head)

    def to(i: int, target: int) -> int:  # a relative jump from instruction i
        return target + shift - (i + shift) - 1

    for i, (code, _, _, k) in enumerate(body):
        if code == JGE or (code == JEQ and k in refused):
            program[i + shift] = (code, to(i, deny), 0, k)
        elif code == JEQ and k == X86_64_CLONE3:
            program[i + shift] = (code, to(i, enosys), 0, k)
        elif code == JEQ and k == X86_64_CLONE:
            program[i + shift] = (code, 1, 0, k)  # to the flags check past the allow below it
        elif code == JSET:
            program[i + shift] = (code, to(i, deny), 0, k)
    return program


def install_seccomp() -> bool:
    """Install ``seccomp_program`` on this process and the ones it starts (``no_new_privs`` is set
    already); False on a machine that is not x86-64, where the filter's numbers do not hold."""
    if os.uname().machine != "x86_64":
        return False
    program = seccomp_program()
    filters = (ctypes.c_uint64 * len(program))()
    for i, (code, jt, jf, k) in enumerate(program):
        filters[i] = code | jt << 16 | jf << 24 | k << 32  # struct sock_filter, little-endian

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Program(len(program), ctypes.addressof(filters))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")
    return True


def install_guard(workdir: str, work_root: str, hidden: dict) -> None:
    """Step 5 of the module docstring: refusals inside this interpreter, a hurdle rather than a wall.
    ``hidden``: the mount plan's ``cover`` and ``keep`` lists, which the namespace levels mount."""
    refused = {
        "socket.__new__", "socket.connect", "socket.bind", "subprocess.Popen", "os.system",
        "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "ctypes.dlopen",
        "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "gc.get_referrers", "gc.get_objects",
        "sys._current_frames",
    }  # fmt: skip
    paths_written = {
        "os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link", "os.chmod",
        "os.chown", "os.truncate", "os.utime", "shutil.copyfile", "shutil.move", "shutil.rmtree",
    }  # fmt: skip
    write_bits = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    inside = os.path.join(workdir, "")
    covers = [os.path.join(top, "") for top in hidden["cover"]]
    shown = [os.path.join(path, "") for path in (*hidden["keep"], workdir)]

    def within(path: object, root: str) -> bool:
        if isinstance(path, int):
            return True  # an open descriptor: it was checked when it was opened
        real = os.path.realpath(os.fsdecode(path))
        return real == root.rstrip("/") or real.startswith(root)

    def hook(event: str, args: tuple) -> None:
        if event in refused or (event == "import" and args[0] in ("ctypes", "_ctypes")):
            raise PermissionError(f"the sandbox refuses {event}")
        if event == "object.__setattr__" and args[0] is hook:
            raise PermissionError("the sandbox refuses changing its guard")
        if event in ("os.kill", "os.killpg") and args[0] not in (0, os.getpid()):  # 0: its own group
            raise PermissionError("the sandbox refuses signalling other processes")
        if event in ("open", "os.listdir", "os.scandir") and args and args[0] is not None:
            path = args[0]
            flags = args[2] if event == "open" and isinstance(args[2], int) else 0
            if flags & write_bits and not within(path, inside) and path != os.devnull:
                raise PermissionError(f"the sandbox refuses writing outside {workdir}: {path}")
            if within(path, os.path.join(work_root, "")) and not within(path, inside):
                raise PermissionError(f"the sandbox refuses reading other sessions' files: {path}")
            if any(within(path, top) for top in covers) and not any(within(path, p) for p in shown):
                raise PermissionError(f"the sandbox refuses reading what it hides: {path}")
        if event in paths_written:
            for path in args:
                if isinstance(path, (str, bytes, os.PathLike)) and not within(path, inside):
                    raise PermissionError(f"the sandbox refuses {event} outside {workdir}: {path}")

    sys.addaudithook(hook)
    for module, name in ((os, "pidfd_open"), (signal, "pidfd_send_signal")):  # signals no event audits
        for holder in (module, sys.modules.get("posix"), sys.modules.get("_signal")):
            if holder is not None and hasattr(holder, name):
                delattr(holder, name)


# --- the interpreter ---------------------------------------------------------------------


def read_frame(fd: int) -> dict | None:
    def exactly(n: int) -> bytes | None:
        chunks, left = [], n
        while left:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    header = exactly(HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_REQUEST:
        return None
    body = exactly(size)
    return None if body is None else json.loads(body)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_frame(fd: int, message: dict) -> None:
    body = json.dumps(message).encode()
    write_all(fd, HEADER.pack(len(body)) + body)


class CappedOutput(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of a call: writes to the call's memory file until it holds ``cap``."""

    encoding = "utf-8"
    errors = "backslashreplace"

    def __init__(self, fd: int, cap: int) -> None:
        self.fd, self.cap, self.dropped = fd, cap, 0

    def write(self, text: str) -> int:
        room = self.cap - os.lseek(self.fd, 0, os.SEEK_CUR)
        if room <= 0 and text.isascii():  # full: count it without encoding it (a flood is cheap)
            self.dropped += len(text)
            return len(text)
        data = text.encode("utf-8", "backslashreplace")
        if room < len(data):
            self.dropped += len(data) - max(room, 0)
            data = data[: max(room, 0)]
        write_all(self.fd, data)
        return len(text)

    def fileno(self) -> int:
        return self.fd

    def writable(self) -> bool:
        return True


class Interpreter:
    """One namespace the code chunks run in, one after another."""

    def __init__(self, cpu_time_s: float, cap: int) -> None:
        self.namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
        self.cpu_time_s, self.cap, self.cells = cpu_time_s, cap, 0
        self.out = os.memfd_create("output", 0)
        self.devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the host's pipes stay only on the channel's own descriptors
            os.dup2(self.devnull, fd)
        signal.signal(signal.SIGXCPU, self._cpu_exceeded)

    @staticmethod
    def _cpu_exceeded(signum: int, frame: object) -> None:
        raise CPUTimeExceeded

    def _set_cpu_budget(self, budget: float | None) -> None:
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        if budget is None:
            soft = hard
        else:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            soft = math.ceil(usage.ru_utime + usage.ru_stime + budget)  # whole seconds, rounded up
            soft = soft if hard == resource.RLIM_INFINITY else min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))

    def run(self, code: str) -> dict:
        self.cells += 1
        filename = f"<cell {self.cells}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        os.ftruncate(self.out, 0)
        os.lseek(self.out, 0, os.SEEK_SET)
        os.dup2(self.out, 1)
        os.dup2(self.out, 2)
        sink = CappedOutput(self.out, self.cap)
        sys.stdout = sys.stderr = sink
        value = error = limit = None
        self._set_cpu_budget(self.cpu_time_s)
        try:
            value = self._execute(code, filename)
        except CPUTimeExceeded:
            limit = "cpu"
            error = f"CPUTimeExceeded: the call used its CPU time limit of {self.cpu_time_s:g} s"
        except BaseException as exc:  # the policy's error, SystemExit included, is its observation
            error = self._format(exc)
        finally:
            self._set_cpu_budget(None)
            os.dup2(self.devnull, 1)
            os.dup2(self.devnull, 2)
        size = os.fstat(self.out).st_size
        data = os.pread(self.out, min(size, self.cap), 0)
        output = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=size <= self.cap)
        return {
            "output": output,
            "output_bytes": size + sink.dropped,
            "value": value if value is None or len(value) <= self.cap else value[: self.cap] + "…",
            "error": error if error is None or len(error) <= self.cap else "…" + error[-self.cap :],
            "limit": limit,
        }

    def _execute(self, code: str, filename: str) -> str | None:
        tree = ast.parse(code, filename, "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, filename, "exec"), self.namespace)
        if last is None:
            return None
        value = eval(compile(ast.Expression(last.value), filename, "eval"), self.namespace)
        return None if value is None else repr(value)

    @staticmethod
    def _format(exc: BaseException) -> str:
        if isinstance(exc, SyntaxError):
            return "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
        seen: set[int] = set()
        todo = [report]
        while todo:  # the interpreter's own frames (and its guard's) are not the policy's business
            part = todo.pop()
            if id(part) in seen:
                continue
            seen.add(id(part))
            part.stack = traceback.StackSummary.from_list([f for f in part.stack if f.filename != __file__])
            todo += [p for p in (part.__cause__, part.__context__) if p is not None]
        return "".join(report.format()).rstrip()


def join_cgroup(procs: str) -> None:
    """Move this process into the session's memory cgroup (``cgroup.procs``), before it forks."""
    with open(procs, "w", encoding="ascii") as f:
        f.write("0")  # "0": the writer itself


def main(config: dict) -> None:
    os.umask(0o022)  # the directories setup makes must be enterable whatever the host's umask
    if config.get("cgroup"):  # first: every process of the sandbox starts inside it
        join_cgroup(config["cgroup"])
    if config.get("mounts"):
        setup_mounts(config["mounts"], config.get("user"))
    if config.get("chown_workdir"):  # bubblewrap's tmpfs is root's; ours to give to the sandbox user
        os.chown(config["workdir"], *config["user"])
    requests, replies = os.dup(0), os.dup(1)  # the host's channel; 0, 1 and 2 become the call's
    # the reaper dies with the host (or the launcher that dies with it); as PID 1 it takes the
    # namespace down with it
    die_with_parent(config.get("parent"))
    reaper = become_reaped_child((requests, replies))
    drop_privileges(config.get("user"), config.get("drop_caps", False))
    die_with_parent(reaper)  # not inherited across the fork, and the uid change clears it
    apply_limits(config["limits"])
    os.chdir(config["workdir"])
    os.environ.clear()
    os.environ.update(config["env"])
    sys.dont_write_bytecode = True
    interpreter = Interpreter(config["limits"]["cpu_time_s"], config["limits"]["max_output_bytes"])
    filtered = config.get("seccomp") and install_seccomp()  # after the interpreter's own memfd
    if config.get("guard"):
        install_guard(config["workdir"], config["work_root"], config["hidden"])
    write_frame(replies, {"ready": True, "pid": os.getpid(), "uid": os.getuid(), "seccomp": bool(filtered)})
    while (request := read_frame(requests)) is not None:
        # the call's nonce back with its reply: the host takes no other frame as this call's answer
        write_frame(replies, {**interpreter.run(request["code"]), "nonce": request.get("nonce")})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
