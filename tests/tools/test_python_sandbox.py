"""The sandboxed ``python`` tool: state per trajectory, limits, no way out, nothing left behind.

Every break-out runs at each isolation level this machine has (``bwrap`` where bubblewrap is
installed, ``unshare`` where namespaces work, ``audit`` always) against real interpreter
processes, a real listening socket and the real filesystem, with limits small enough that a
fork bomb or a memory bomb cannot hurt the machine. Each ends with a tool message that says
what happened, the test process alive, and no process, directory or descriptor left over.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrl.agent.tool_dispatch import ToolDispatcher
from agentrl.tools import ToolError, ToolResult, as_typed, build_tool
from agentrl.tools.sandbox import isolation as sandbox_module
from agentrl.tools.sandbox import process as process_module
from agentrl.tools.sandbox.isolation import SandboxUnavailable, interpreter_paths, probe, unreadable_tops
from agentrl.tools.sandbox.tool import DEFAULT_UID_BASE, PythonSandboxTool, normalise_code

REPO = Path(__file__).resolve().parents[2]
NAMESPACE_LEVELS = [level for level in ("bwrap", "unshare") if probe(level) is None]
LEVELS = [*NAMESPACE_LEVELS, "audit"]
AS_ROOT = os.geteuid() == 0
UIDS = range(DEFAULT_UID_BASE, DEFAULT_UID_BASE + 4096)


@functools.cache
def python_for(level: str) -> str | None:
    """The trainer's Python, or, where no mount namespace can bind it in for the sandbox uid, the system's."""
    if level in NAMESPACE_LEVELS or not AS_ROOT:
        return None
    if not unreadable_tops(interpreter_paths(sys.executable), DEFAULT_UID_BASE):
        return None
    system = "/usr/bin/python3"
    if os.path.exists(system) and not unreadable_tops(interpreter_paths(system), DEFAULT_UID_BASE):
        return system
    pytest.skip(f"no Python here that uid {DEFAULT_UID_BASE} may read for isolation={level}")


@pytest.fixture
def work_root() -> Iterator[str]:
    """A fresh directory for the sessions' working directories; empty again at the end."""
    path = tempfile.mkdtemp(prefix="agentrl-sandbox-test-")  # under /tmp: the sandbox uid can enter it
    yield path
    left = os.listdir(path)
    shutil.rmtree(path, ignore_errors=True)
    assert left == [], f"working directories left behind: {left}"


def make(level: str, work_root: str, **options) -> PythonSandboxTool:
    options.setdefault("wall_time_s", 10.0)
    return PythonSandboxTool(isolation=level, python=python_for(level), work_root=work_root, **options)


def run_results(tool: PythonSandboxTool, *codes: str) -> list[ToolResult]:
    """The results of ``codes`` run one after another in one session, closed after."""

    async def go() -> list[ToolResult]:
        session = await tool.open_session()
        try:
            return [await session.call({"code": code}) for code in codes]
        finally:
            await session.close()

    return asyncio.run(go())


def run_session(tool: PythonSandboxTool, *codes: str) -> list[str]:
    """The messages of ``codes`` run one after another in one session, closed after."""
    return [result.text for result in run_results(tool, *codes)]


def descendants() -> set[int]:
    """Every live process below this one."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def sandbox_uid_processes() -> list[int]:
    """Live processes on this machine running as one of the sandbox's uids."""
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, ValueError):
            status = dict(
                line.split(":", 1)
                for line in Path(f"/proc/{entry}/status").read_text().splitlines()
                if ":" in line
            )
            if int(status["Uid"].split()[0]) in UIDS and not status["State"].strip().startswith("Z"):
                pids.append(int(entry))
    return pids


