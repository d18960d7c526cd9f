"""What every role's worker shares: the run context, process setup and the update loop.

A worker is a plain Python object (testable without Ray) that the worker group turns into
a Ray actor. It is built from its own role's config section plus a ``RunContext`` (the few
run-wide values every role needs, computed once by the driver). Workers of one role form a
data-parallel group over torch.distributed (gloo on CPU, NCCL on GPU): each holds a full
model replica and trains on its shard of every mini-batch; ``optimizer_step`` weights each
micro-batch by its share of the *global* mini-batch and sums the ranks' gradients, so N
ranks take the step one rank would take.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from agentrl.config.schema import ExperimentConfig, OptimConfig, UpdateConfig
from agentrl.core.batch import Batch
from agentrl.models.optim import build_optimizer
from agentrl.models.update import LossFn, ProcessGroupSync, SingleProcess, optimizer_step
from agentrl.seeding import rng_state, seed_everything, set_rng_state

STRATEGIES = ("dp",)  # dp: full replicas, gradients summed over ranks
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class RunContext:
    """Run-wide values a worker needs beside its own config section, computed once."""

    seed: int
    device: str  # cpu | cuda
    total_steps: int  # training steps the lr schedules span
    max_prompt_length: int
    max_response_length: int  # the response budget; also the Dr.GRPO loss normaliser

    @classmethod
    def from_config(cls, config: ExperimentConfig) -> RunContext:
        return cls(
            seed=config.seed,
            device=config.trainer.device,
            total_steps=config.trainer.total_steps,
            max_prompt_length=config.data.max_prompt_length,
            max_response_length=config.data.max_response_length,
        )


class Worker:
    """Base of the role workers: device, rank, and the optional process group."""

    def __init__(
        self, context: RunContext, rank: int = 0, world_size: int = 1, master_port: int | None = None
    ):
        self.context = context
        self.rank = rank
        self.world_size = world_size
        self.device = torch.device(
            "cuda" if context.device == "cuda" and torch.cuda.is_available() else "cpu"
        )
        threads = os.environ.get("AGENTRL_TORCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        seed_everything(context.seed + rank)
        if world_size > 1:
            if master_port is None:
                raise ValueError("a worker group of size > 1 needs a master_port for torch.distributed")
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ["MASTER_PORT"] = str(master_port)
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            dist.init_process_group(backend, rank=rank, world_size=world_size)

    def ping(self) -> int:
        return self.rank

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class TrainableWorker(Worker):
    """A worker that owns a trainable model, its optimiser and lr schedule."""

    model: torch.nn.Module

    def _setup_optimizer(self, optim: OptimConfig) -> None:
        self.optim_config = optim
        self.optimizer, self.scheduler = build_optimizer(
            self.model.parameters(), optim, total_steps=self.context.total_steps
        )
        self.shuffle_generator = torch.Generator().manual_seed(self.context.seed + 1000 + self.rank)
        self.sync = ProcessGroupSync() if self.world_size > 1 else SingleProcess()

    def train_epochs(
        self, batch: Batch, loss_fn: LossFn, update: UpdateConfig, metric_prefix: str, weighting: str
    ) -> dict[str, float]:
        """``update.epochs`` passes over ``batch`` in mini-batches; one ``optimizer_step`` each.

        ``batch`` is this rank's shard (``mini_batch_shards``): its i-th slice of
        ``mini_batch_size // world_size`` rows is its part of the i-th global mini-batch.
        ``weighting`` is ``tokens`` for token-mean losses, ``sequences`` for the seq-mean modes.
        """
        local_mini = max(1, update.mini_batch_size // self.world_size)
        max_tokens = update.max_tokens_per_micro_batch if update.use_dynamic_bsz else None
        history: dict[str, list[float]] = defaultdict(list)
        self.model.train()
        for _ in range(update.epochs):
            order = batch.shuffled(self.shuffle_generator) if update.shuffle else batch
            for mini in order.split(local_mini):
                step = optimizer_step(
                    self.model,
                    self.optimizer,
                    mini,
                    loss_fn,
                    micro_batch_size=update.micro_batch_size,
                    max_tokens=max_tokens,
                    weighting=weighting,
                    grad_clip=self.optim_config.grad_clip,
                    sync=self.sync,
                    what=metric_prefix,
                )
                for name, values in step.metrics.items():
                    history[f"{metric_prefix}/{name}"].extend(values)
                history[f"{metric_prefix}/grad_norm"].append(step.grad_norm)
        self.scheduler.step()
        summary = {name: float(np.mean(values)) for name, values in history.items()}
        summary[f"{metric_prefix}/lr"] = self.optimizer.param_groups[0]["lr"]
        return summary

    # --- checkpoints ----------------------------------------------------------------

    def save_training_state(self, directory: str, name: str) -> None:
        """Optimiser, scheduler and RNG state (rank 0 writes: replicas are identical)."""
        if self.rank != 0:
            return
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "shuffle_generator": self.shuffle_generator.get_state(),
                "rng": rng_state(),
            },
            path / f"{name}_training_state.pt",
        )

    def load_training_state(self, directory: str, name: str) -> None:
        state = torch.load(Path(directory) / f"{name}_training_state.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.shuffle_generator.set_state(state["shuffle_generator"])
        set_rng_state(state["rng"])
