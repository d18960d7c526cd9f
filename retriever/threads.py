"""The server's own thread policy: compute pools that sleep between requests, sized to its share of the cores.

A retriever serves intermittent work: one query, then a wait for the next request. OpenMP's
worker threads (torch's intra-op pool, faiss) spin for a while after every parallel region by
default, so a server answering one client at a time burns a core between requests, and the
spinning threads compete with the event loop that should be answering the next one. ONNX
Runtime's pool is told not to spin where its session is made (``onnx_encoder.py``).

The policy has to be in the environment before torch or faiss is first imported (OpenMP reads it
when the library loads), so ``retriever.server`` applies it first thing, before it loads a
backend or forks workers. A variable the user set explicitly is left as it is.
"""

from __future__ import annotations

import os
import sys

# Sleep, do not spin, when a parallel region ends: GNU OpenMP (torch and faiss wheels) and
# Intel's (MKL builds of torch) each read their own variable.
QUIET_POOLS = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def apply_thread_policy(threads: int | None = None) -> dict[str, str]:
    """Set the quiet-pool policy, and ``threads`` OpenMP threads when given, in this process's
    environment; returns the values in force. Refused once torch or faiss is loaded: too late."""
    late = [name for name in ("torch", "faiss") if name in sys.modules]
    if late:
        raise RuntimeError(
            f"apply_thread_policy: {', '.join(late)} already imported; OpenMP read its settings then"
        )
    wanted = dict(QUIET_POOLS)
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads: expected >= 1, got {threads}")
        wanted["OMP_NUM_THREADS"] = str(threads)
    for name, value in wanted.items():
        os.environ.setdefault(name, value)
    return {name: os.environ[name] for name in wanted}
