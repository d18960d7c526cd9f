"""The actor and the critic on spawned gloo ranks, checkpointed and resumed by fresh workers, without Ray.

``round_trip`` runs, on ``world`` spawned ranks of one strategy, an actor and a critic through
``updates`` updates, writing a checkpoint after ``save_after`` of them (the run goes on: its end
is the uninterrupted run's), then starts new processes whose fresh workers load that checkpoint
and take the remaining updates. Each side reports, from every rank, the full weights (rank 0) and
the rank's own optimiser state (its shards under fsdp), so a test can ask that the resumed run
ends where the uninterrupted one did, shard for shard.
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.cluster.sharding import mini_batch_shards
from agentrl.config.schema import CriticConfig, OptimConfig, UpdateConfig
from agentrl.models.sharding import full_state_dict
from agentrl.ports import free_port
from agentrl.workers.actor import ActorWorker
from agentrl.workers.critic import CriticWorker
from agentrl.workers.synthetic import actor_section, context, ppo_batch
from tests.support.spawned_ranks import spawn_ranks


def _critic_section(model_path: str) -> CriticConfig:
    """The critic's section with the actor's schedule (``synthetic.actor_section``)."""
    return CriticConfig(
        model_path=model_path,
        optim=OptimConfig(lr=1e-3, weight_decay=0.0),
        update=UpdateConfig(mini_batch_size=4, micro_batch_size=1, shuffle=False),
    )


def _plain(tensor: torch.Tensor) -> list:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # a DTensor: this rank's shard
    return local.detach().float().flatten().tolist()  # plain lists: a tensor on a queue dies with its process


def _report(worker: Any, rank: int) -> dict[str, Any]:
    """The full weights (a collective under fsdp; kept on rank 0) and this rank's optimiser state."""
    model = worker.model
    state = full_state_dict(model) if worker.context.strategy == "fsdp" else model.state_dict()
    names = {id(p): n for n, p in model.named_parameters()}
    moments = {
        f"{names[id(p)]}/{key}": _plain(value)
        for p, slot in worker.optimizer.state.items()
        for key, value in slot.items()
        if key in ("exp_avg", "exp_avg_sq")
    }
    return {
        "weights": {k: _plain(v) for k, v in state.items()} if rank == 0 else {},
        "moments": moments,
        "lr": worker.optimizer.param_groups[0]["lr"],
    }


def _rank_main(rank: int, world: int, port: int, args: dict, queue: Any) -> None:
    strategy, model_path = args["strategy"], args["model_path"]
    actor_config = actor_section(model_path)
    actor = ActorWorker(actor_config, context(strategy), rank, world, port)
    critic = CriticWorker(_critic_section(model_path), context(strategy), rank, world, port)
    batch = ppo_batch(actor.model.config.vocab_size)
    generator = torch.Generator().manual_seed(1)
    batch["values"] = torch.randn(batch["responses"].shape, generator=generator)
    batch["returns"] = torch.randn(batch["responses"].shape, generator=generator)
    shard = mini_batch_shards(batch, world, actor_config.update.mini_batch_size)[rank]
    try:
        if args["resume_from"] is not None:
            actor.load_checkpoint(args["resume_from"])
            critic.load_checkpoint(args["resume_from"])
        for done in range(args["first"], args["updates"]):
            actor.update_actor(shard)
            critic.update_critic(shard)
            if done + 1 == args["save_after"]:
                actor.save_checkpoint(args["directory"])
                critic.save_checkpoint(args["directory"])
        queue.put((rank, {"actor": _report(actor, rank), "critic": _report(critic, rank)}))
    finally:
        critic.shutdown()
        actor.shutdown()


def _spawn(world: int, args: dict) -> list[dict[str, Any]]:
    port = free_port()
    return spawn_ranks(_rank_main, [(rank, world, port, args) for rank in range(world)])


def round_trip(
    model_path: str, strategy: str, world: int, directory: str, updates: int = 2, save_after: int = 1
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The uninterrupted run's reports and the resumed run's, one per rank each (module docstring)."""
    base = {"model_path": str(model_path), "strategy": strategy, "updates": updates, "directory": directory}
    straight = _spawn(world, base | {"first": 0, "save_after": save_after, "resume_from": None})
    resumed = _spawn(world, base | {"first": save_after, "save_after": -1, "resume_from": directory})
    return straight, resumed
