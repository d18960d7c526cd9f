"""One sandboxed interpreter process: its working directory, its start, its calls and its end.

``SandboxProcess`` starts the command ``sandbox.launch`` built (in a process group of its
own, with the sandbox's environment only), waits for the interpreter's ``ready`` frame, and
sends it code one call at a time (the frames of ``repl``). A call that outlives its
wall time ends the process; so does a reply that is not a frame, and so does anything on the
reply channel the call did not ask for: the policy's code runs in the interpreter's process and
can write to that channel, so each call carries a fresh nonce its reply must return, no byte may
follow the reply, every field must have its type, and the output cap is applied again here
(``checked_reply``). A forged frame can then change only its own call's message (the code's to
say anyway), never the next call's, never past the cap, and never raise: the session ends and
the call's message says why. ``end`` (idempotent, safe
from any thread, also while a call waits) ends the sandbox under its launcher and then the
launcher, so that no process is orphaned to the host (``teardown.end_sandbox``), then, given the
session's uid, every process of that uid, and removes the working directory where it is on the
host (``audit``, ``none``; at ``bwrap`` and ``unshare`` it is a tmpfs of the sandbox's own, gone
with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future
from typing import Any

from agentrl.tools.sandbox.cgroup import SessionCgroup
from agentrl.tools.sandbox.isolation import Launch, SandboxLimits
from agentrl.tools.sandbox.pool import kill_user
from agentrl.tools.sandbox.teardown import end_sandbox

HEADER_SIZE = 8


class SandboxStartError(RuntimeError):
    """The interpreter did not come up (the message carries what it printed)."""


class InterpreterGone(RuntimeError):
    """The interpreter ended during a call; ``reason`` says how, for the policy to read."""

    def __init__(self, reason: str, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out


def prepare_work_root(path: str) -> str:
    """``path`` as the parent of every working directory: ours, no link, not writable by others.

    Directories of sessions whose host process is gone (a crash) are removed.
    """
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise PermissionError(
            f"python sandbox: work_root {path!r} must be a directory owned by uid {os.geteuid()}"
        )
    os.chmod(path, 0o711 if os.geteuid() == 0 else 0o700)  # root: each uid may enter its own only
    for entry in os.listdir(path):
        pid = entry[1:].split("-", 1)[0]
        if entry.startswith("s") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            remove_tree(os.path.join(path, entry))
    return os.path.realpath(path)


def make_workdir(work_root: str, user: tuple[int, int] | None) -> str:
    """A fresh 0700 directory under ``work_root``, owned by ``user`` when given."""
    path = tempfile.mkdtemp(prefix=f"s{os.getpid()}-", dir=work_root)
    if user is not None:
        os.chown(path, *user)
    return path


def remove_tree(path: str) -> None:
    """``rm -rf path``, also through directories the code made unreadable."""

    def retry(function: Any, failed: str, exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            os.chmod(failed, 0o700)
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(failed) and not os.path.islink(failed):
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=retry)


def describe_exit(returncode: int | None) -> str:
    """How a process ended, in words (a launcher reports a signal N as status 128 + N)."""
    if returncode is None:
        return "did not end"
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else None
    if number is not None:
        with contextlib.suppress(ValueError):
            name = signal.Signals(number).name
            why = {
                "SIGKILL": "a memory or process limit, or the code killed it",
                "SIGSEGV": "it crashed",
                "SIGXCPU": "the CPU time limit",
                "SIGXFSZ": "the file size limit",
            }.get(name, "a signal")
            return f"was killed by {name} ({why})"
    return f"exited with status {returncode}"


_spawn_queue: queue.SimpleQueue[tuple[Launch, Future[subprocess.Popen[bytes]]]] = queue.SimpleQueue()
_spawner_lock = threading.Lock()
_spawner: threading.Thread | None = None


def _spawn(launch: Launch) -> subprocess.Popen[bytes]:
    """``launch`` started by the one spawner thread, which lives as long as this process.

    The sandbox ends when the host dies through a parent-death signal (``--die-with-parent``,
    ``setpriv --pdeathsig``, ``PR_SET_PDEATHSIG`` in the interpreter), and the kernel sends it
    when the *thread* that forked the child ends: a child forked on a short-lived worker
    thread would be killed after its first call.
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawn_forever, name="sandbox-spawner", daemon=True)
            _spawner.start()
    done: Future[subprocess.Popen[bytes]] = Future()
    _spawn_queue.put((launch, done))
    return done.result()


