"""The ``python`` tool's options, ``SandboxOptions``: one frozen value, validated once, when it is made.

The config stays flat (``actor.rollout.tools[i].options`` is a mapping of these names, passed to
``PythonSandboxTool`` as keyword arguments); the tool names this class as its ``options_class``,
so the registry and the driver's check refuse an unknown name with a did-you-mean. The tool, its
pool (``pool.py``) and its processes (``process.py``, through ``limits``) read this one value.
Every bad value is refused here, naming the option and what was expected: the types by
``rules.check_option_types``, the limits by ``SandboxLimits``, the rest below.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, fields

from agentrl.tools.rules import check_option_types, did_you_mean
from agentrl.tools.sandbox.isolation import LEVELS, SandboxLimits

__all__ = ["DEFAULT_UID_BASE", "DESCRIPTION", "SandboxOptions"]

WHERE = "python sandbox"
DESCRIPTION = (
    "Run Python code in a sandboxed interpreter. Variables, imports and files persist between your "
    "calls in this conversation. Returns what the code prints and the value of its last expression. "
    "There is no network access."
)
DEFAULT_UID_BASE = 2_100_000_000  # far from system, user and container (subuid) ranges
ISOLATIONS = ("auto", *LEVELS)
# memory_cgroup: a session's memory cgroup where one can be made, always (else refuse to start), never
MEMORY_CGROUP = ("auto", "require", "off")


@dataclass(frozen=True)
class SandboxOptions(SandboxLimits):
    """Every option of ``PythonSandboxTool`` with its default (docs/python_sandbox.md lists them).

    First the limits of one interpreter, ``SandboxLimits``'s fields (``wall_time_s`` …
    ``workdir_mb``; its checks, and ``limits`` as that value alone); then the schema's
    ``max_code_chars``; the pool (``max_interpreters``, each waited for at most
    ``queue_timeout_s`` and started within ``start_timeout_s``); the memory of a whole session
    (``session_memory_mb``, None: ``memory_mb``) and whether a cgroup must bound it
    (``memory_cgroup``); the isolation (``isolation``, ``allow_unisolated``), the interpreter
    (``python``, None: the trainer's) and where working
    directories live (``work_root``); as root, the uids (``uid_base``, ``uid_count``, claimed in
    ``uid_lock_dir``); the dispatcher's bound (``timeout_s``, None: derived); the paths the code may
    read inside what a namespace level hides (``readable_paths``); ``name`` and ``description`` of
    the tool.
    """

    max_code_chars: int = 20000
    max_interpreters: int = 16
    queue_timeout_s: float = 60.0
    start_timeout_s: float = 20.0
    session_memory_mb: int | None = None
    memory_cgroup: str = "auto"
    isolation: str = "auto"
    allow_unisolated: bool = False
    python: str | None = None
    work_root: str | None = None
    uid_base: int = DEFAULT_UID_BASE
    uid_count: int = 4096
    uid_lock_dir: str | None = None
    timeout_s: float | None = None
    # paths the code may read although the namespace levels hide what holds them (a data directory,
    # the project tree): bound back read-only (isolation.mount_plan)
    readable_paths: tuple[str, ...] = ()
    name: str = "python"
    description: str = DESCRIPTION

    def __post_init__(self) -> None:
        for path in ("python", "work_root", "uid_lock_dir"):  # a pathlib.Path from Python code
            if isinstance(getattr(self, path), os.PathLike):
                object.__setattr__(self, path, os.fspath(getattr(self, path)))
        check_option_types(self, WHERE)
        paths = self.readable_paths
        if isinstance(paths, list):  # the config gives a list
            object.__setattr__(self, "readable_paths", paths := tuple(paths))
        if not isinstance(paths, tuple) or not all(isinstance(p, str) and os.path.isabs(p) for p in paths):
            expected = "must be a list of absolute paths"
            raise ValueError(f"{WHERE}: option 'readable_paths' {expected}, got {paths!r}")
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise ValueError(f"{WHERE}: readable_paths: {missing[0]!r} does not exist")
        super().__post_init__()  # the limits' ranges
        if self.isolation not in ISOLATIONS:
            raise ValueError(
                f"{WHERE}: isolation must be 'auto' or one of {LEVELS}, got {self.isolation!r}"
                + did_you_mean(self.isolation, ISOLATIONS)
            )
        if self.memory_cgroup not in MEMORY_CGROUP:
            raise ValueError(
                f"{WHERE}: memory_cgroup must be one of {MEMORY_CGROUP}, got {self.memory_cgroup!r}"
                + did_you_mean(self.memory_cgroup, MEMORY_CGROUP)
            )
        if self.session_memory_mb is not None and self.session_memory_mb < 32:
            raise ValueError(f"{WHERE}: session_memory_mb must be >= 32, got {self.session_memory_mb!r}")
        at_least = {"max_code_chars": 1, "max_interpreters": 1, "uid_count": 1, "queue_timeout_s": 0}
        for name, least in at_least.items():
            if getattr(self, name) < least:
                raise ValueError(f"{WHERE}: {name} must be >= {least}, got {getattr(self, name)!r}")
        for name in ("start_timeout_s", "timeout_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{WHERE}: {name} must be > 0, got {value!r}")
        if not self.name:
            raise ValueError(f"{WHERE}: name must not be empty")

    @property
    def limits(self) -> SandboxLimits:
        """What one interpreter may use: the limits' fields alone, as the interpreter receives them."""
        return SandboxLimits(**{f.name: getattr(self, f.name) for f in fields(SandboxLimits)})

    @property
    def session_memory_bytes(self) -> int:
        """What one session's processes and files may hold together: ``session_memory_mb``, else
        ``memory_mb``."""
        return (self.session_memory_mb or self.memory_mb) << 20

    @property
    def lock_dir(self) -> str:
        """Where uids are claimed: ``uid_lock_dir``, else one directory for the whole machine."""
        return self.uid_lock_dir or os.path.join(
            "/run" if os.path.isdir("/run") else tempfile.gettempdir(), "agentrl-python-uids"
        )

    @property
    def work_root_or_default(self) -> str:
        """``work_root``, else ``<tmp>/agentrl-python``."""
        return self.work_root or os.path.join(tempfile.gettempdir(), "agentrl-python")

    @property
    def tool_timeout_s(self) -> float:
        """The dispatcher's bound on one call: ``timeout_s``, else a wait, a start and a call, plus 10 s."""
        if self.timeout_s is not None:
            return float(self.timeout_s)
        return float(self.queue_timeout_s + self.start_timeout_s + self.wall_time_s + 10)
