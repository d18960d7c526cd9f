"""Run real ``ActorWorker`` updates on spawned gloo ranks (dp or fsdp), without Ray.

The workload (``ppo_batch``, ``actor_section``, ``context``) is ``agentrl.workers.synthetic``,
the one the actor benchmarks run too, re-exported here for the tests."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import torch

from agentrl.cluster.sharding import mini_batch_shards
from agentrl.models.sharding import full_state_dict
from agentrl.ports import free_port
from agentrl.workers.actor import ActorWorker
from agentrl.workers.synthetic import actor_section, context, ppo_batch


def gathered_weights(worker: ActorWorker) -> dict[str, torch.Tensor]:
    """The full fp32 weights (a collective under fsdp; every rank gets them only on rank 0)."""
    # Copies: on a single CPU rank the gathered tensors are the live parameters themselves.
    state = full_state_dict(worker.model) if worker.context.strategy == "fsdp" else worker.model.state_dict()
    return {k: v.detach().clone() for k, v in state.items()}


def _rank_main(rank: int, world: int, port: int, args: dict, queue: Any) -> None:
    actor = actor_section(args["model_path"], args.get("compute_dtype", "float32"))
    worker = ActorWorker(actor, context(args["strategy"]), rank, world, port)
    batch = ppo_batch(worker.model.config.vocab_size)
    shard = mini_batch_shards(batch, world, actor.update.mini_batch_size)[rank]
    try:
        for _ in range(args.get("updates", 2)):
            worker.update_actor(shard)
        weights = {"trained": gathered_weights(worker)}
        if args.get("engine_copy"):  # what the rollout engine holds after the weight sync
            worker.engine_link.push()
            weights["engine"] = {
                k: v.detach().clone() for k, v in worker.rollout.engine.model.state_dict().items()
            }
        if rank == 0:  # plain lists: a tensor on a queue dies with its process
            queue.put({kind: {k: v.float().tolist() for k, v in w.items()} for kind, w in weights.items()})
    finally:
        worker.shutdown()


def updated_weights(
    model_path: str, strategy: str, world: int, **args: Any
) -> dict[str, dict[str, torch.Tensor]]:
    """The actor's weights after ``updates`` PPO updates on ``world`` spawned ranks, under
    ``"trained"``, and with ``engine_copy=True`` rank 0's rollout engine copy after the weight sync
    under ``"engine"``."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    settings = {"model_path": str(model_path), "strategy": strategy, **args}
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, settings, queue)) for r in range(world)]
    for proc in procs:
        proc.start()
    result = queue.get(timeout=300)
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0, f"rank exited with {proc.exitcode}"
    return {kind: {k: torch.tensor(v) for k, v in w.items()} for kind, w in result.items()}


__all__ = ["actor_section", "context", "gathered_weights", "ppo_batch", "updated_weights"]
