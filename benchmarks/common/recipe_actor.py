"""The search_qa recipe's actor, driven directly (no Ray), and search-agent-shaped batches for it.

``lora_vs_full`` and ``heap_trim`` measure this actor: the recipe's actor settings (bf16
autocast over fp32 weights, Dr. GRPO aggregation, micro-batches of 4) on batches shaped like
the recipe's trajectories.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used, so a benchmark's --help loads no torch
    from agentrl.core.batch import Batch
    from agentrl.workers.actor import ActorWorker


def search_batch(vocab_size: int, rows: int, seed: int) -> Batch:
    """``rows`` trajectories shaped like the recipe's: ~300-token prompt, a ≤64-token search
    turn, ~450 tokens of passages, a ≤64-token answer turn; one in four answers at once."""
    import torch

    from agentrl.agent.collate import collate
    from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory

    generator = torch.Generator().manual_seed(seed)

    def length(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=generator))

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab_size, (n,), generator=generator).tolist()

    trajectories = []
    for i in range(rows):
        traj = Trajectory(prompt=PromptSpec(ids(length(260, 320))), group_id=f"g{i // 4}", uid=str(i))
        turns = 1 if i % 4 == 3 else 2
        for turn in range(turns):
            n = length(20, 64)
            traj.append(ids(n), Segment.MODEL, (-torch.rand(n, generator=generator)).tolist())
            if turn + 1 < turns:
                traj.append(ids(length(380, 512)), Segment.OBSERVATION)
        trajectories.append(traj)
    batch = collate(trajectories, pad_token_id=0)
    batch["advantages"] = torch.randn(batch["responses"].shape, generator=generator)
    return batch


def actor_worker(model_dir: Path, rank: int, rows: int) -> ActorWorker:
    """An ``ActorWorker`` on ``model_dir`` with the recipe's actor settings and mini-batches of
    ``rows``: full fine-tuning at ``rank`` 0, else LoRA of that rank (alpha 2 × rank)."""
    from agentrl.config.schema import ActorConfig, LoraConfig, OptimConfig, UpdateConfig
    from agentrl.workers.actor import ActorWorker
    from agentrl.workers.base import RunContext

    section = ActorConfig(
        model_path=str(model_dir),
        compute_dtype="bfloat16",
        optim=OptimConfig(lr=1e-5, warmup_ratio=0.0),
        update=UpdateConfig(mini_batch_size=rows, micro_batch_size=4),
        loss_agg_mode="seq-mean-token-sum-norm",
        lora=LoraConfig(rank=rank, alpha=2.0 * rank) if rank else LoraConfig(),
    )
    context = RunContext(
        seed=0, device="cpu", total_steps=100, max_prompt_length=320, max_response_length=1280, strategy="dp"
    )
    return ActorWorker(section, context)
