"""Continuous batching for the transformers engine: rows join and leave the batch at every step.

Coalescing (``batching.py``) runs a batch to completion: a trajectory back from the
retriever waits until every row of the running batch has finished its turn. Here one
decode loop runs in a worker thread over a running batch; at every step it

1. admits the requests that arrived (up to ``max_batch_size`` rows in all): they are
   prefilled together, left-padded, into a KV cache of their own, sample their first token,
   and that cache is merged into the running one (both left-padded to the wider of the two);
2. decodes one token for every running row;
3. retires the rows that finished (eos, a stop string, their budget, or a cancelled caller),
   resolving each caller's future on its own event loop, and drops KV columns that no
   remaining row attends to.

New weights loaded between two steps (``HFEngine.update_weights``, which goes in at the next
step boundary: the loop takes the engine's lock with ``StepLock.step``) leave the running rows'
KV cache as the old weights computed it; with ``recompute_on_new_weights`` the engine flags
them (``weights_changed``) and, before its next step, the batcher re-prefills every running
row's prompt and tokens so far under the new weights (``recompute``), as a rollout stopped and
resumed would: each token from then on is sampled by the new weights alone.

A row's tokens depend only on its prompt, its parameters and its seed: positions count its
own tokens, its padding is masked, and it samples from its own generator, so a seeded
request gives the same tokens as the coalescing path (up to float rounding of the batch
shapes). Rows with different ``SamplingParams`` share forwards and sample per group.
Only full-attention ``DynamicCache`` layers can be merged; other caches raise on the first
admission, naming the option to turn this off (``HFEngine(continuous=False)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from agentrl.engines.base import FinishReason, GenerationResult, SamplingParams
from agentrl.engines.batching import BatchingStats
from agentrl.engines.decoding import CausalLMDecoder
from agentrl.engines.sampling import select_tokens
from agentrl.engines.step_lock import StepLock
from agentrl.engines.stopping import StopStringMatcher

_STOP = object()  # queued by ``close``: the loop exits


@dataclass
class _Row:
    """One request in flight: what it asked for and what it produced so far."""

    prompt: list[int]
    params: SamplingParams  # without the seed, which is in ``generator``
    generator: torch.Generator
    matcher: StopStringMatcher
    budget: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None
    stop: str | None = None
    running_sizes: list[int] = field(default_factory=list)  # rows in each forward it took part in

    def result(self) -> GenerationResult:
        sizes = self.running_sizes or [1]
        return GenerationResult(
            token_ids=self.tokens,
            log_probs=self.log_probs,
            finish_reason=self.finish or "length",
            stop_string=self.stop,
            metrics={"engine/batch_size": sum(sizes) / len(sizes)},
        )


def _resolve(row: _Row, value: GenerationResult | BaseException) -> None:
    """Set the caller's future from the decode thread, on the caller's loop (if it still runs)."""

    def settle() -> None:
        if row.future.done():
            return
        if isinstance(value, BaseException):
            row.future.set_exception(value)
        else:
            row.future.set_result(value)

    # A closed loop (RuntimeError) means nobody waits for this row any more.
    with contextlib.suppress(RuntimeError):
        row.loop.call_soon_threadsafe(settle)


def _pad_left(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    pad = [0, 0] * (tensor.dim() - 1 - dim % tensor.dim()) + [missing, 0]
    return F.pad(tensor, pad)


class ContinuousBatcher:
    """The running batch of one ``HFEngine`` and the thread that decodes it.

    Args:
        decoder: the model and its per-row decoding rules (``decoding.py``).
        stats: the engine's counters, which the batcher keeps up to date.
        exec_lock: held around every prefill and decode step (the engine's lock: weight
            updates and sleep do not interleave with a forward, and one waiting for it goes in
            before the next step, ``step_lock.py``).
        max_batch_size: most rows running at once; later requests wait for room.
    """

    def __init__(
        self,
        decoder: CausalLMDecoder,
        stats: BatchingStats,
        exec_lock: StepLock,
        max_batch_size: int,
    ) -> None:
        self.decoder = decoder
        self.stats = stats
        self.exec_lock = exec_lock
        self.max_batch_size = max_batch_size
        self.inbox: queue.Queue = queue.Queue()
        self.rows: list[_Row] = []
        self.cache: DynamicCache | None = None
        self.attention: torch.Tensor | None = None  # (rows, kv width), 1 where a row attends
        self.positions: torch.Tensor | None = None  # (rows,) position id of the token fed next
        self.last: torch.Tensor | None = None  # (rows,) the token fed next
        self.finished: list[_Row] = []  # rows that ended this step, resolved once it is over
        self._model_mode: contextlib.ExitStack | None = None  # the eval mode held while rows run
        self._stale_cache = False  # new weights loaded since the running rows' cache was computed
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ caller side
    def submit(self, prompt: list[int], params: SamplingParams, seed: int) -> asyncio.Future:
        """Queue a request; the returned future (on the running loop) gets its result."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        row = _Row(
            prompt=list(prompt),
            params=params,
            generator=self.decoder.row_generator(seed),
            matcher=self.decoder.stop_matcher(params),
            budget=self.decoder.token_budget(prompt, params),
            loop=loop,
            future=future,
        )
        self._ensure_thread()
        self.inbox.put(row)
        return future

    def weights_changed(self) -> None:
        """New weights were loaded (under the engine's lock, between two steps): the running rows'
        cache is recomputed before the next step."""
        self._stale_cache = True

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self.inbox.put(_STOP)
            self._thread.join(timeout=30)
        self._thread = None

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="hf-continuous-batcher", daemon=True)
                self._thread.start()

    # ------------------------------------------------------------------ decode thread
    def _arrivals(self, block: bool) -> list[_Row] | None:
        """Requests that arrived (waiting for one if ``block``); None when asked to stop."""
        arrived = [self.inbox.get()] if block else []
        while True:
            try:
                arrived.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        if any(item is _STOP for item in arrived):
            for row in arrived:
                if row is not _STOP:
                    _resolve(row, RuntimeError("the engine was shut down"))
            return None
        return arrived

    def _run(self) -> None:
        waiting: list[_Row] = []
        while True:
            arrived = self._arrivals(block=not self.rows and not waiting)
            if arrived is None:
                with self.exec_lock:
                    self._restore_model_mode()
                self._fail(waiting + self.rows, RuntimeError("the engine was shut down"))
                return
            waiting += [row for row in arrived if not row.future.done()]
            room = self.max_batch_size - len(self.rows)
            admitted, waiting = waiting[:room], waiting[room:]
            try:
                with self.exec_lock.step(), torch.inference_mode():
                    self._hold_eval_mode()
                    started = time.perf_counter()
                    if self._stale_cache:
                        self._stale_cache = False
                        if self.rows:
                            self.recompute()
                    if admitted:
                        self._admit(admitted)
                    if self.rows:
                        self._decode_step()
                    self.stats.generate_seconds += time.perf_counter() - started
                    if not self.rows:
                        self._restore_model_mode()
            except Exception as exc:  # a failed forward fails the rows in it, not the engine
                with self.exec_lock:
                    self._restore_model_mode()
                self._settle_finished()
                self._fail(admitted + self.rows, exc)
            self._settle_finished()

    # The model stays in eval mode while the batch runs, not step by step: switching a module
    # tree's mode walks every submodule twice, ~7% of a decode step of the benchmark's tiny
    # policy on CPU (benchmarks/rollout_throughput.py). The mode is restored when the batch
    # drains, before the rows that finished last are resolved, so their callers see it back.
    def _hold_eval_mode(self) -> None:
        if self._model_mode is None:
            self._model_mode = contextlib.ExitStack()
            self._model_mode.enter_context(self.decoder.eval_mode())

    def _restore_model_mode(self) -> None:
        if self._model_mode is not None:
            mode, self._model_mode = self._model_mode, None
            mode.close()

    def _settle_finished(self) -> None:
        """Resolve the rows that ended in the last step with their results."""
        for row in self.finished:
            _resolve(row, row.result())
        self.finished.clear()

    def _fail(self, rows: list[_Row], exc: BaseException) -> None:
        for row in rows:
            _resolve(row, exc)
        self._empty()

    def _empty(self) -> None:
        """No row runs: drop the batch's cache and per-row tensors."""
        self.rows, self.cache, self.attention, self.positions, self.last = [], None, None, None, None

    def _admit(self, rows: list[_Row]) -> None:
        """Prefill the new rows, sample their first token, merge the survivors into the batch."""
        started = time.perf_counter()
        input_ids, attention, positions = self.decoder.left_padded([row.prompt for row in rows])
        cache = self.decoder.new_cache()
        logits = self.decoder.next_token_logits(input_ids, attention, positions, cache)
        unsupported = {type(layer).__name__ for layer in cache.layers if type(layer) is not DynamicLayer}
        if unsupported:
            raise NotImplementedError(
                f"continuous batching merges full-attention KV caches; this model's cache has "
                f"{sorted(unsupported)} layers: build the engine with continuous=False "
                "(actor.rollout.continuous_batching=false)"
            )
        stats = self.stats
        stats.batches += 1
        stats.requests += len(rows)
        stats.coalesced_batches += 1
        stats.coalesced_requests += len(rows)
        tokens, keep = self._sample(rows, logits, len(self.rows) + len(rows))
        stats.count_forward("prefill", len(rows), time.perf_counter() - started, int(attention.sum()))
        if not keep:
            return
        index = torch.tensor(keep, device=attention.device)
        if len(keep) < len(rows):
            cache.batch_select_indices(index)
        self._merge([rows[i] for i in keep], cache, attention[index], positions[index, -1] + 1, tokens[index])

    def recompute(self) -> None:
        """Rebuild the running batch's KV cache under the model's current weights: one prefill of
        each row's prompt and its tokens but the last (which the next step feeds), so each row
        continues from the same tokens, positions and generator state; only the cache changes.
        Positions count real tokens, so the re-prefilled rows attend exactly as before."""
        started = time.perf_counter()
        contexts = [row.prompt + row.tokens[:-1] for row in self.rows]
        input_ids, attention, positions = self.decoder.left_padded(contexts)
        cache = self.decoder.new_cache()
        self.decoder.next_token_logits(input_ids, attention, positions, cache)  # the cache is what counts
        self.cache, self.attention, self.positions = cache, attention, positions[:, -1] + 1
        rows = len(self.rows)
        self.stats.recomputed_rows += rows
        self.stats.count_forward("recompute", rows, time.perf_counter() - started, int(attention.sum()))

    def _merge(self, rows, cache, attention, positions, last) -> None:
        if self.cache is None:
            self.rows, self.cache, self.attention, self.positions, self.last = (
                rows,
                cache,
                attention,
                positions,
                last,
            )
            return
        width = max(self.attention.shape[1], attention.shape[1])
        for ours, theirs in zip(self.cache.layers, cache.layers, strict=True):
            ours.keys = torch.cat([_pad_left(ours.keys, width, -2), _pad_left(theirs.keys, width, -2)])
            ours.values = torch.cat([_pad_left(ours.values, width, -2), _pad_left(theirs.values, width, -2)])
        self.attention = torch.cat([_pad_left(self.attention, width, 1), _pad_left(attention, width, 1)])
        self.positions = torch.cat([self.positions, positions])
        self.last = torch.cat([self.last, last])
        self.rows = self.rows + rows

    def _decode_step(self) -> None:
        """One token for every running row; finished and cancelled rows leave the batch."""
        self.stats.decode_steps += 1
        started, rows = time.perf_counter(), len(self.rows)
        self._step()
        self.stats.count_forward("decode", rows, time.perf_counter() - started, rows)

    def _step(self) -> None:
        self.attention = torch.cat([self.attention, self.attention.new_ones((len(self.rows), 1))], dim=1)
        logits = self.decoder.next_token_logits(
            self.last[:, None], self.attention, self.positions[:, None], self.cache
        )
        self.positions = self.positions + 1
        tokens, keep = self._sample(self.rows, logits, len(self.rows))
        if len(keep) == len(self.rows):
            self.last = tokens
            return
        if not keep:
            self._empty()
            return
        index = torch.tensor(keep, device=self.attention.device)
        self.cache.batch_select_indices(index)
        self.rows = [self.rows[i] for i in keep]
        self.attention, self.positions = self.attention[index], self.positions[index]
        self.last = tokens[index]
        first = int(self.attention.any(dim=0).nonzero()[0])  # columns before it: padding in every row
        if first > 0:
            self.attention = self.attention[:, first:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]

    def _sample(self, rows: list[_Row], logits: torch.Tensor, running: int) -> tuple[torch.Tensor, list[int]]:
        """Each row's next token (rows grouped by parameters); the indices of rows still going."""
        tokens = torch.zeros(len(rows), dtype=torch.long, device=logits.device)
        log_probs = torch.zeros(len(rows), dtype=torch.float32, device=logits.device)
        groups: dict[SamplingParams, list[int]] = {}
        for i, row in enumerate(rows):
            groups.setdefault(row.params, []).append(i)
        for params, members in groups.items():
            index = torch.tensor(members, device=logits.device)
            picked, lp = select_tokens(logits[index], params, [rows[i].generator for i in members])
            tokens[index], log_probs[index] = picked, lp
        self.stats.max_batch_size_seen = max(self.stats.max_batch_size_seen, running)
        keep = []
        for i, (row, token, lp) in enumerate(zip(rows, tokens.tolist(), log_probs.tolist(), strict=True)):
            row.tokens.append(token)
            row.log_probs.append(lp)
            row.running_sizes.append(running)
            row.finish, row.stop = self.decoder.finish_of(token, row.matcher, len(row.tokens), row.budget)
            if row.future.done():  # cancelled by its caller: stop computing for it
                continue
            if row.finish is None:
                keep.append(i)
            else:
                self.finished.append(row)
        return tokens, keep
