"""The ``python`` tool: the policy's code in a sandboxed interpreter of its own per trajectory.

A schema tool with sessions (``typed.py``, ``sessions.py``): one required string parameter,
``code``, so it is ``<python> … </python>`` in the ``tags`` format and
``{"name": "python", "arguments": {"code": "…"}}`` in ``hermes``. Each trajectory's session
starts its own interpreter process at its first call (``process.py``) and keeps it
until the trajectory ends: variables, imports and files persist between that trajectory's
calls and nobody else's, and are gone after it. The interpreter runs at the isolation level
``sandbox.choose_isolation`` picked (stated in the log and in ``tool.isolation`` when the
tool is built; with none it refuses to start unless ``allow_unisolated=True``), under the
limits of ``sandbox.SandboxLimits``, in a fresh working directory, as a uid of its own when
the trainer is root, and at most ``max_interpreters`` at once (``pool.py``).

What the policy reads: the output (stdout and stderr, in the order written, the first
``max_output_bytes`` of it and a line saying so when cut), the ``repr`` of the last
expression, the traceback of an error. A call that outlives ``wall_time_s`` stops the
interpreter and says so; the next call starts a new one and says that too. The code's own
mistakes and limits are observations; a pool that stays full or an interpreter that cannot
start raises ``ToolError`` (the rollout's ``tool_error_policy`` decides).

Its options are the fields of one frozen ``SandboxOptions`` (``options.py``), validated once when
the tool is built; the config gives them flat, as keyword arguments, and the pool
(``InterpreterPool(options)``), each process (its ``limits``) and the launch (``SandboxSetup``,
what every interpreter of the tool starts from) read that one value.
"""

from __future__ import annotations

import ast
import itertools
import logging
import os
import textwrap
import threading
from typing import Any

from agentrl.tools.base import ToolError, ToolResult
from agentrl.tools.rules import check_options
from agentrl.tools.sandbox.cgroup import MemoryCgroups, find_memory_cgroups
from agentrl.tools.sandbox.isolation import (
    SandboxSetup,
    SandboxUnavailable,
    choose_isolation,
    interpreter_paths,
    launch,
    mount_plan,
    python_of,
    unreadable_tops,
)
from agentrl.tools.sandbox.options import DEFAULT_UID_BASE, WHERE, SandboxOptions
from agentrl.tools.sandbox.pool import InterpreterPool, PoolTimeout, Slot
from agentrl.tools.sandbox.process import (
    InterpreterGone,
    SandboxProcess,
    SandboxStartError,
    make_workdir,
    prepare_work_root,
)
from agentrl.tools.spec import ToolSpec
from agentrl.tools.typed import in_thread

__all__ = [
    "DEFAULT_UID_BASE",
    "PythonSandboxTool",
    "PythonSession",
    "SandboxOptions",
    "normalise_code",
    "render",
]

logger = logging.getLogger(__name__)


def normalise_code(code: str) -> str:
    """``code`` as written, or without a Markdown fence or a common indent when only that parses.

    The tags format strips the text between the tags, which takes the first line's indent
    and leaves the others': ``x = 1\\n    y = 2`` parses once the rest is dedented.
    """
    lines = code.strip("\n").split("\n")
    if len(lines) >= 2 and lines[0].lstrip().startswith("```") and lines[-1].strip() == "```":
        code = "\n".join(lines[1:-1])
    first, _, rest = code.partition("\n")
    for candidate in (code, textwrap.dedent(code), f"{first}\n{textwrap.dedent(rest)}"):
        try:
            compile(candidate, "<python>", "exec", ast.PyCF_ONLY_AST)
        except (SyntaxError, ValueError):
            continue
        return candidate
    return code  # the interpreter reports the syntax error with its own line numbers


def render(reply: dict[str, Any], max_output_bytes: int) -> tuple[str, bool]:
    """The tool message of one finished call, and whether its output was cut."""
    parts = []
    if reply.get("output"):
        parts.append(str(reply["output"]).rstrip("\n"))
    written = int(reply.get("output_bytes") or 0)
    cut = written > max_output_bytes
    if cut:
        parts.append(
            f"[output cut: {written:,} bytes were written; the first {max_output_bytes:,} are shown]"
        )
    if reply.get("value") is not None:
        parts.append(str(reply["value"]))
    if reply.get("error"):
        parts.append(str(reply["error"]))
    return "\n".join(parts) or "(no output)", cut


def _clean(text: str) -> str:
    """No lone surrogates (a repr may carry them), which a tokenizer would choke on."""
    return text.encode("utf-8", "replace").decode("utf-8")


