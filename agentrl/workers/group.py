"""Worker groups: N Ray actors of one role, addressed as one.

The driver never talks to a single worker: it asks the group to run a method on all
ranks (``run_all``), or to split a batch / list across ranks, run the method on each
shard and reassemble the results (``run_sharded``). Ranks of one group share a
torch.distributed process group, so training methods average gradients among them.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray
import torch

from agentrl.core.batch import Batch

WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _shard(items: Any, parts: int) -> list[Any]:
    if isinstance(items, Batch):
        return items.chunk(parts)
    bounds = np.linspace(0, len(items), parts + 1).round().astype(int)
    return [items[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def mini_batch_shards(batch: Batch, parts: int, mini_batch_size: int) -> list[Batch]:
    """One shard per rank for an update: rank r holds the r-th slice of every mini-batch.

    Splitting rank r's shard into ``mini_batch_size // parts`` rows then gives, at position
    i, rank r's part of the i-th global mini-batch, so (without shuffling) N ranks step on
    the same mini-batches as one rank would. Needs ``parts`` to divide the mini-batch and
    the batch (the config check enforces both).
    """
    if parts == 1:
        return [batch]
    if mini_batch_size % parts or len(batch) % parts:
        raise ValueError(
            f"{parts} ranks must divide both the mini-batch ({mini_batch_size}) and the batch ({len(batch)})"
        )
    pieces: list[list[Batch]] = [[] for _ in range(parts)]
    for mini in batch.split(mini_batch_size):
        for rank, piece in enumerate(mini.chunk(parts)):
            pieces[rank].append(piece)
    return [Batch.concat(rank_pieces) for rank_pieces in pieces]


def _combine(results: list[Any]) -> Any:
    first = results[0]
    if callable(getattr(type(first), "merge", None)):  # e.g. RolloutResult: the type knows how
        return type(first).merge(results)
    if isinstance(first, Batch):
        return Batch.concat(results)
    if isinstance(first, torch.Tensor):
        return torch.cat(results, dim=0)
    if isinstance(first, list):
        return [item for part in results for item in part]
    if isinstance(first, dict):  # metrics: average over ranks
        return {k: float(np.mean([r[k] for r in results if k in r])) for k in first}
    if isinstance(first, tuple):
        return tuple(_combine([r[i] for r in results]) for i in range(len(first)))
    return results


class WorkerGroup:
    def __init__(
        self,
        worker_cls: type,
        args: tuple[Any, ...],
        world_size: int = 1,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        name: str = "worker",
    ) -> None:
        """``worker_cls(*args, rank, world_size, master_port)`` on each of ``world_size`` Ray actors
        (``args``: the role's config section and the run context)."""
        self.name = name
        self.world_size = world_size
        port = free_port() if world_size > 1 else None
        env = dict(WORKER_ENV)
        # User code named by import path (scorers, tools) resolves from the launch directory,
        # as it does in the driver.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
        if "AGENTRL_TORCH_THREADS" in os.environ:
            env["AGENTRL_TORCH_THREADS"] = os.environ["AGENTRL_TORCH_THREADS"]
        remote_cls = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, runtime_env={"env_vars": env})(
            worker_cls
        )
        self.workers = [remote_cls.remote(*args, rank, world_size, port) for rank in range(world_size)]
        ray.get([w.ping.remote() for w in self.workers])  # surface constructor errors here, by role

    def run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return ray.get([getattr(w, method).remote(*args, **kwargs) for w in self.workers])

    def run_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return ray.get(getattr(self.workers[0], method).remote(*args, **kwargs))

    def run_sharded(self, method: str, items: Batch | Sequence, *args: Any, **kwargs: Any) -> Any:
        """Split ``items`` across ranks, run ``method(shard, *args)`` on each, reassemble."""
        if self.world_size == 1:
            return self.run_rank0(method, items, *args, **kwargs)
        shards = _shard(items, self.world_size)
        results = ray.get(
            [
                getattr(w, method).remote(shard, *args, **kwargs)
                for w, shard in zip(self.workers, shards, strict=True)
            ]
        )
        return _combine(results)

    def run_shards(self, method: str, shards: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``method(shards[r], *args)`` on rank r and reassemble, for callers that shard themselves."""
        if len(shards) != self.world_size:
            raise ValueError(f"{len(shards)} shards for a {self.name} group of {self.world_size} ranks")
        results = ray.get(
            [
                getattr(w, method).remote(shard, *args, **kwargs)
                for w, shard in zip(self.workers, shards, strict=True)
            ]
        )
        return _combine(results)

    def shutdown(self) -> None:
        # Best effort: the actors are killed next whatever happens here.
        with contextlib.suppress(Exception):
            ray.get([w.shutdown.remote() for w in self.workers], timeout=30)
        for worker in self.workers:
            ray.kill(worker)
