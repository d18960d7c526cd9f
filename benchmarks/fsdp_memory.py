"""Per-rank memory of parameters + gradients + optimiser state: fsdp on N ranks vs dp.

    python -m benchmarks.fsdp_memory [--ranks 2] [--hidden 512] [--layers 4]

Both strategies run the real ``ActorWorker`` (fp32 master weights, AdamW) on N spawned gloo
ranks and take one PPO update of the same batch; each rank then counts the bytes it holds
of what the update needs kept between steps: its (shard of the) parameters, their gradients
and AdamW's two moments (``DTensor.to_local()`` under fsdp). Activations and transient
all-gather buffers are not in these figures (they depend on the micro-batch, not on N).
The target of the sharded-training issue: fsdp on 2 ranks ≤ 0.55 × dp.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from agentrl.cluster.sharding import mini_batch_shards
from agentrl.models.tiny import DEFAULT_TEXTS, build_tiny_causal_lm, train_tokenizer
from agentrl.ports import free_port
from agentrl.workers.actor import ActorWorker
from agentrl.workers.synthetic import actor_section, context, ppo_batch


def local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def held_bytes(worker: ActorWorker) -> dict[str, int]:
    params = list(worker.model.parameters())
    moments = [
        value
        for state in worker.optimizer.state.values()
        for value in state.values()
        if torch.is_tensor(value)
    ]
    return {
        "params": sum(local_bytes(p) for p in params),
        "grads": sum(local_bytes(p.grad) for p in params if p.grad is not None),
        "optimiser": sum(local_bytes(m) for m in moments if m.dim() > 0),
    }


def _rank(rank: int, world: int, port: int, model_dir: str, strategy: str, queue: Any) -> None:
    worker = ActorWorker(actor_section(model_dir), context(strategy), rank, world, port)
    batch = ppo_batch(worker.model.config.vocab_size, rows=4 * world)
    shard = mini_batch_shards(batch, world, len(batch))[rank]
    worker.update_actor(shard)
    queue.put((rank, held_bytes(worker)))
    worker.shutdown()


def measure(model_dir: str, strategy: str, world: int) -> list[dict[str, int]]:
    ctx = mp.get_context("spawn")
    queue, port = ctx.Queue(), free_port()
    procs = [
        ctx.Process(target=_rank, args=(r, world, port, model_dir, strategy, queue)) for r in range(world)
    ]
    for proc in procs:
        proc.start()
    results = dict(queue.get(timeout=600) for _ in procs)
    for proc in procs:
        proc.join(timeout=120)
    return [results[r] for r in range(world)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_tokenizer(DEFAULT_TEXTS, 2048)
        model_dir = build_tiny_causal_lm(
            tokenizer, Path(tmp) / "model", hidden_size=args.hidden, layers=args.layers, heads=8
        )
        rows = {}
        for strategy in ("dp", "fsdp"):
            per_rank = measure(str(model_dir), strategy, args.ranks)
            rows[strategy] = max(sum(r.values()) for r in per_rank)
            parts = " + ".join(f"{k} {v / 2**20:.1f}" for k, v in per_rank[0].items())
            total = sum(per_rank[0].values()) / 2**20
            print(f"{strategy:>4} on {args.ranks} ranks: rank 0 holds {parts} MiB = {total:.1f} MiB")
        ratio = rows["fsdp"] / rows["dp"]
        print(f"per-rank params + grads + optimiser state, fsdp / dp on {args.ranks} ranks: {ratio:.3f}")
        print("(target of the sharded-training issue: <= 0.55)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
