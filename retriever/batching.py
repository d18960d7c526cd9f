"""Coalescing concurrent retrieval queries into batched backend searches, with an LRU cache.

The HTTP service (``retriever.server``) puts each request's queries on a :class:`MicroBatcher`;
one batcher task drains the queue into a micro-batch and runs one batched search in a worker
thread, so the event loop never blocks and encoding/index search run at batch cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from retriever.base import Hit

__all__ = ["BatchStats", "LRUCache", "MicroBatcher", "QueueFullError"]

log = logging.getLogger("retriever.server")


class LRUCache:
    """A small LRU map (query, topk) -> hits; only touched from the event loop thread."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[tuple[str, int], list[Hit]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, int]) -> list[Hit] | None:
        if self.capacity == 0:
            return None
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: tuple[str, int], value: list[Hit]) -> None:
        if self.capacity == 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class QueueFullError(RuntimeError):
    """Raised by :meth:`MicroBatcher.submit` when accepting the work would exceed ``max_pending``."""


@dataclass
class _Job:
    queries: list[str]
    k: int
    future: asyncio.Future


@dataclass
class BatchStats:
    batches: int = 0
    queries: int = 0
    max_size: int = 0
    errors: int = 0
    last_sizes: deque = field(default_factory=lambda: deque(maxlen=100))

    def as_dict(self) -> dict:
        recent = list(self.last_sizes)
        return {
            "batches": self.batches,
            "queries": self.queries,
            "max_size": self.max_size,
            "errors": self.errors,
            "mean_recent_size": round(sum(recent) / len(recent), 2) if recent else 0.0,
        }


class MicroBatcher:
    """Coalesces queued queries into batched backend calls run in a single worker thread
    (or, with ``inline``, on the event loop itself: for backends cheaper than the hop).

    Adaptive wait: the batcher estimates the client concurrency as the peak number of pending
    queries over the last few batch cycles.  Without this, 64 clients split into cohorts that
    stay out of phase forever (each batch holds only those who returned during the previous
    one) and batches stay small.  When fewer queries are queued than that estimate, the
    just-answered clients are about to send more, so wait for the batch to fill -- up to
    ``wait_s``, or 25% of the previous batch's search time if that is longer (capped at 100 ms);
    a lone client never waits.
    """

    def __init__(
        self,
        search: Callable[[list[str], int], list[list[Hit]]],
        max_batch: int,
        wait_s: float,
        max_pending: int,
        executor: ThreadPoolExecutor,
        inline: bool = False,
    ) -> None:
        self._search = search
        self._inline = inline  # search on the event loop: the backend says it is cheap (base.py)
        self._max_batch = max_batch
        self._wait_s = wait_s
        self._max_pending = max_pending
        self._executor = executor
        self._jobs: deque[_Job] = deque()
        self._wakeup = asyncio.Event()
        self.pending = 0  # queries queued or being searched
        self.stats = BatchStats()
        self._last_batch_s = 0.0
        # Concurrency estimate: peak pending queries per batch cycle over the last few cycles.
        self._peak = 0
        self._recent_peaks: deque[int] = deque(maxlen=8)

    def submit(self, queries: list[str], k: int) -> asyncio.Future:
        if self.pending + len(queries) > self._max_pending:
            raise QueueFullError(f"{self.pending} queries pending, limit {self._max_pending}")
        fut = asyncio.get_running_loop().create_future()
        self._jobs.append(_Job(queries, k, fut))
        self.pending += len(queries)
        self._peak = max(self._peak, self.pending)
        self._wakeup.set()
        return fut

    async def _next_batch(self) -> list[_Job]:
        while not self._jobs:
            self._wakeup.clear()
            await self._wakeup.wait()
        loop = asyncio.get_running_loop()
        # Waiting costs at most ~25% of what a batch costs: slow backends (dense on CPU) wait longer,
        # long enough for just-answered clients to send their next query.
        wait = min(max(self._wait_s, 0.25 * self._last_batch_s), 0.1)
        deadline = loop.time() + wait
        target = min(self._max_batch, max(self._recent_peaks, default=1))
        while sum(len(j.queries) for j in self._jobs) < target and loop.time() < deadline:
            self._wakeup.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), deadline - loop.time())
        batch, size = [], 0
        while self._jobs and (not batch or size + len(self._jobs[0].queries) <= self._max_batch):
            job = self._jobs.popleft()
            batch.append(job)
            size += len(job.queries)
        return batch

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            unique = list(dict.fromkeys(q for job in batch for q in job.queries))  # dedupe within the batch
            k = max(job.k for job in batch)
            n = sum(len(job.queries) for job in batch)
            self._recent_peaks.append(self._peak)
            self._peak = self.pending
            t0 = loop.time()
            try:
                if self._inline:
                    results = self._search(unique, k)
                else:
                    results = await loop.run_in_executor(self._executor, self._search, unique, k)
                self._last_batch_s = loop.time() - t0
                by_query = dict(zip(unique, results, strict=True))
                for job in batch:
                    if not job.future.done():
                        job.future.set_result([by_query[q][: job.k] for q in job.queries])
            except Exception as exc:  # a backend failure fails this batch, not the server
                self.stats.errors += 1
                log.exception("backend search failed for a batch of %d queries", len(unique))
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(exc)
            finally:
                self.pending -= n
                self.stats.batches += 1
                self.stats.queries += len(unique)
                self.stats.max_size = max(self.stats.max_size, len(unique))
                self.stats.last_sizes.append(len(unique))

    def fail_all(self, exc: BaseException) -> None:
        while self._jobs:
            job = self._jobs.popleft()
            self.pending -= len(job.queries)
            if not job.future.done():
                job.future.set_exception(exc)
