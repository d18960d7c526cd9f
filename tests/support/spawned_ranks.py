"""Run one function per rank in spawned processes and collect what each put on the queue.

Standard library only, so that a spawned child imports no more than its target's own module.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import Any


def spawn_ranks(target: Callable[..., None], args_per_rank: list[tuple]) -> list[Any]:
    """``target(*args_per_rank[r], queue)`` in a process per rank r; each puts ``(rank, result)``.
    Returns the results in rank order, after every process exited cleanly."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=target, args=(*args, queue)) for args in args_per_rank]
    for process in processes:
        process.start()
    results = dict(queue.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0, f"rank process exited with {process.exitcode}"
    return [results[rank] for rank in range(len(processes))]
