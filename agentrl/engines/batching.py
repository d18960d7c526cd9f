"""Request coalescing shared by every engine.

Multi-turn rollouts run one coroutine per trajectory: each awaits ``generate`` for its
next turn, then awaits the retriever. Running those calls one by one would waste the
batch dimension, so ``BatchingEngine`` puts them on an asyncio queue; a single worker
task takes everything pending (up to ``max_batch_size``, grouped by identical
``SamplingParams``), runs one batched generation in a worker thread -- the event loop
stays free for retrieval I/O meanwhile -- and resolves each caller's future.

Subclasses implement only ``_generate_rows``: a synchronous batched generation over
prompts that share one ``SamplingParams``, with one seed per row (``requests.py``).
Requests are coalesced by their sampling parameters *without* the seed, so seeded
concurrent requests still share batches.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentrl.engines.base import GenerationResult, SamplingParams
from agentrl.engines.requests import RequestChecks
from agentrl.engines.step_lock import StepLock


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    seed: int
    future: asyncio.Future


@dataclass
class ForwardTally:
    """Forwards of one kind at one batch size: how many, their wall time, the real tokens fed."""

    count: int = 0
    seconds: float = 0.0
    tokens: int = 0


@dataclass
class BatchingStats:
    """Counters since construction of how well requests were batched (``engine.stats``: the
    rollout benchmark reads ``generate_seconds`` and ``forwards``, the engine tests the rest)."""

    batches: int = 0  # batched generations run (both paths)
    requests: int = 0  # sequences generated
    coalesced_batches: int = 0  # batches formed by the ``generate`` queue
    coalesced_requests: int = 0  # ``generate`` calls served by those batches
    max_batch_size_seen: int = 0
    generate_seconds: float = 0.0
    decode_steps: int = 0  # steps of a continuous running batch (``continuous.py``)
    recomputed_rows: int = 0  # running rows re-prefilled under new weights (``continuous.py``)
    # Every forward of the transformers engine's two loops, by kind and rows (``count_forward``)
    forwards: dict[tuple[str, int], ForwardTally] = field(default_factory=dict)

    def count_forward(self, kind: str, rows: int, seconds: float, tokens: int) -> None:
        """One ``"prefill"``, ``"decode"`` or ``"recompute"`` forward of ``rows`` rows that took
        ``seconds`` (the forward and its sampling) and fed ``tokens`` real tokens (padding not
        counted)."""
        tally = self.forwards.setdefault((kind, rows), ForwardTally())
        tally.count += 1
        tally.seconds += seconds
        tally.tokens += tokens


class BatchingEngine(RequestChecks, abc.ABC):
    """Implements ``Engine.generate`` / ``generate_batch`` over ``_generate_rows``."""

    def __init__(self, max_batch_size: int) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        self.stats = BatchingStats()
        # One batched generation at a time: the model (and vLLM's LLM) is not
        # re-entrant, and weight updates must not interleave with a generation.
        self._exec_lock = StepLock()  # a decode loop gives way to a waiting update (step_lock.py)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task | None = None

    # ------------------------------------------------------------------ subclass API
    @abc.abstractmethod
    def _generate_rows(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]
    ) -> list[GenerationResult]:
        """Generate one continuation per prompt, synchronously, all in one batch."""

    # ------------------------------------------------------------------ sync path
    def generate_batch_sync(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[GenerationResult]:
        """Generate for every prompt now, in chunks of ``max_batch_size`` (row seeds: module docstring)."""
        seeds = self._checked_batch(prompts, params, seeds)
        results: list[GenerationResult] = []
        for start in range(0, len(prompts), self.max_batch_size):
            stop = start + self.max_batch_size
            results.extend(
                self._run_locked([list(p) for p in prompts[start:stop]], params, seeds[start:stop])
            )
        return results

    def _run_locked(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]
    ) -> list[GenerationResult]:
        with self._exec_lock:
            t0 = time.perf_counter()
            results = self._generate_rows(prompts, params, seeds)
            elapsed = time.perf_counter() - t0
        if len(results) != len(prompts):
            raise RuntimeError(f"engine returned {len(results)} results for {len(prompts)} prompts")
        self.stats.batches += 1
        self.stats.requests += len(prompts)
        self.stats.max_batch_size_seen = max(self.stats.max_batch_size_seen, len(prompts))
        self.stats.generate_seconds += elapsed
        for r in results:
            r.metrics.setdefault("engine/batch_size", float(len(prompts)))
            r.metrics.setdefault("engine/batch_seconds", elapsed)
        return results

    # ------------------------------------------------------------------ async API
    async def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[GenerationResult]:
        """One lockstep batch, run in a worker thread so the event loop keeps serving."""
        return await asyncio.to_thread(self.generate_batch_sync, prompts, params, seeds)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        """One continuation; concurrent calls are coalesced into batches."""
        params, seed = self._checked_request(prompt_ids, params)
        queue = self._ensure_worker()
        future = asyncio.get_running_loop().create_future()
        await queue.put(_Request(list(prompt_ids), params, seed, future))
        return await future

    def _ensure_worker(self) -> asyncio.Queue[_Request]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            # First use, or a new event loop (asyncio.run per test / per step): the old
            # queue and task belonged to a loop that is gone.
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._worker_loop(self._queue), name="engine-batcher")
        assert self._queue is not None
        return self._queue

    async def _worker_loop(self, queue: asyncio.Queue[_Request]) -> None:
        while True:
            pending = [await queue.get()]
            # Yield once so coroutines released in the same tick can enqueue too.
            await asyncio.sleep(0)
            while not queue.empty():
                pending.append(queue.get_nowait())
            groups: dict[SamplingParams, list[_Request]] = {}
            for req in pending:
                groups.setdefault(req.params, []).append(req)
            for params, reqs in groups.items():
                for start in range(0, len(reqs), self.max_batch_size):
                    await self._serve(params, reqs[start : start + self.max_batch_size])

    async def _serve(self, params: SamplingParams, reqs: list[_Request]) -> None:
        live = [r for r in reqs if not r.future.done()]  # skip callers that were cancelled
        if not live:
            return
        try:
            results = await asyncio.to_thread(
                self._run_locked, [r.prompt_ids for r in live], params, [r.seed for r in live]
            )
        except Exception as exc:  # the batch failed: every caller in it sees the error
            for r in live:
                if not r.future.done():
                    r.future.set_exception(exc)
            return
        self.stats.coalesced_batches += 1
        self.stats.coalesced_requests += len(live)
        for r, res in zip(live, results, strict=True):
            if not r.future.done():
                r.future.set_result(res)

    def _stop_worker(self) -> None:
        """Cancel the coalescing task (if its loop is still alive)."""
        if self._worker is not None and not self._worker.done():
            loop = self._worker.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._worker.cancel)
        self._worker = None
        self._queue = None
        self._loop = None
