"""One optimiser step over a mini-batch, shared by SFT and PPO.

``optimizer_step`` accumulates gradients over micro-batches, each loss weighted by its
micro-batch's share of the mini-batch, so the accumulated gradient is that of ONE loss over
the whole mini-batch however it was cut:

    g = Σ_k (w_k / W) ∇L_k        W = Σ_k w_k over every micro-batch of every rank

with w_k the micro-batch's model tokens (``weighting="tokens"``, for token-mean losses) or
its sequences (``"sequences"``, for the seq-mean modes). A loss given as a *sum* over its
weight units (``reduction="sum"``, e.g. SFT's summed NLL S_k) enters as S_k / W instead,
the same gradient without dividing by w_k and multiplying it back. Under data parallelism W is summed
over the ranks first and the ranks' gradients are summed after, so N ranks take the step
one rank would take on the union of their shards. Then the global gradient norm is clipped
and checked: a NaN/inf loss or gradient norm stops the step before the optimiser touches
the weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.distributed as dist

from agentrl.core.batch import Batch
from agentrl.models.forward import micro_batches

LossFn = Callable[[Batch], tuple[torch.Tensor, dict[str, torch.Tensor]]]
WEIGHTINGS = ("tokens", "sequences")
REDUCTIONS = ("mean", "sum")


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient norm became NaN/inf; the message names the metric."""


class GradientSync(Protocol):
    """How the ranks of a data-parallel group agree on one step (a no-op on one rank)."""

    def total(self, value: float) -> float:
        """``value`` summed over the ranks."""
        ...

    def sum_gradients(self, model: torch.nn.Module) -> None:
        """Each parameter's gradient summed over the ranks, in place."""
        ...


class SingleProcess:
    """One rank: nothing to agree on."""

    def total(self, value: float) -> float:
        return value

    def sum_gradients(self, model: torch.nn.Module) -> None:
        return None


def sum_over_ranks(value: float) -> float:
    """``value`` summed over the default group's ranks, in a tensor where its backend reduces:
    NCCL only reduces CUDA tensors (a CPU one fails with "No backend type associated with device
    type cpu"), gloo CPU ones."""
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return float(tensor)


class ProcessGroupSync:
    """The default torch.distributed process group; gradients are summed in flat buckets
    (one collective per ~``bucket_mb`` MiB instead of one per parameter)."""

    def __init__(self, bucket_mb: float = 64.0) -> None:
        self.bucket_bytes = int(bucket_mb * 2**20)

    def total(self, value: float) -> float:
        return sum_over_ranks(value)

    def sum_gradients(self, model: torch.nn.Module) -> None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        bucket: list[torch.Tensor] = []
        size = 0
        for grad in grads:
            bucket.append(grad)
            size += grad.numel() * grad.element_size()
            if size >= self.bucket_bytes:
                _all_reduce_bucket(bucket)
                bucket, size = [], 0
        if bucket:
            _all_reduce_bucket(bucket)


def _all_reduce_bucket(grads: list[torch.Tensor]) -> None:
    """Sum a list of same-device gradients across ranks with one collective per dtype."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for grad in grads:
        by_dtype.setdefault(grad.dtype, []).append(grad)
    for same in by_dtype.values():
        flat = torch.cat([g.reshape(-1) for g in same])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for grad in same:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()


def weight_of(batch: Batch, weighting: str) -> float:
    """Model tokens (``tokens``) or sequences (``sequences``) in ``batch``."""
    if weighting == "tokens":
        return float(batch["response_mask"].sum())
    if weighting == "sequences":
        return float(len(batch))
    raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")


@dataclass
class StepResult:
    """One step: the mini-batch loss (this rank's weighted share), the clipped-from gradient
    norm, and each metric of every micro-batch."""

    loss: float
    grad_norm: float
    metrics: dict[str, list[float]] = field(default_factory=dict)


def accumulate_gradients(
    micros: Iterable[Batch],
    loss_fn: LossFn,
    total_weight: float,
    weighting: str,
    what: str,
    reduction: str = "mean",
) -> tuple[float, dict[str, list[float]]]:
    """Backward of Σ_k (w_k / W) L_k (or Σ_k S_k / W for sums); returns that loss and the metrics."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    loss_sum, metrics = 0.0, {}
    for micro in micros:
        loss, micro_metrics = loss_fn(micro)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"{what}/loss is {loss.item()}")
        if reduction == "sum":
            (loss / total_weight).backward()
            loss_sum += float(loss.detach()) / total_weight
        else:
            share = weight_of(micro, weighting) / total_weight
            (loss * share).backward()
            loss_sum += float(loss.detach()) * share
        for name, value in micro_metrics.items():
            metrics.setdefault(name, []).append(float(value))
    return loss_sum, metrics


def optimizer_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    mini_batch: Batch,
    loss_fn: LossFn,
    *,
    micro_batch_size: int,
    max_tokens: int | None = None,
    packed: bool = False,
    weighting: str = "tokens",
    reduction: str = "mean",
    grad_clip: float = 0.0,
    sync: GradientSync | None = None,
    what: str = "update",
) -> StepResult:
    """Zero, accumulate over micro-batches, sum over ranks, clip, check, step (module docstring).

    ``max_tokens`` cuts micro-batches by token cost instead of ``micro_batch_size`` (real
    tokens when ``packed``: ``loss_fn`` computes on packed rows, padded cost otherwise);
    ``reduction`` says whether ``loss_fn`` returns a mean or a sum over its weight units;
    ``grad_clip <= 0`` disables clipping; ``what`` names the loss in error messages.
    """
    sync = sync or SingleProcess()
    optimizer.zero_grad(set_to_none=True)
    total = max(sync.total(weight_of(mini_batch, weighting)), 1.0)
    micros = micro_batches(mini_batch, micro_batch_size, max_tokens, packed)
    loss, metrics = accumulate_gradients(micros, loss_fn, total, weighting, what, reduction)
    sync.sum_gradients(model)
    max_norm = grad_clip if grad_clip > 0 else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    if not math.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLossError(f"{what}/grad_norm is {grad_norm}")
    optimizer.step()
    return StepResult(loss, grad_norm, metrics)
