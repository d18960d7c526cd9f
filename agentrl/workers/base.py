"""What every role's worker shares: the run context, process setup, model layout and the update loop.

A worker is a plain Python object (testable without Ray) that the worker group turns into
a Ray actor. It is built from its own role's config section plus a ``RunContext`` (the few
run-wide values every role needs, computed once by the driver). Workers of one role form a
data-parallel group over torch.distributed (gloo on CPU, NCCL on GPU): under ``dp`` each
holds a full model replica, under ``fsdp`` a shard of it (``agentrl.models.sharding``); each
trains on its shard of every mini-batch, and ``optimizer_step`` weights each micro-batch by
its share of the *global* mini-batch and sums the ranks' gradients, so N ranks take the step
one rank would take. Weights an optimiser steps are always fp32 (the master copy), whatever
dtype the forward and backward compute in.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import torch
import torch.distributed as dist

from agentrl.cluster.data_plane import join_group
from agentrl.config.schema import (
    Device,
    ExperimentConfig,
    OptimConfig,
    PartialRollout,
    Strategy,
    UpdateConfig,
    staleness_bound,
)
from agentrl.core.batch import Batch
from agentrl.models.optim import build_optimizer
from agentrl.models.sharding import ShardedSync, load_sharded_state, save_sharded_state, shard_model
from agentrl.models.update import GradientSync, LossFn, ProcessGroupSync, SingleProcess, optimizer_step
from agentrl.seeding import rng_state, seed_everything, set_rng_state
from agentrl.tool_identity import FORMAT_TRAITS, SEARCH_ONLY, ToolIdentity
from agentrl.workers.os_memory import process_memory_gib, release_free_heap

STRATEGIES: tuple[str, ...] = get_args(Strategy)  # fsdp: FSDP2 shards (models/sharding.py)
DEVICES: tuple[str, ...] = get_args(Device)

# Where the PPO ratio's π_old comes from: "recomputed" by stage 2's no-grad pass under the current
# weights, or the actor's "update_forward" itself, detached (actor.skip_old_log_prob: one on-policy
# optimiser step, so π_old = π_θ there).
OldLogProbSource = Literal["recomputed", "update_forward"]


@dataclass(frozen=True)
class RunContext:
    """Run-wide values a worker needs beside its own config section, computed once."""

    seed: int
    device: str  # cpu | cuda
    total_steps: int  # training steps the lr schedules span
    max_prompt_length: int
    max_response_length: int  # the response budget; also the Dr.GRPO loss normaliser
    strategy: str = "dp"  # dp | fsdp (resources.strategy)
    # how many updates old a trained token may be (config.schema.staleness_bound); above 0 the
    # next rollout runs during the update
    max_staleness: int = 0
    # what a rollout in flight does with each update's weights (trainer.partial_rollout)
    partial_rollout: PartialRollout = "off"
    old_log_prob_source: OldLogProbSource = "recomputed"  # decided here, once, for driver and actor
    # the run's tools (tags, names) and their call format, as the driver built them once (tools.check)
    tools: ToolIdentity = SEARCH_ONLY
    socket_ifname: str | None = None  # resources.socket_ifname: the data plane's interface
    rendezvous_timeout_s: float = 120.0  # resources.rendezvous_timeout_s: how long ranks wait to meet

    @property
    def overlap_rollout(self) -> bool:
        """Whether the next rollout runs during the update (a rollout drawn ahead)."""
        return self.max_staleness > 0

    @classmethod
    def from_config(cls, config: ExperimentConfig, tools: ToolIdentity | None = None) -> RunContext:
        """``tools``: the identity of ``config.actor.rollout.tools`` from the driver's check of them
        (``tools.check.check_tools``); without it, the default search tool in the config's
        ``actor.rollout.tool_format``."""
        if tools is None:
            tools = ToolIdentity.of_tags(SEARCH_ONLY.tags, FORMAT_TRAITS[config.actor.rollout.tool_format])
        return cls(
            seed=config.seed,
            device=config.trainer.device,
            total_steps=config.trainer.total_steps,
            max_prompt_length=config.data.max_prompt_length,
            max_response_length=config.data.max_response_length,
            strategy=config.resources.strategy,
            max_staleness=staleness_bound(config.trainer),
            partial_rollout=config.trainer.partial_rollout,
            old_log_prob_source="update_forward" if config.actor.skip_old_log_prob else "recomputed",
            tools=tools,
            socket_ifname=config.resources.socket_ifname,
            rendezvous_timeout_s=config.resources.rendezvous_timeout_s,
        )


def _node_address(master_addr: str) -> str:
    """This worker's node address: Ray's for it on a Ray actor, else the master's (one host)."""
    # a worker outside Ray (tests, spawned ranks) has not imported ray: no need to pay for it here
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.util.get_node_ip_address()
    return master_addr


class Worker:
    """Base of the role workers: device, rank, torch threads and the optional process group."""

    collective = True  # its ranks meet in a process group (a rollout worker's never do)
    shards = True  # under fsdp it shards its model (a rollout worker holds a whole one)

    def __init__(
        self,
        context: RunContext,
        rank: int = 0,
        world_size: int = 1,
        master_port: int | None = None,
        master_addr: str | None = None,
    ):
        """``master_addr``/``master_port``: where rank 0 listens (its node's address, so ranks on
        other nodes can join); the address defaults to this host for single-node groups."""
        self.context = context
        self.rank = rank
        self.world_size = world_size
        use_cuda = context.device == "cuda" and torch.cuda.is_available()
        self.device = torch.device("cuda" if use_cuda else "cpu")
        threads = os.environ.get("AGENTRL_TORCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        seed_everything(context.seed + rank)
        # Whether this worker created the default process group (and so may destroy it): a library
        # in the same process (vLLM in-process) may own one already, and destroying the default
        # group tears down every group in the process, theirs included.
        self._owns_process_group = False
        sharded = context.strategy == "fsdp" and self.shards  # FSDP shards over a process group, even of one
        if self.collective and (world_size > 1 or sharded):
            self._join_process_group(master_port, master_addr)

    def _join_process_group(self, master_port: int | None, master_addr: str | None) -> None:
        """Create the default process group, or join the one this process already has when its
        ranks are ours (it then stays with whoever created it)."""
        rank, world_size = self.rank, self.world_size
        if dist.is_initialized():
            if dist.get_world_size() != world_size or dist.get_rank() != rank:
                raise RuntimeError(
                    f"this process already has a torch.distributed group of world size "
                    f"{dist.get_world_size()} (rank {dist.get_rank()}), created outside the worker; "
                    f"the worker needs rank {rank} of {world_size}"
                )
            return
        if master_port is None and world_size > 1:
            raise ValueError("a worker group of size > 1 needs a master_port for torch.distributed")
        if master_port is None:
            from agentrl.ports import free_port

            master_port = free_port()
        master_addr = master_addr or os.environ.get("MASTER_ADDR", "127.0.0.1")
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        context = self.context
        join_group(
            backend,
            rank,
            world_size,
            master_addr,
            master_port,
            node_address=_node_address(master_addr),
            timeout_s=context.rendezvous_timeout_s,
            configured_ifname=context.socket_ifname,
        )
        self._owns_process_group = True

    def ping(self) -> int:
        return self.rank

    def where(self) -> tuple[str, str]:
        """The Ray node this worker runs on: its id and its address (what a failure names)."""
        import ray  # only ever called on a Ray actor

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def shutdown(self) -> None:
        if self._owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_process_group = False


class RoleWorker(Worker):
    """A role's worker, built the one way every role is: ``cls(section, context, rank, world_size,
    master_port, master_addr)`` (what ``WorkerGroup`` calls), from its own config ``section``.

    The base places the worker in its group; the role builds itself from its section in ``_setup``."""

    def __init__(
        self,
        section: Any,
        context: RunContext,
        rank: int = 0,
        world_size: int = 1,
        master_port: int | None = None,
        master_addr: str | None = None,
    ):
        super().__init__(context, rank, world_size, master_port, master_addr)
        self._setup(section)

    def _setup(self, section: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} builds itself from its section in _setup")


class ModelWorker(Worker):
    """A worker holding a model laid out for its strategy and computing in its compute dtype.

    Under ``dp`` a bf16/fp16 compute dtype runs forward and backward under autocast over the
    fp32 weights; under ``fsdp`` the model is sharded per decoder layer and FSDP's mixed
    precision casts the gathered weights (a frozen model may also be held in the compute dtype).
    """

    model: torch.nn.Module
    compute_dtype: torch.dtype = torch.float32

    def _lay_out(self, compute_dtype: torch.dtype, cpu_offload: bool = False) -> None:
        """Shard ``self.model`` under fsdp; under dp it stays a full replica on this device."""
        self.compute_dtype = compute_dtype
        if self.context.strategy == "fsdp":
            weights = next(self.model.parameters()).dtype
            # fp32 weights compute in the compute dtype through FSDP's mixed precision; weights
            # already held in the compute dtype (a frozen reference) need no casting.
            shard_model(self.model, compute_dtype if weights == torch.float32 else torch.float32, cpu_offload)

    def on_device(self, batch: Batch) -> Batch:
        """``batch`` where this worker computes: the driver sends CPU tensors, and a worker on a GPU
        must move them to its device before a forward (results go back to the driver on the CPU)."""
        return batch if self.device.type == "cpu" else batch.to(self.device)

    def compute(self) -> contextlib.AbstractContextManager:
        """The context forward passes run in: autocast to the compute dtype for fp32 dp weights."""
        fp32_weights = next(self.model.parameters()).dtype == torch.float32
        if self.context.strategy == "dp" and fp32_weights and self.compute_dtype != torch.float32:
            return torch.autocast(self.device.type, dtype=self.compute_dtype)
        return contextlib.nullcontext()


class TrainableWorker(ModelWorker):
    """A worker that owns a trainable model, its optimiser and lr schedule."""

    def _setup_optimizer(self, optim: OptimConfig) -> None:
        low = [n for n, p in self.model.named_parameters() if p.requires_grad and p.dtype != torch.float32]
        if low:
            # Stepping bf16/fp16 weights rounds most small updates away: the run would not learn.
            raise TypeError(f"the optimiser must step fp32 master weights; '{low[0]}' is in low precision")
        self.optim_config = optim
        self.optimizer, self.scheduler = build_optimizer(
            self.model.parameters(), optim, total_steps=self.context.total_steps
        )
        self.shuffle_generator = torch.Generator().manual_seed(self.context.seed + 1000 + self.rank)
        self.sync: GradientSync
        if self.context.strategy == "fsdp":
            self.sync = ShardedSync()
        else:
            self.sync = ProcessGroupSync() if self.world_size > 1 else SingleProcess()

    def train_epochs(
        self, batch: Batch, loss_fn: LossFn, update: UpdateConfig, metric_prefix: str, weighting: str
    ) -> dict[str, float]:
        """``update.epochs`` passes over ``batch`` in mini-batches; one ``optimizer_step`` each.

        ``batch`` is this rank's shard (``mini_batch_shards``): its i-th slice of
        ``mini_batch_size // world_size`` rows is its part of the i-th global mini-batch.
        ``weighting`` is ``tokens`` for token-mean losses, ``sequences`` for the seq-mean modes.
        The loss's metrics come back as ``<metric_prefix>/<name>``, means over micro-batches,
        except a name that carries its own prefix (``rollout/logprob_diff``), kept as it is.
        """
        batch = self.on_device(batch)
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
                    packed=update.pack_sequences,
                    weighting=weighting,
                    grad_clip=self.optim_config.grad_clip,
                    sync=self.sync,
                    what=metric_prefix,
                )
                for name, values in step.metrics.items():
                    # a name with its own prefix is already final: its producer names another place
                    history[name if "/" in name else f"{metric_prefix}/{name}"].extend(values)
                history[f"{metric_prefix}/grad_norm"].append(step.grad_norm)
        self.scheduler.step()
        release_free_heap()  # the rollout that follows should not carry the update's freed peak
        summary = {name: float(np.mean(values)) for name, values in history.items()}
        summary[f"{metric_prefix}/lr"] = self.optimizer.param_groups[0]["lr"]
        return summary | {f"{metric_prefix}/{name}": value for name, value in process_memory_gib().items()}

    # --- checkpoints ----------------------------------------------------------------

    def save_training_state(self, directory: str, name: str) -> None:
        """Optimiser, scheduler and RNG state. dp: rank 0 writes (replicas are identical);
        fsdp: every rank writes its model and optimiser shards (``torch.distributed.checkpoint``,
        ``{name}_sharded/``) and its own schedule and RNG state."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        local = {
            "scheduler": self.scheduler.state_dict(),
            "shuffle_generator": self.shuffle_generator.get_state(),
            "rng": rng_state(),
        }
        if self.context.strategy == "fsdp":
            save_sharded_state(path / f"{name}_sharded", self.model, self.optimizer)
            torch.save(local, path / f"{name}_rank{self.rank}_state.pt")
        elif self.rank == 0:
            torch.save(local | {"optimizer": self.optimizer.state_dict()}, path / f"{name}_training_state.pt")

    def load_training_state(self, directory: str, name: str) -> None:
        """What ``save_training_state`` wrote, at any world size (fsdp: the weights come back too).

        Under fsdp the distributed checkpoint reshards the model and optimiser to this group's
        layout, and rank r reads rank r's schedule, shuffle and RNG state; a rank the writing run
        did not have (a larger group) reads rank 0's, so its shuffles repeat rank 0's order. A run
        a supervisor restarts on fewer nodes resumes this way."""
        path = Path(directory)
        if self.context.strategy == "fsdp":
            load_sharded_state(path / f"{name}_sharded", self.model, self.optimizer)
            own = path / f"{name}_rank{self.rank}_state.pt"
            state = torch.load(own if own.exists() else path / f"{name}_rank0_state.pt", weights_only=False)
        else:
            state = torch.load(path / f"{name}_training_state.pt", weights_only=False)
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.shuffle_generator.set_state(state["shuffle_generator"])
        set_rng_state(state["rng"])
