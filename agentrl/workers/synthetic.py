"""A synthetic actor workload: random agent-shaped PPO batches, a small actor section, a CPU run context.

It runs a real ``ActorWorker`` update without a rollout, a retriever or a dataset. The actor's
tests and the actor benchmarks (``benchmarks/fsdp_memory.py``, ``benchmarks/trainer_overhead.py``)
both run this one workload, so a figure and the test that guards its code path measure the
same thing.
"""

from __future__ import annotations

import torch

from agentrl.agent.collate import collate
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.config.schema import ActorConfig, OptimConfig, UpdateConfig
from agentrl.core.batch import Batch
from agentrl.workers.base import RunContext


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
    """The actor's config section: AdamW without weight decay, mini-batches of 4 rows, one row a
    micro-batch, no shuffling (so two strategies see the same micro-batches)."""
    return ActorConfig(
        model_path=model_path,
        compute_dtype=compute_dtype,
        optim=OptimConfig(lr=lr, weight_decay=0.0),
        update=UpdateConfig(mini_batch_size=4, micro_batch_size=1, shuffle=False),
    )


def context(strategy: str) -> RunContext:
    """A CPU run's context under ``strategy`` (``"dp"`` or ``"fsdp"``)."""
    return RunContext(
        seed=0, device="cpu", total_steps=10, max_prompt_length=64, max_response_length=64, strategy=strategy
    )