class PythonSandboxTool:
    """The ``python`` tool (module docstring): its options, each with a default, are the fields
    of ``SandboxOptions``, given as keyword arguments (as the config gives them) or as one
    ``SandboxOptions``; the tool, its pool and its processes read ``self.options``."""

    options_class = SandboxOptions  # the options it takes (rules.check_options reads them)

    def __init__(self, options: SandboxOptions | None = None, /, **fields: Any) -> None:
        if options is None:
            check_options(type(self), fields, WHERE)
            options = SandboxOptions(**fields)
        elif fields:
            raise TypeError(f"{WHERE}: give a SandboxOptions or its fields as keywords, not both")
        self.options = options
        self.limits = options.limits
        chosen = choose_isolation(options.isolation, options.allow_unisolated)
        self.isolation, self.isolation_detail = chosen.level, chosen.detail
        self.python = python_of(options.python)
        self.cgroups, self.cgroups_detail = self._memory_cgroups(options)
        self.work_root = prepare_work_root(options.work_root_or_default)
        self.pool = InterpreterPool(options)
        sandbox_uid = options.uid_base if self.pool.as_root else os.geteuid()
        paths = interpreter_paths(self.python)
        self._check_reachable(paths, sandbox_uid)
        plan = mount_plan(paths, sandbox_uid, self.work_root, options.readable_paths)
        self.setup = SandboxSetup(self.isolation, self.python, self.work_root, self.limits, plan)
        self.timeout_s = options.tool_timeout_s
        self.spec = ToolSpec(
            options.name,
            options.description,
            {
                "type": "object",
                "properties": {
                    "code": {
                        "type": "string",
                        "description": "Python code",
                        "maxLength": options.max_code_chars,
                    }
                },
                "required": ["code"],
                "additionalProperties": False,
            },
        )
        self.tag = options.name
        self._sessions: set[PythonSession] = set()
        self._names = itertools.count()
        self._lock = threading.Lock()
        weak = self.isolation in ("audit", "none")
        logger.log(logging.WARNING if weak else logging.INFO, "%s", self.describe())

    @staticmethod
    def _memory_cgroups(options: SandboxOptions) -> tuple[MemoryCgroups | None, str]:
        """Where sessions' memory cgroups are made (``options.memory_cgroup``), and why not when not."""
        if options.memory_cgroup == "off":
            return None, "memory_cgroup=off"
        found = find_memory_cgroups()
        if isinstance(found, MemoryCgroups):
            return found, f"cgroup v{found.version}"
        if options.memory_cgroup == "require":
            raise SandboxUnavailable(f"python sandbox: memory_cgroup='require', but no cgroup here: {found}")
        return None, found

    def _check_reachable(self, interpreter: list[str], uid: int) -> None:
        tops = ", ".join(unreadable_tops(interpreter, uid))
        if self.isolation in ("audit", "none") and tops:
            raise SandboxUnavailable(
                f"python sandbox: the sandbox user (uid {uid}) cannot enter {tops} on the way to "
                f"{self.python}, and isolation={self.isolation!r} has no mount namespace to bind it in; "
                "set the python option to an interpreter other users may read (e.g. /usr/bin/python3)"
            )
        if unreadable_tops([self.work_root], uid):
            raise SandboxUnavailable(
                f"python sandbox: the sandbox user (uid {uid}) cannot enter work_root {self.work_root}"
            )

    def describe(self) -> str:
        """The start-up statement: the isolation in force and the limits."""
        lim = self.limits
        who = (
            f"uids from {self.pool.uid_base} (the host runs as root)"
            if self.pool.as_root
            else "the host's uid"
        )
        session = (
            f"{self.options.session_memory_bytes >> 20} MB a session ({self.cgroups_detail})"
            if self.cgroups is not None
            else f"no memory cgroup ({self.cgroups_detail})"
        )
        return (
            f"python sandbox: isolation={self.isolation} ({self.isolation_detail}); per call "
            f"{lim.wall_time_s:g} s wall, {lim.cpu_time_s:g} s CPU; {lim.memory_mb} MB memory a process, "
            f"{session}, {lim.processes} processes, {lim.file_size_mb} MB per file, {lim.open_files} open "
            f"files, {lim.max_output_bytes} bytes of output; at most {self.pool.size} interpreters; "
            f"runs as {who}"
        )

    async def open_session(self) -> PythonSession:
        """A session; its interpreter starts at its first call."""
        session = PythonSession(self)
        with self._lock:
            self._sessions.add(session)
        return session

    async def close(self) -> None:
        """Close the sessions still open (the dispatcher closes them first; this is the backstop)."""
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            await session.close()

    @property
    def open_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _forget(self, session: PythonSession) -> None:
        with self._lock:
            self._sessions.discard(session)

    def _start(self, slot: Slot) -> SandboxProcess:
        user = None if slot.uid is None or slot.gid is None else (slot.uid, slot.gid)
        if self.isolation in ("bwrap", "unshare"):  # a tmpfs made inside the sandbox: only a name here
            workdir, host_dir = os.path.join(self.work_root, f"s{os.getpid()}-{next(self._names)}"), None
        else:
            workdir = host_dir = make_workdir(self.work_root, user)
        try:
            memory = None if self.cgroups is None else self.cgroups.make(self.options.session_memory_bytes)
        except OSError as exc:
            raise SandboxStartError(f"cannot make the session's memory cgroup: {exc}") from exc
        command = launch(self.setup, workdir, user, memory)
        return SandboxProcess(command, host_dir, slot.uid, self.limits, memory)


