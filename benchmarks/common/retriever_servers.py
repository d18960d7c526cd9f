"""Retriever server subprocesses for benchmarks: a working tree's or a git ref's, and their CPU time.

``checkout_ref`` extracts a commit (``git archive``) into a temporary directory so a benchmark
can start *that* commit's ``python -m retriever.server`` beside the working tree's, with the
same interpreter and index: both servers are then measured in one run, on the same machine
state. ``cpu_s`` reads a process's user + system CPU seconds from ``/proc`` (Linux), so a
benchmark can report what the server itself spends per request, apart from the load generator
sharing its cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from agentrl.ports import free_port
from benchmarks.common.paths import REPO


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) that process ``pid`` (None: this one) used so far,
    with every live descendant's (a server's ``--workers``)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    total = 0.0
    for proc in [pid, *_descendants(pid)]:
        try:
            fields = Path(f"/proc/{proc}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # exited between the listing and the read
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _descendants(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(FileNotFoundError):
            children += [int(c) for c in (task / "children").read_text().split()]
    return [grand for child in children for grand in [child, *_descendants(child)]]


@contextlib.contextmanager
def checkout_ref(ref: str, repo: Path = REPO) -> Iterator[Path]:
    """The tree of commit ``ref`` in a temporary directory (removed on exit).

    ``git archive`` rather than ``git worktree add``: it leaves the repository's own state
    (worktree list, index, HEAD) untouched, which matters in a tree others work in.
    """
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"--baseline-ref: {ref!r} is not a commit here ({exc.stderr.strip()})") from None
    with tempfile.TemporaryDirectory(prefix=f"retriever-{sha[:7]}-") as tmp:
        archive = subprocess.Popen(["git", "archive", sha], cwd=repo, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", tmp], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"--baseline-ref: git archive {sha} failed")
        _check_imports_from(Path(tmp))
        yield Path(tmp)


def env_for(root: Path) -> dict[str, str]:
    """Environment whose ``import retriever`` resolves inside ``root`` (ahead of the editable install)."""
    env = dict(os.environ)
    if root != REPO:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _check_imports_from(root: Path) -> None:
    """Fail loudly if the interpreter would import ``retriever`` from elsewhere than ``root``."""
    found = subprocess.run(
        [sys.executable, "-c", "import retriever; print(retriever.__file__)"],
        cwd=root,
        env=env_for(root),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"baseline checkout {root} imports retriever from {found}, not from itself")


def start_server(
    index: Path,
    backend: str,
    extra_args: Sequence[str] = (),
    root: Path = REPO,
    cores: set[int] | None = None,
    module: str = "retriever.server",
) -> tuple[subprocess.Popen, str]:
    """``root``'s ``python -m MODULE`` (the retriever server, or a stand-in speaking its API) on a
    free port, cache and access log off, pinned to ``cores`` when given; ready."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        module,
        "--index",
        str(Path(index).resolve()),
        "--backend",
        backend,
        "--port",
        str(port),
        "--cache-size",
        "0",
        "--access-log",
        "off",
        *extra_args,
    ]
    with tempfile.TemporaryFile() as log:  # the server's own messages, shown if it fails to start
        pin = None if cores is None else (lambda: os.sched_setaffinity(0, cores))
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env_for(root), preexec_fn=pin
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300  # a first ONNX export can take a minute
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if json.loads(r.read())["ready"]:
                        return proc, url  # the child keeps its own descriptor of the log
            except OSError:
                time.sleep(0.2)
        proc.kill()
        log.seek(0)
        tail = log.read().decode(errors="replace")[-2000:]
    raise RuntimeError(f"server from {root} ({' '.join(cmd[3:])}) did not become ready:\n{tail}")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=10) as resp:
        return json.loads(resp.read())
