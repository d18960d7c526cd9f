"""Sharding a model over a data-parallel group with PyTorch's FSDP2 (``fully_shard``).

``shard_model`` wraps each decoder layer and then the root: parameters, gradients and
optimiser state live 1/N per rank. The weights stay in fp32 (the master copy the optimiser
steps); with a ``compute_dtype`` of bf16/fp16 FSDP casts the gathered parameters for the
forward and backward and reduces gradients in fp32 (``MixedPrecisionPolicy``). With
``cpu_offload`` the shards live on the CPU and the optimiser steps there.

Gradients are *summed* over ranks, never averaged: ``optimizer_step`` already weights each
micro-batch by its share of the global mini-batch. The divide factor is set on every FSDP
unit (setting it on the root alone leaves the layers averaging) and forced to a plain SUM
reduction (gloo has no pre-multiplied sum).

``full_state_dict`` gathers the unsharded fp32 weights (for an HF directory);
``stream_full_tensors`` gathers them one tensor at a time (for the rollout engine's copy);
``sharded_state`` / ``load_sharded_state`` are the per-rank model and optimiser state for
``torch.distributed.checkpoint``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)
from torch.distributed.tensor import DTensor

from agentrl.models.update import sum_over_ranks


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of ``model``: modules whose class the model marks as not to be
    split (``_no_split_modules``, e.g. ``Qwen2DecoderLayer``), the FSDP unit boundaries."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(model).__name__}: no decoder layers found to shard (no module class listed in "
            "_no_split_modules); FSDP needs per-layer units"
        )
    return layers


def shard_model(
    model: nn.Module, compute_dtype: torch.dtype = torch.float32, cpu_offload: bool = False
) -> nn.Module:
    """FSDP2 per decoder layer plus the root, fp32 master weights, ``compute_dtype`` compute."""
    if not dist.is_initialized():
        raise RuntimeError("shard_model needs an initialised torch.distributed process group")
    low_precision = compute_dtype != torch.float32
    policy = MixedPrecisionPolicy(
        param_dtype=compute_dtype if low_precision else None,
        reduce_dtype=torch.float32 if low_precision else None,
    )
    offload = CPUOffloadPolicy() if cpu_offload else OffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy, offload_policy=offload)
    fully_shard(model, mp_policy=policy, offload_policy=offload)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


class ShardedSync:
    """``GradientSync`` under FSDP: totals are all-reduced; gradients were already summed
    (reduce-scattered) by FSDP during backward."""

    def total(self, value: float) -> float:
        return sum_over_ranks(value)

    def sum_gradients(self, model: nn.Module) -> None:
        return None


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded weights on the CPU (a collective: every rank must call it; rank 0 gets
    the tensors, the others an empty dict)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)


def stream_full_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The unsharded weights one tensor at a time, each gathered only when the consumer reaches
    it (for the rollout engine's copy: at most one full tensor exists beyond the shards).

    A collective per sharded tensor: every rank must consume the whole stream, in order."""
    for name, tensor in model.state_dict().items():
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        yield name, tensor.detach()


def save_sharded_state(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Model and optimiser shards of every rank with ``torch.distributed.checkpoint``."""
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(directory))


def load_sharded_state(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Restore what ``save_sharded_state`` wrote into ``model`` and ``optimizer``, at any world size:
    ``torch.distributed.checkpoint`` reads each rank's part of the saved tensors for the layout it has."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(directory))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