class PythonSession:
    """One trajectory's interpreter (see the module docstring); calls run one at a time."""

    def __init__(self, tool: PythonSandboxTool) -> None:
        self.tool = tool
        self._process: SandboxProcess | None = None
        self._slot: Slot | None = None
        self._closed = False
        self._notice: str | None = None  # said at the top of the next call's message
        self._call_lock = threading.Lock()
        self._state = threading.Lock()
        self.restarts = 0

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        """One call's message; the interpreter's state carries over to the next call."""
        return await in_thread(self._call, str(arguments["code"]))

    async def close(self) -> None:
        """End the interpreter, remove its directory, give its slot back (idempotent)."""
        await in_thread(self._close)

    def _call(self, code: str) -> ToolResult:
        with self._call_lock:
            process = self._ensure_process()  # may raise ToolError: then the notice waits
            notice, self._notice = self._notice, None
            prefix = (
                f"[A new Python interpreter was started: the previous one {notice}. Variables, "
                "imports and files from before are gone.]\n"
                if notice
                else ""
            )
            try:
                reply = process.run(normalise_code(code), self.tool.limits.wall_time_s)
            except InterpreterGone as exc:
                with self._state:
                    self._process = None
                self._notice = exc.reason
                self.restarts += 1
                text = (
                    f"Error: the interpreter {exc.reason}, so it was stopped: its variables, imports "
                    "and files are gone. The next call starts a new interpreter."
                )
                return ToolResult(_clean(prefix + text), self._metrics(notice, True, exc.timed_out))
            text, cut = render(reply, self.tool.limits.max_output_bytes)
            return ToolResult(_clean(prefix + text), self._metrics(notice, bool(reply.get("error")), cut=cut))

    def _metrics(self, notice: str | None, error: bool, timed_out: bool = False, cut: bool = False) -> dict:
        """Summed per trajectory, logged as ``rollout/tool/<tool name>/<key>``."""
        name = self.tool.spec.name
        values = {"errors": error, "timeouts": timed_out, "output_cut": cut, "restarts": notice is not None}
        return {f"{name}/{key}": float(value) for key, value in values.items()}

    def _ensure_process(self) -> SandboxProcess:
        if self._process is not None:
            return self._process
        if self._slot is None:
            try:
                slot = self.tool.pool.acquire(self.tool.options.queue_timeout_s)
            except PoolTimeout as exc:
                raise ToolError(f"python sandbox: {exc}") from None
            with self._state:
                closed = self._closed
                if not closed:
                    self._slot = slot
            if closed:
                self.tool.pool.release(slot)
        with self._state:
            if self._closed or self._slot is None:
                raise ToolError("python sandbox: this session is closed")
            try:
                process = self._process = self.tool._start(self._slot)
            except SandboxStartError as exc:
                raise ToolError(f"python sandbox: {exc}") from None
        try:
            process.wait_ready(self.tool.options.start_timeout_s)
        except SandboxStartError as exc:
            with self._state:
                self._process = None
            raise ToolError(f"python sandbox ({self.tool.isolation}): {exc}") from None
        return process

    def _close(self) -> None:
        with self._state:
            if self._closed:
                return
            self._closed = True
            process, self._process = self._process, None
            slot, self._slot = self._slot, None
        try:
            if process is not None:
                process.end()
        finally:
            if slot is not None:
                self.tool.pool.release(slot)
            self.tool._forget(self)
