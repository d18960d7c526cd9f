"""Run ``TrainableWorker.train_epochs`` on real gloo ranks (spawned processes) for the DP tests.

The model is a bias-free linear map from per-token features to a per-token value; the loss
is the squared error to a per-token target under the response mask, aggregated by any
``loss_agg_mode``. Small enough to compare gradients exactly, real enough that every
token's weight in the gradient shows.
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.config.schema import ExperimentConfig, OptimConfig, UpdateConfig
from agentrl.core.batch import Batch
from agentrl.core.losses import agg_loss
from agentrl.ports import free_port
from agentrl.workers.base import RunContext, TrainableWorker
from tests.support.spawned_ranks import spawn_ranks

FEATURES = 3


def token_batch(model_tokens: list[int], width: int = 8, seed: int = 0) -> Batch:
    """Rows whose response holds ``model_tokens[i]`` model tokens, with random features/targets."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(model_tokens)
    mask = torch.zeros(rows, width)
    for i, count in enumerate(model_tokens):
        mask[i, :count] = 1.0
    return Batch.from_dict(
        {
            "x": torch.randn(rows, width, FEATURES, generator=generator),
            "target": torch.randn(rows, width, generator=generator),
            "response_mask": mask,
            "attention_mask": mask.long(),  # what dynamic micro-batching measures rows by
        }
    )


class LinearWorker(TrainableWorker):
    """A trainable worker around ``Linear(FEATURES, 1)``, initialised identically on every rank."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        port: int | None,
        lr: float,
        loss_agg_mode: str,
        norm_tokens: int | None = None,
    ) -> None:
        super().__init__(RunContext.from_config(ExperimentConfig()), rank, world_size, port)
        self.model = torch.nn.Linear(FEATURES, 1, bias=False)
        with torch.no_grad():
            self.model.weight.copy_(torch.tensor([[0.5, -1.0, 0.25]]))
        self._setup_optimizer(OptimConfig(lr=lr, weight_decay=0.0, grad_clip=0.0))
        self.loss_agg_mode = loss_agg_mode
        self.norm_tokens = norm_tokens

    def loss(self, micro: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        values = self.model(micro["x"]).squeeze(-1)
        loss_mat = (values - micro["target"]).square()
        return agg_loss(loss_mat, micro["response_mask"], self.loss_agg_mode, self.norm_tokens), {}

    def update(self, batch: Batch, mini_batch_size: int, micro_batch_size: int) -> dict[str, Any]:
        schedule = UpdateConfig(
            mini_batch_size=mini_batch_size, micro_batch_size=micro_batch_size, shuffle=False
        )
        weighting = "tokens" if self.loss_agg_mode == "token-mean" else "sequences"
        self.train_epochs(batch, self.loss, schedule, "toy", weighting)
        return {"grad": self.model.weight.grad.clone(), "weight": self.model.weight.detach().clone()}


def _rank_main(rank: int, world_size: int, port: int, jobs: list[tuple[Batch, dict]], queue: Any) -> None:
    """Every job's update on this rank, each on a fresh worker in the one process group the first
    worker made (the later ones join it: ``Worker._join_process_group``)."""
    workers, results = [], []
    try:
        for shard, kwargs in jobs:
            worker = LinearWorker(
                rank, world_size, port, kwargs["lr"], kwargs["loss_agg_mode"], kwargs.get("norm_tokens")
            )
            workers.append(worker)
            result = worker.update(shard, kwargs["mini_batch_size"], kwargs["micro_batch_size"])
            # Plain lists: a tensor put on a queue is shared through a handle that dies with this process.
            results.append({key: value.tolist() for key, value in result.items()})
        queue.put((rank, results))
    finally:
        for worker in reversed(workers):  # the group's owner, the first, leaves it last
            worker.shutdown()


def run_ranks_each(jobs: list[tuple[list[Batch], dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """Each job's ``LinearWorker.update`` (its shards, one a rank, and its settings) on gloo ranks,
    one process each, all jobs in the same processes (a spawn costs seconds); results by job, then
    by rank."""
    world_size = len(jobs[0][0])
    if any(len(shards) != world_size for shards, _ in jobs):
        raise ValueError("every job needs one shard per rank, as many as the first job's")
    port = free_port()
    args = [
        (rank, world_size, port, [(shards[rank], kw) for shards, kw in jobs]) for rank in range(world_size)
    ]
    by_rank = spawn_ranks(_rank_main, args)
    return [
        [
            {key: torch.tensor(value) for key, value in by_rank[rank][job].items()}
            for rank in range(world_size)
        ]
        for job in range(len(jobs))
    ]


def run_single(batch: Batch, **kwargs: Any) -> dict[str, Any]:
    """The same update on one rank, in this process."""
    worker = LinearWorker(0, 1, None, kwargs["lr"], kwargs["loss_agg_mode"], kwargs.get("norm_tokens"))
    return worker.update(batch, kwargs["mini_batch_size"], kwargs["micro_batch_size"])
