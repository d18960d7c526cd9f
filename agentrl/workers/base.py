"""What every role's worker shares: process setup, data parallelism, and the PPO update loop.

A worker is a plain Python object (testable without Ray) that the worker group turns into
a Ray actor. Workers of one role form a data-parallel group over torch.distributed (gloo
on CPU, NCCL on GPU): each holds a full model replica and trains on its shard of every
mini-batch. Each micro-batch's loss is weighted by its share of the *global* mini-batch
(tokens or sequences, all-reduced first) and the ranks' gradients are summed, so N ranks
take the optimiser step of one loss over the whole mini-batch, as one rank would.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from agentrl.config.schema import ExperimentConfig, OptimConfig
from agentrl.core.batch import Batch
from agentrl.seeding import rng_state, seed_everything, set_rng_state
from agentrl.workers.forward import micro_batches
from agentrl.workers.optim import build_optimizer

LossFn = Callable[[Batch], tuple[torch.Tensor, dict[str, torch.Tensor]]]


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient norm became NaN/inf; the message names the metric."""


class Worker:
    """Base of the role workers: config, device, rank, and the optional process group."""

    def __init__(self, config: ExperimentConfig, rank: int = 0, world_size: int = 1, master_port: int | None = None):
        self.config = config
        self.rank = rank
        self.world_size = world_size
        self.device = torch.device("cuda" if config.trainer.device == "cuda" and torch.cuda.is_available() else "cpu")
        threads = os.environ.get("AGENTRL_TORCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        seed_everything(config.seed + rank)
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
            self.model.parameters(), optim, total_steps=self.config.trainer.total_steps
        )
        self.shuffle_generator = torch.Generator().manual_seed(self.config.seed + 1000 + self.rank)

    def _all_reduce_gradients(self) -> None:
        """Sum the ranks' gradients: each already carries its share of the global mini-batch."""
        if self.world_size == 1:
            return
        for param in self.model.parameters():
            if param.grad is not None:
                dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)

    def _global_weight(self, mini: Batch, token_weighted: bool) -> float:
        """Model tokens (or sequences) in the mini-batch summed over every rank's shard of it."""
        local = self._weight_of(mini, token_weighted)
        if self.world_size > 1:
            total = torch.tensor([local], dtype=torch.float64)
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
            local = float(total)
        return max(local, 1.0)

    def _optimizer_step(self) -> float:
        self._all_reduce_gradients()
        max_norm = self.optim_config.grad_clip if self.optim_config.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(f"grad_norm is {grad_norm}")
        self.optimizer.step()
        return grad_norm

    def train_epochs(
        self,
        batch: Batch,
        loss_fn: LossFn,
        mini_batch_size: int,
        micro_batch_size: int,
        epochs: int,
        shuffle: bool,
        metric_prefix: str,
        token_weighted: bool = True,
        max_tokens: int | None = None,
    ) -> dict[str, float]:
        """``epochs`` passes over ``batch`` in mini-batches; one optimiser step per mini-batch.

        Gradients accumulate over micro-batches, each weighted by its share of the
        mini-batch's model tokens (``token_weighted``, for token-mean losses) or of its
        sequences (the seq-mean modes), so the accumulated gradient equals that of one
        loss over the whole mini-batch regardless of how it was cut. With several ranks the
        share is of the *global* mini-batch (every rank's shard of it, all-reduced), so the
        summed gradient is the one-rank gradient: a rank holding short responses does not
        weigh its tokens more.
        """
        local_mini = max(1, mini_batch_size // self.world_size)
        history: dict[str, list[float]] = defaultdict(list)
        self.model.train()
        for _ in range(epochs):
            order = batch.shuffled(self.shuffle_generator) if shuffle else batch
            for mini in order.split(local_mini):
                self.optimizer.zero_grad(set_to_none=True)
                total = self._global_weight(mini, token_weighted)
                for micro in micro_batches(mini, micro_batch_size, max_tokens):
                    weight = self._weight_of(micro, token_weighted) / total
                    loss, metrics = loss_fn(micro)
                    if not torch.isfinite(loss):
                        raise NonFiniteLossError(f"{metric_prefix}/loss is {loss.item()}")
                    (loss * weight).backward()
                    for name, value in metrics.items():
                        history[f"{metric_prefix}/{name}"].append(float(value))
                history[f"{metric_prefix}/grad_norm"].append(self._optimizer_step())
        self.scheduler.step()
        summary = {name: float(np.mean(values)) for name, values in history.items()}
        summary[f"{metric_prefix}/lr"] = self.optimizer.param_groups[0]["lr"]
        return summary

    @staticmethod
    def _weight_of(batch: Batch, token_weighted: bool) -> float:
        return float(batch["response_mask"].sum()) if token_weighted else float(len(batch))

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

    def optimizer_state(self) -> dict:
        """For tests and debugging: the optimiser's state dict, on CPU."""
        return self.optimizer.state_dict()