def _spawn_forever() -> None:
    while True:
        launch, done = _spawn_queue.get()
        try:
            done.set_result(
                subprocess.Popen(
                    launch.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=launch.env,
                    cwd="/",
                    start_new_session=True,  # one group to kill, away from the trainer's terminal
                )
            )
        except BaseException as exc:  # handed to the caller, which raises it
            done.set_exception(exc)


REPLY_TEXTS = ("output", "value", "error", "limit")


def checked_reply(reply: dict[str, Any], nonce: str, cap: int) -> dict[str, Any]:
    """``reply`` if it answers the call of ``nonce`` with fields of their types, each text cut to the
    interpreter's own cap (``cap`` characters and an ellipsis: a genuine reply is never longer);
    ``ValueError`` naming what is wrong otherwise."""
    if reply.get("nonce") != nonce:
        raise ValueError("sent a reply that does not answer this call")
    written = reply.get("output_bytes")
    if type(written) is not int or written < 0:
        raise ValueError("sent a reply whose output_bytes is not a count")
    checked: dict[str, Any] = {"output_bytes": written}
    for key in REPLY_TEXTS:
        text = reply.get(key)
        if text is not None and not isinstance(text, str):
            raise ValueError(f"sent a reply whose {key} is not text")
        checked[key] = text if text is None or len(text) <= cap + 1 else text[:cap] + "…"
    checked["output"] = checked["output"] or ""
    return checked


