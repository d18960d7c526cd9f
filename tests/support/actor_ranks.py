"""Run real ``ActorWorker`` updates on spawned gloo ranks (dp or fsdp), without Ray."""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import replace
from typing import Any

import torch

from agentrl.agent.collate import collate
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.config.schema import ActorConfig, OptimConfig, UpdateConfig
from agentrl.core.batch import Batch
from agentrl.models.sharding import full_state_dict
from agentrl.workers.actor import ActorWorker
from agentrl.workers.base import RunContext
from agentrl.workers.group import free_port, mini_batch_shards


def ppo_batch(vocab_size: int, rows: int = 4, seed: int = 0, scale: int = 1) -> Batch:
    """Trajectories of random ids (prompt, model turn, observation, model turn) with the fields
    the actor's loss reads: ``old_log_probs`` and ``advantages``. ``scale`` multiplies every
    segment's length (1: a few dozen tokens per row; 8: search-agent-like lengths)."""
    generator = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab_size, (n,), generator=generator).tolist()

    trajectories = []
    for i in range(rows):
        first, second = scale * (6 + 2 * i), scale * (3 + i)
        traj = Trajectory(prompt=PromptSpec(ids(scale * (5 + i))), group_id=f"g{i // 2}", uid=str(i))
        traj.append(ids(first), Segment.MODEL, [0.0] * first)
        traj.append(ids(scale * 4), Segment.OBSERVATION)
        traj.append(ids(second), Segment.MODEL, [0.0] * second)
        trajectories.append(traj)
    batch = collate(trajectories, pad_token_id=0)
    batch["old_log_probs"] = -torch.rand(batch["responses"].shape, generator=generator) * 3
    batch["advantages"] = torch.randn(batch["responses"].shape, generator=generator)
    return batch


def actor_section(model_path: str, compute_dtype: str = "float32", lr: float = 1e-3) -> ActorConfig:
    return ActorConfig(
        model_path=model_path,
        compute_dtype=compute_dtype,
        optim=OptimConfig(lr=lr, weight_decay=0.0),
        update=UpdateConfig(mini_batch_size=4, micro_batch_size=1, shuffle=False),
    )


def context(strategy: str) -> RunContext:
    return RunContext(
        seed=0, device="cpu", total_steps=10, max_prompt_length=64, max_response_length=64, strategy=strategy
    )


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
        if args.get("engine_copy"):  # what the rollout engine holds after the weight sync
            worker.push_weights_to_engine()
            weights = {k: v.detach().clone() for k, v in worker.rollout.engine.model.state_dict().items()}
        else:
            weights = gathered_weights(worker)
        if rank == 0:  # plain lists: a tensor on a queue dies with its process
            queue.put({k: v.float().tolist() for k, v in weights.items()})
    finally:
        worker.shutdown()


def updated_weights(model_path: str, strategy: str, world: int, **args: Any) -> dict[str, torch.Tensor]:
    """The actor's weights after ``updates`` PPO updates on ``world`` spawned ranks (with
    ``engine_copy=True``: rank 0's rollout engine copy after the weight sync)."""
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
    return {k: torch.tensor(v) for k, v in result.items()}


__all__ = ["actor_section", "context", "gathered_weights", "ppo_batch", "replace", "updated_weights"]
