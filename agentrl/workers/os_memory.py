"""The worker process's memory as the OS sees it: the heap's free memory handed back, and read.

``release_free_heap`` runs after every update (``TrainableWorker.train_epochs``), so the rollout
that follows does not carry the update's peak; ``process_memory_gib`` gives the figures the
update reports (``<role>/rss_gib``, ``<role>/peak_rss_gib``, ``<role>/cuda_peak_allocated_gib``).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from pathlib import Path

import torch

__all__ = ["process_memory_gib", "release_free_heap"]

_LIBC: ctypes.CDLL | None = None


def release_free_heap() -> bool:
    """Hand the C heap's free memory back to the OS (glibc ``malloc_trim``); False where the C
    library has no such call (then nothing happens).

    A CPU update frees gigabytes of activations of many sizes, and glibc keeps freed blocks in its
    heap: without a trim the process holds its update peak through the rollout that follows, and
    the heap fragments further with every step's new shapes (``benchmarks/heap_trim.py``)."""
    global _LIBC
    if not sys.platform.startswith("linux"):
        return False
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None)  # the C library the interpreter already uses
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is None:  # musl and others
        return False
    trim(0)
    return True


def process_memory_gib() -> dict[str, float]:
    """This process's memory after an update, in GiB: ``rss`` now and ``peak_rss`` since it
    started (host memory; a worker that hosts its rollout engine counts the engine too), and on
    CUDA the peak allocated by torch. A growing ``rss`` over steps is how a leak or allocator
    fragmentation shows before the node runs out of memory."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    memory = {"peak_rss_gib": peak / (2**30 if sys.platform == "darwin" else 2**20)}
    statm = Path("/proc/self/statm")  # Linux: pages of resident memory, the second field
    if statm.exists():
        memory["rss_gib"] = int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
        # the kernel updates the high-water mark lazily: it can trail the current value
        memory["peak_rss_gib"] = max(memory["peak_rss_gib"], memory["rss_gib"])
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        memory["cuda_peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return memory