class SandboxProcess:
    """A started interpreter; see the module docstring."""

    def __init__(
        self,
        launch: Launch,
        host_dir: str | None,
        uid: int | None,
        limits: SandboxLimits,
        memory: SessionCgroup | None = None,
    ) -> None:
        """``host_dir``: the working directory on the host's filesystem, removed at the end
        (None where it is a tmpfs inside the sandbox, which goes with it); ``uid``: the session's,
        whose processes ``end`` kills; ``limits``: the interpreter's, which bound a reply's size;
        ``memory``: the session's cgroup, removed at the end, which says when its limit killed."""
        self.host_dir, self.uid, self.memory = host_dir, uid, memory
        self.max_reply_bytes = 18 * limits.max_output_bytes + (1 << 20)  # three texts, JSON-escaped
        self.max_output_bytes = limits.max_output_bytes
        self.depth = launch.depth
        self._lock = threading.Lock()
        self._ended = self._busy = False
        self._startup_output = ""
        try:
            self._proc = _spawn(launch)
        except OSError as exc:
            if host_dir is not None:
                remove_tree(host_dir)
            if memory is not None:
                memory.remove(wait_s=0)
            raise SandboxStartError(f"cannot start {launch.argv[0]!r}: {exc}") from exc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """The interpreter's ``ready`` frame; ``SandboxStartError`` (process ended) if none comes."""
        try:
            return self._exchange(None, timeout_s)
        except InterpreterGone as exc:
            self.end()
            why = f"did not start within {timeout_s:g} s" if exc.timed_out else exc.reason
            said = self._startup_output
            raise SandboxStartError(f"the interpreter {why}" + (f": {said}" if said else "")) from None

    def run(self, code: str, wall_time_s: float) -> dict[str, Any]:
        """The reply to one call, checked (``checked_reply``); ``InterpreterGone`` (process ended)
        past ``wall_time_s``, on a crash, or on a reply channel the code wrote to."""
        nonce = secrets.token_hex(16)
        reply = self._exchange({"code": code, "nonce": nonce}, wall_time_s)
        try:
            checked = checked_reply(reply, nonce, self.max_output_bytes)
            if self._more_to_read():
                raise ValueError("wrote to the reply channel beside its reply")
            return checked
        except ValueError as exc:
            self.end()
            raise InterpreterGone(str(exc)) from None

    def _more_to_read(self) -> bool:
        """Whether bytes wait on the reply channel after a reply (none may: one frame a call)."""
        poller = select.poll()
        poller.register(self._proc.stdout.fileno(), select.POLLIN)  # type: ignore[union-attr]
        return bool(poller.poll(0))

    def _exchange(self, request: dict[str, Any] | None, timeout_s: float) -> dict[str, Any]:
        with self._lock:
            if self._ended:
                raise InterpreterGone("was already stopped")
            self._busy = True
        try:
            if request is not None:
                body = json.dumps(request).encode()
                try:
                    self._proc.stdin.write(len(body).to_bytes(HEADER_SIZE, "big") + body)  # type: ignore[union-attr]
                    self._proc.stdin.flush()  # type: ignore[union-attr]
                except (BrokenPipeError, ValueError):
                    raise self._gone() from None
            reply = self._read_frame(time.monotonic() + timeout_s)
        except TimeoutError:
            self.end()
            raise InterpreterGone(
                f"ran past the wall-time limit of {timeout_s:g} s", timed_out=True
            ) from None
        finally:
            with self._lock:
                self._busy = False
                ended = self._ended
            if ended:
                self._close_pipes()
        return reply

    def _read_frame(self, deadline: float) -> dict[str, Any]:
        header = self._read_exactly(HEADER_SIZE, deadline)
        size = int.from_bytes(header, "big")
        if size > self.max_reply_bytes:
            self.end()
            raise InterpreterGone(f"sent a reply of {size} bytes (more than {self.max_reply_bytes})")
        try:
            reply = json.loads(self._read_exactly(size, deadline))
        except ValueError:
            self.end()
            raise InterpreterGone("sent a reply that is not JSON") from None
        if not isinstance(reply, dict):
            self.end()
            raise InterpreterGone("sent a reply that is not an object")
        return reply

    def _read_exactly(self, n: int, deadline: float) -> bytes:
        fd = self._proc.stdout.fileno()  # type: ignore[union-attr]
        poller = select.poll()  # not select(): a trainer may hold more than 1024 descriptors
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        data = bytearray()
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                raise TimeoutError
            chunk = os.read(fd, min(n - len(data), 1 << 20))
            if not chunk:
                raise self._gone()
            data += chunk
        return bytes(data)

    def _gone(self) -> InterpreterGone:
        """The process closed its end: reap it and say how it ended."""
        try:
            returncode = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            returncode = None
        out_of_memory = self.memory is not None and self.memory.oom_kills() > 0
        self.end()
        if out_of_memory:
            limit = self.memory.limit_bytes >> 20  # type: ignore[union-attr]
            return InterpreterGone(f"was killed by the kernel at the session's memory limit of {limit} MB")
        return InterpreterGone(describe_exit(returncode))

    def _read_stderr(self) -> str:
        """What the launcher or the interpreter printed before it was ready (its errors)."""
        stream = self._proc.stderr
        with contextlib.suppress(OSError, ValueError):
            poller = select.poll()
            poller.register(stream.fileno(), select.POLLIN | select.POLLHUP)  # type: ignore[union-attr]
            if poller.poll(0):  # never blocks: a survivor might still hold the pipe
                return os.read(stream.fileno(), 65536).decode(errors="replace").strip()[-2000:]  # type: ignore[union-attr]
        return ""

    def end(self) -> None:
        """Kill everything the interpreter started and remove its working directory (idempotent)."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            busy = self._busy
        end_sandbox(self._proc, self.depth)
        if self.uid is not None:
            kill_user(self.uid)  # a backstop: nothing of the session's uid may outlive it
        if self.memory is not None:
            self.memory.remove()
        self._startup_output = self._read_stderr()
        if self.host_dir is not None:
            remove_tree(self.host_dir)
        if not busy:
            self._close_pipes()

    def _close_pipes(self) -> None:
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()