def zombies_of_sandbox_uids() -> list[int]:
    """Zombies on this machine of one of the sandbox's uids (a process nobody reaped)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z" and os.stat(f"/proc/{entry}").st_uid in UIDS:
                found.append(int(entry))
    return found


def sandbox_key_counts() -> dict[int, int]:
    """How many keys and keyrings the kernel holds for each of the sandbox's uids that has any
    (``/proc/key-users``, read on the host: what the code reports of itself is not evidence)."""
    counts = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/key-users").read_text().splitlines():
            uid, fields = line.split(":", 1)
            if int(uid) in UIDS:
                counts[int(uid)] = int(fields.split()[1].split("/")[0])
    return counts


def open_descriptors() -> dict[str, str]:
    """This process's open descriptors and what each points to (a path, ``pipe:[inode]``...)."""
    targets = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            targets[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return targets


def assert_nothing_left(before: set[int]) -> None:
    deadline = time.monotonic() + 5
    while (descendants() - before or sandbox_uid_processes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert descendants() - before == set()
    assert sandbox_uid_processes() == []


# --- state ---------------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_variables_persist_within_a_session_and_not_across_sessions(level, work_root):
    tool = make(level, work_root)
    first = run_session(tool, "x = 41\nimport math", "print('x is', x)\nx + 1", "math.sqrt(16)")
    assert first == ["(no output)", "x is 41\n42", "4.0"]
    second = run_session(tool, "x")
    assert "NameError: name 'x' is not defined" in second[0]
    assert tool.open_sessions == 0


def test_the_tool_states_its_isolation_at_start_up(work_root, caplog):
    with caplog.at_level(logging.INFO, logger="agentrl.tools.sandbox.tool"):
        tool = PythonSandboxTool(work_root=work_root, python=python_for(LEVELS[0]))
    assert tool.isolation == LEVELS[0]  # the strongest this machine has
    assert f"isolation={tool.isolation}" in caplog.text and "at most 16 interpreters" in caplog.text


def test_isolation_none_is_refused_unless_allow_unisolated_is_set(work_root):
    with pytest.raises(SandboxUnavailable, match="allow_unisolated=True"):
        PythonSandboxTool(isolation="none", work_root=work_root)
    tool = make("none", work_root, allow_unisolated=True)
    assert tool.isolation == "none"
    assert run_session(tool, "6 * 7") == ["42"]


def test_an_isolation_level_this_machine_lacks_is_refused_by_name(work_root, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # injected fault: neither launcher can be found
    monkeypatch.setattr(sandbox_module, "_probed", {})
    for level, launcher in (("bwrap", "bwrap"), ("unshare", "unshare")):
        with pytest.raises(
            SandboxUnavailable, match=f"isolation='{level}' is not available: {launcher} is not"
        ):
            PythonSandboxTool(isolation=level, work_root=work_root)
    assert make("audit", work_root).isolation == "audit"


def test_code_the_tags_format_stripped_of_its_first_indent_or_fenced_in_markdown_still_parses():
    assert normalise_code("x = 1\n    y = 2") == "x = 1\ny = 2"
    assert normalise_code("if x:\n    y = 1") == "if x:\n    y = 1"  # valid as written: untouched
    assert normalise_code("```python\nprint(1)\n```") == "print(1)"
    assert normalise_code("def f(:\n  pass") == "def f(:\n  pass"  # the interpreter reports it


# --- limits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_an_endless_loop_is_stopped_at_the_wall_time_and_the_next_call_starts_afresh(level, work_root):
    before = descendants()
    tool = make(level, work_root, wall_time_s=1.0)
    start = time.monotonic()
    results = run_results(tool, "x = 1\nwhile True: pass", "print('alive')\n'x' in globals()")
    assert time.monotonic() - start < 8
    looped, after = (r.text for r in results)
    assert results[0].metrics == {
        "python/errors": 1,
        "python/timeouts": 1,
        "python/output_cut": 0,
        "python/restarts": 0,
    }
    assert results[1].metrics == {
        "python/errors": 0,
        "python/timeouts": 0,
        "python/output_cut": 0,
        "python/restarts": 1,
    }
    assert looped.startswith("Error: the interpreter ran past the wall-time limit of 1 s, so it was stopped")
    assert after.startswith("[A new Python interpreter was started: the previous one ran past the wall-time")
    assert after.endswith("alive\nFalse")
    assert_nothing_left(before)


@pytest.mark.parametrize("level", LEVELS)
def test_a_call_past_its_cpu_time_raises_in_the_code_and_the_session_lives_on(level, work_root):
    tool = make(level, work_root, cpu_time_s=1.0, wall_time_s=30.0)
    spun, after = run_session(tool, "x = 5\nwhile True: pass", "x")
    assert "CPUTimeExceeded: the call used its CPU time limit of 1 s" in spun
    assert after == "5"  # same interpreter, same variables


@pytest.mark.parametrize("level", LEVELS)
def test_a_fork_bomb_stops_at_the_process_limit_and_leaves_nothing_behind(level, work_root):
    before = descendants()
    tool = make(level, work_root, processes=8, wall_time_s=2.0)
    counted = (
        "import os, time\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError as e:\n"
        "        print('fork refused after', n, type(e).__name__); break\n"
        "    if pid == 0:\n        time.sleep(30); os._exit(0)\n    n += 1"
    )
    bomb = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"
    counted_text, bomb_text, after = run_session(tool, counted, bomb, "print('alive')")
    if level == "audit":  # the guard refuses fork itself
        assert counted_text == "fork refused after 0 PermissionError"
        assert bomb_text.startswith("Error: the interpreter ran past the wall-time limit of 2 s")
    else:
        forks = int(counted_text.split("fork refused after ")[1].split()[0])
        assert 1 <= forks <= 8 - 1  # the interpreter counts too (and under unshare its reaper)
        assert bomb_text.startswith("Error: the interpreter ran past the wall-time limit of 2 s")
        assert after.endswith("alive")
    assert_nothing_left(before)


@pytest.mark.parametrize("level", LEVELS)
def test_a_memory_bomb_raises_memory_error_and_the_session_lives_on(level, work_root):
    tool = make(level, work_root, memory_mb=256)
    at_once, growing, after = run_session(
        tool,
        "x = 1\nhuge = bytearray(4 * 1024**3)",
        "blocks = []\nwhile True: blocks.append(bytearray(10**7))",
        "del blocks\nx",
    )
    assert at_once.rstrip().endswith("MemoryError")
    assert growing.rstrip().endswith("MemoryError")
    assert after == "1"


@pytest.mark.parametrize("level", LEVELS)
def test_a_gigabyte_of_output_is_cut_and_the_cut_is_said(level, work_root):
    tool = make(level, work_root, max_output_bytes=1000, file_size_mb=8)
    codes = ["import sys\nfor _ in range(1024): sys.stdout.write('y' * 2**20)\n'done'"]
    if level != "audit":  # a subprocess writes straight to the descriptor, past Python
        codes.append("import os\nos.system('head -c 1073741824 /dev/zero | tr \"\\\\0\" z')")
    texts = run_session(tool, *codes)
    assert (
        texts[0]
        == "y" * 1000 + "\n[output cut: 1,073,741,824 bytes were written; the first 1,000 are shown]\n'done'"
    )
    if level != "audit":
        assert texts[1].startswith("z" * 1000 + "\n[output cut: 8,388,608 bytes were written")  # file_size_mb


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
def test_the_working_directory_holds_at_most_workdir_mb(level, work_root):
    tool = make(level, work_root, workdir_mb=4)
    first, second = run_session(
        tool,
        "open('a', 'wb').write(bytes(3 << 20))",
        "try:\n    open('b', 'wb').write(bytes(3 << 20))\nexcept OSError as e:\n    print(e.strerror)",
    )
    assert (first, second) == (str(3 << 20), "No space left on device")


# --- no way out ------------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_a_socket_cannot_reach_a_port_listening_on_the_hosts_loopback(level, work_root):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        tool = make(level, work_root)
        (text,) = run_session(
            tool,
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('CONNECTED')\n"
            "except OSError as e:\n    print('no connection:', type(e).__name__, e)",
        )
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing ever arrived
    finally:
        listener.close()
    assert "CONNECTED" not in text and text.startswith("no connection:")


@pytest.mark.parametrize("level", LEVELS)
def test_a_write_outside_the_working_directory_fails_and_reaches_nothing_on_the_host(level, work_root):
    name = f"escape-{os.getpid()}-{level}"
    targets = [
        f"/tmp/{name}",
        f"/var/tmp/{name}",
        f"/dev/shm/{name}",
        f"{work_root}/{name}",
        f"{REPO}/{name}",
    ]
    code = (
        f"import os\nfor path in {targets!r} + ['inside.txt']:\n    try:\n"
        "        with open(path, 'w') as f: f.write('x')\n        print('wrote', path)\n"
        "    except OSError as e:\n        print('refused', path, type(e).__name__)"
    )
    (text,) = run_session(make(level, work_root), code)
    for target in targets:
        assert f"refused {target}" in text
        assert not os.path.exists(target)
    assert text.endswith("wrote inside.txt")


@pytest.mark.parametrize("level", LEVELS)
def test_a_session_cannot_read_or_list_another_sessions_files(level, work_root):
    tool = make(level, work_root)

    async def go() -> tuple[str, str]:
        owner, other = await tool.open_session(), await tool.open_session()
        try:
            where = await owner.call(
                {"code": "open('secret.txt', 'w').write('SECRET-42')\nimport os\nos.getcwd()"}
            )
            path = os.path.join(eval(where.text), "secret.txt")  # noqa: S307 (a repr of a str we made)
            if level == "audit":  # on the host's disk; at the namespace levels, a tmpfs of the sandbox
                assert Path(path).read_text() == "SECRET-42"
            probes = f"""
                import os
                for probe in (lambda: open({path!r}).read(), lambda: os.listdir({work_root!r})):
                    try:
                        print(probe())
                    except OSError as e:
                        print('refused', type(e).__name__)
            """
            seen = await other.call({"code": textwrap.dedent(probes)})
            return seen.text, os.path.basename(os.path.dirname(path))
        finally:
            await owner.close()
            await other.close()

    seen, owners_dir = asyncio.run(go())
    assert "SECRET-42" not in seen and owners_dir not in seen
    assert seen.splitlines()[0] == "refused PermissionError" or "FileNotFoundError" in seen.splitlines()[0]


@pytest.mark.parametrize("level", LEVELS)
def test_killing_the_parent_process_or_the_host_leaves_both_alive(level, work_root):
    host = os.getpid()
    before = descendants()
    code = f"""
        import os, signal
        for pid in (os.getppid(), {host}):
            try:
                os.kill(pid, signal.SIGKILL)
                print('signalled', pid)
            except OSError as e:
                print('refused', pid, type(e).__name__)
    """
    codes = [textwrap.dedent(code), "print('alive')"]
    if level != "audit":
        codes.append(f"import os\nos.system('kill -9 {host} 1 2>&1; echo status $?')")
    texts = run_session(make(level, work_root), *codes)
    assert os.getpid() == host  # we are here to check
    assert f"refused {host}" in texts[0]  # the host is out of reach (another PID namespace, or another uid)
    assert texts[1] == "alive"  # a parent inside the sandbox ignores the signal; outside, it is refused
    if level != "audit":
        assert "status 1" in texts[2]
    assert_nothing_left(before)


HOST_SCRIPT = """
import asyncio, json, sys
from agentrl.tools.sandbox.tool import PythonSandboxTool

async def main():
    sessions = []
    for level, python in json.loads(sys.argv[1]):
        tool = PythonSandboxTool(isolation=level, python=python, work_root=sys.argv[2])
        sessions.append(await tool.open_session())
    for session in sessions:
        await session.call({"code": "1"})
    print("started", flush=True)
    await asyncio.gather(*(session.call({"code": "while True: pass"}) for session in sessions))

asyncio.run(main())
"""


def test_a_host_killed_mid_call_takes_its_sandboxes_along_at_every_level(work_root):
    levels = [(level, python_for(level)) for level in LEVELS]
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT, json.dumps(levels), work_root],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout.readline().strip() == "started"  # type: ignore[union-attr]
        time.sleep(0.3)  # into the endless loops
        assert len(sandbox_uid_processes()) >= len(levels) or not AS_ROOT
    finally:
        host.kill()
        host.wait()
        host.stdout.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 5
    while sandbox_uid_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_uid_processes() == []  # the parent-death signals ended every sandbox
    # The audit level's working directory is on the host's disk (the namespace levels' is a
    # tmpfs, gone with them): left by the dead host until the next tool on this work_root.
    assert len(os.listdir(work_root)) == 1
    make("audit", work_root)
    assert os.listdir(work_root) == []


# --- the pool, closing, the formats ------------------------------------------------------------


def test_the_pool_runs_at_most_max_interpreters_and_the_next_session_waits_its_turn(work_root):
    tool = make(LEVELS[0], work_root, max_interpreters=1, queue_timeout_s=10.0)

    async def go() -> tuple[bool, str]:
        first, second = await tool.open_session(), await tool.open_session()
        await first.call({"code": "1"})  # holds the one interpreter
        waiting = asyncio.ensure_future(second.call({"code": "'second ran'"}))
        await asyncio.sleep(1.0)
        waited = not waiting.done()
        await first.close()
        text = (await asyncio.wait_for(waiting, 10)).text
        await second.close()
        return waited, text

    assert asyncio.run(go()) == (True, "'second ran'")
    impatient = make(LEVELS[0], work_root, max_interpreters=1, queue_timeout_s=0.3)

    async def full() -> None:
        first, second = await impatient.open_session(), await impatient.open_session()
        try:
            await first.call({"code": "1"})
            with pytest.raises(
                ToolError, match=r"no Python interpreter became free within 0.3 s \(max_interpreters=1"
            ):
                await second.call({"code": "2"})
        finally:
            await first.close()
            await second.close()

    asyncio.run(full())


def test_closing_a_session_during_a_call_ends_its_interpreter_at_once(work_root):
    before = descendants()
    tool = make(LEVELS[0], work_root, wall_time_s=60.0)

    async def go() -> tuple[str, float]:
        session = await tool.open_session()
        call = asyncio.ensure_future(session.call({"code": "while True: pass"}))
        await asyncio.sleep(0.5)
        start = time.monotonic()
        await session.close()
        result = await asyncio.wait_for(call, 10)
        return result.text, time.monotonic() - start

    text, took = asyncio.run(go())
    assert took < 5 and text.startswith("Error: the interpreter was killed by SIGKILL")
    assert_nothing_left(before)


def test_the_python_tool_is_built_by_config_and_called_by_tags_and_by_hermes_json(work_root, tokenizer):
    from agentrl.agent.formats import HERMES_TEMPLATE, HermesFormat, ParsedCall, TagsFormat

    tool = build_tool(
        {
            "class_path": "agentrl.tools.sandbox.PythonSandboxTool",
            "options": {"isolation": LEVELS[0], "python": python_for(LEVELS[0]), "work_root": work_root},
        }
    )
    assert as_typed(tool).stateful and as_typed(tool).tag == "python"
    tags = TagsFormat(tokenizer, [tool.spec])
    hermes = HermesFormat(tokenizer, [tool.spec], template=HERMES_TEMPLATE)
    (by_tag,) = tags.parse("<python>\n    x = 6 * 7\n    print(x)\n</python>", "stop", False).calls
    (by_json,) = hermes.parse(
        '<tool_call>\n{"name": "python", "arguments": {"code": "x + 1"}}\n</tool_call>', "stop", False
    ).calls
    assert by_tag == ParsedCall("python", {"code": "x = 6 * 7\n    print(x)"})
    assert by_json == ParsedCall("python", {"code": "x + 1"})
    dispatcher = ToolDispatcher([tool], "observe")

    async def rollout() -> list[str]:
        async with dispatcher.trajectory("t0"):
            first = await dispatcher.call("t0", by_tag.name, by_tag.arguments)
            second = await dispatcher.call("t0", by_json.name, by_json.arguments)
        return [first.result.text, second.result.text]

    assert asyncio.run(rollout()) == ["42", "43"]  # one interpreter for the trajectory, in both formats
    assert tool.open_sessions == 0


def test_a_thousand_calls_at_concurrency_sixteen_leave_no_process_directory_descriptor_key_or_zombie(
    work_root, monkeypatch
):
    tool = make(LEVELS[0], work_root, max_interpreters=16)
    pipes: set[str] = set()  # "pipe:[inode]" of every interpreter's stdin, stdout and stderr
    spawn = process_module._spawn

    def recording_spawn(launch):
        proc = spawn(launch)
        pipes.update(f"pipe:[{os.fstat(s.fileno()).st_ino}]" for s in (proc.stdin, proc.stdout, proc.stderr))
        return proc

    monkeypatch.setattr(process_module, "_spawn", recording_spawn)
    sessions, calls_per_session, workers = 40, 25, 16  # 1,000 calls, 40 interpreters, 16 at once
    queue = list(range(sessions))

    async def worker(results: list[tuple[str, str]]) -> None:
        while queue:
            index = queue.pop()
            session = await tool.open_session()
            try:
                for i in range(calls_per_session):  # n carries over from call to call
                    result = await session.call({"code": f"n = 0 if {i} == 0 else n + 1\nn * {index}"})
                    results.append((result.text, str(i * index)))
            finally:
                await session.close()

    async def go() -> list[tuple[str, str]]:
        results: list[tuple[str, str]] = []
        await asyncio.gather(*(worker(results) for _ in range(workers)))
        return results

    assert run_session(tool, "1") == ["1"]  # warm: imports and the first start are not leaks
    processes, threads, keys = descendants(), threading.active_count(), sandbox_key_counts()
    results = asyncio.run(go())
    assert len(results) == 1000
    assert all(got == expected for got, expected in results)
    assert_nothing_left(processes)
    assert os.listdir(work_root) == []
    # no descriptor the sandbox opened is left: its pipes (by inode) and its uid lock files. The
    # whole table is not compared: other tests' threads share this process and open and close
    # descriptors of their own meanwhile (a CI run saw one appear, another saw one close)
    assert len(pipes) == 3 * (sessions + 1)  # the warm session's interpreter too
    lock_dir = os.path.realpath(tool.pool.lock_dir)
    left = {fd: t for fd, t in open_descriptors().items() if t in pipes or t.startswith(lock_dir + os.sep)}
    assert left == {}
    assert zombies_of_sandbox_uids() == [], "every process a session started was reaped"
    assert sandbox_key_counts() == keys, "no sandbox uid was given a key or keyring by the kernel"
    if tool.cgroups is not None:  # and every session's memory cgroup removed
        mine = f"agentrl-python-{os.getpid()}-"
        assert [e for e in os.listdir(tool.cgroups.parent) if e.startswith(mine)] == []
    deadline = time.monotonic() + 5
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads
