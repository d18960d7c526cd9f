"""Run the retriever server as a child process: start it, wait until it serves, stop it.

The quickstart, the trainer tests and anything else that needs a live ``/retrieve``
endpoint for the length of one job use this instead of each writing its own
``Popen`` + health-poll + SIGTERM loop::

    with RetrieverProcess("runs/idx", log_path="runs/retriever.log") as server:
        url = server.retrieve_url          # http://127.0.0.1:PORT/retrieve

Readiness is the server's own ``GET /health`` reporting ``"ready": true`` (the index is
loaded), not merely an open port. If the server dies while starting, the error carries
the tail of its log, so a bad index path is reported as such and not as a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from agentrl.ports import free_port

__all__ = ["RetrieverProcess", "RetrieverStartError"]


class RetrieverStartError(RuntimeError):
    """The server exited or did not become ready in time (message has its log tail)."""


def die_with_parent() -> None:
    """In a child (before exec, or a forked worker): ask Linux to SIGTERM it when its parent
    dies, so a killed job (SIGKILL, OOM) cannot leave an orphaned server holding its port.
    No-op elsewhere."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


class RetrieverProcess:
    """A ``python -m retriever.server`` subprocess on ``host:port``.

    Args:
        index_dir: an index built by ``python -m retriever.build_index``.
        port: the port to listen on; ``None`` picks a free one.
        log_path: where the server's stdout/stderr go; ``None`` discards them (then a
            start failure cannot show the server's own message, so pass one).
        extra_args: more server flags, e.g. ``("--max-topk", "50")``.
        access_log: the server's ``--access-log`` value (``"off"`` keeps long runs quiet).
        ready_timeout_s: how long ``start`` waits for ``/health`` to say ready.
    """

    def __init__(
        self,
        index_dir: str | Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: str | Path | None = None,
        extra_args: Sequence[str] = (),
        access_log: str = "off",
        ready_timeout_s: float = 120.0,
    ) -> None:
        self.index_dir = Path(index_dir)
        if not self.index_dir.is_dir():
            raise FileNotFoundError(
                f"index_dir: {str(self.index_dir)!r} is not a directory (build it with retriever.build_index)"
            )
        if ready_timeout_s <= 0:
            raise ValueError(f"ready_timeout_s must be > 0, got {ready_timeout_s}")
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.log_path = Path(log_path) if log_path is not None else None
        self.extra_args = tuple(extra_args)
        self.access_log = access_log
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's base URL (no path)."""
        return f"http://{self.host}:{self.port}"

    @property
    def retrieve_url(self) -> str:
        """The endpoint a ``SearchTool`` is configured with."""
        return self.url + "/retrieve"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "retriever.server",
            "--index",
            str(self.index_dir),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--access-log",
            self.access_log,
            *self.extra_args,
        ]

    def start(self, wait: bool = True) -> RetrieverProcess:
        """Launch the server; with ``wait`` (default) return only once it is ready."""
        if self.running:
            raise RuntimeError(f"retriever server already running (pid {self.proc.pid})")  # type: ignore[union-attr]
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("ab")
        out = self._log if self._log is not None else subprocess.DEVNULL
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        # The server module must resolve from the same checkout as this one, also when the
        # caller's working directory is elsewhere.
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            self.command(), stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent
        )
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                self.stop(signal.SIGKILL)
                raise
        return self

    def _log_tail(self, chars: int = 2000) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return "(no log: pass log_path to see the server's output)"
        return self.log_path.read_text(errors="replace")[-chars:]

    def health(self, timeout: float = 1.0) -> dict | None:
        """The ``/health`` body, or None when the server does not answer."""
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as error:  # 503 while loading still has a JSON body
            try:
                return json.loads(error.read())
            except ValueError:
                return None
        except (OSError, ValueError):
            return None

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll ``/health`` until ready; raise ``RetrieverStartError`` if it exits or times out."""
        if self.proc is None:
            raise RuntimeError("wait_ready called before start")
        timeout = self.ready_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RetrieverStartError(
                    f"retriever server exited with code {self.proc.returncode} while starting:\n"
                    f"{self._log_tail()}"
                )
            body = self.health()
            if body is not None and body.get("ready"):
                return
            time.sleep(0.1)
        raise RetrieverStartError(f"retriever server not ready after {timeout:.0f} s:\n{self._log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Signal the server (SIGTERM: graceful drain) and wait; kill it if it lingers.

        Returns its exit code (None if it was never started). Safe to call twice.
        """
        try:
            if self.proc is None:
                return None
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            return self.proc.returncode
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def __enter__(self) -> RetrieverProcess:
        return self if self.running else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
