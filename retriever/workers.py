"""Serving one port from several server processes: fork them, share the port, stop them together.

One server process answers on one event-loop thread and runs its searches on one more, so BM25,
whose search costs less than the HTTP around it, is capped near one core, and a dense server's
encoder shares the GIL with the loop. ``--workers N`` forks N server processes before any of
them loads its backend; each binds the same port with ``SO_REUSEPORT`` (the kernel spreads
connections over them) and opens the index itself: the dense FAISS file and the document store
are memory-mapped, so their pages are shared through the page cache, not copied.

The parent only supervises: it passes SIGTERM/SIGINT on to every worker, and when a worker
exits on its own (its index failed to load, it crashed) it stops the others and exits non-zero,
so a launcher sees one process that serves or fails, as with one worker. ``/health`` answers
``ready`` only once every worker has loaded its backend, so a client that waited for it never
meets a worker still loading.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retriever.process import die_with_parent

# ``--workers auto`` stops here on a large machine: each dense worker holds its own query encoder
# and interpreter (~175 MB PSS measured with MiniLM int8), and the retriever usually shares the
# machine with a trainer. Measured only up to 2 cores (docs/retrieval.md, "The defaults at one
# client and across cores").
MAX_AUTO_WORKERS = 8


def auto_workers(cores: int, port: int) -> int:
    """The worker count ``--workers auto`` stands for: one per core this server may run on, at most
    ``MAX_AUTO_WORKERS``, and one when ``port`` is 0 (workers share a port known in advance)."""
    if cores < 1:
        raise ValueError(f"cores: expected >= 1, got {cores}")
    return 1 if port == 0 else min(cores, MAX_AUTO_WORKERS)


@dataclass
class WorkerSlot:
    """One worker's place among its peers, and the count of peers that have loaded (shared memory)."""

    index: int
    count: int
    _loaded: Any  # multiprocessing.Value("i"): workers whose backend is loaded

    def mark_loaded(self) -> None:
        with self._loaded.get_lock():
            self._loaded.value += 1

    @property
    def loaded(self) -> int:
        return int(self._loaded.value)

    def all_loaded(self) -> bool:
        return self.loaded >= self.count

    def summary(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count, "pid": os.getpid(), "loaded": self.loaded}


def run_workers(count: int, serve_one: Callable[[WorkerSlot], int]) -> int:
    """Fork ``count`` workers running ``serve_one(slot)`` (its return value is the worker's exit
    code) and supervise them until all have exited; returns the server's exit code: 0 when a
    signal stopped it and every worker drained cleanly, else the first non-zero worker code."""
    if count < 2:
        raise ValueError(f"workers: run_workers needs >= 2, got {count} (one worker runs in-process)")
    loaded = multiprocessing.get_context("fork").Value("i", 0)
    pids: list[int] = []
    for index in range(count):
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the supervisor's code
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                die_with_parent()
                code = serve_one(WorkerSlot(index, count, loaded))
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    return _supervise(pids)


def _supervise(pids: list[int]) -> int:
    running = set(pids)
    stopping = False
    first_failure = 0

    def stop_all(signum: int, frame: object = None) -> None:
        nonlocal stopping
        stopping = True
        for pid in running:
            with contextlib.suppress(ProcessLookupError):  # exited, not yet reaped
                os.kill(pid, signum)

    previous = {sig: signal.signal(sig, stop_all) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while running:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if pid not in running:
                continue
            running.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            if code != 0 and not first_failure:
                first_failure = code if code > 0 else 1  # killed by a signal: -N
            if not stopping:  # a worker ended by itself: the server cannot serve as asked
                first_failure = first_failure or 1
                stop_all(signal.SIGTERM)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return first_failure
