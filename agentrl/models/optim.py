"""Optimiser and learning-rate schedule from an ``OptimConfig``."""

from __future__ import annotations

import math
from typing import get_args

import torch

from agentrl.config.schema import LrSchedule, OptimConfig

LR_SCHEDULES: tuple[str, ...] = get_args(LrSchedule)


def warmup_steps_of(config: OptimConfig, total_steps: int) -> int:
    if config.warmup_steps > 0:
        return config.warmup_steps
    return int(config.warmup_ratio * total_steps)


def lr_multiplier(step: int, config: OptimConfig, total_steps: int) -> float:
    """Share of the peak lr at ``step`` (0-based).

        warmup:   (step + 1) / W                          for step < W
        constant: 1
        cosine:   m + (1 − m) · ½ (1 + cos(π · p))        p = progress after warmup in [0, 1]
        linear:   m + (1 − m) · (1 − p)

    with m = ``min_lr_ratio``.
    """
    warmup = warmup_steps_of(config, total_steps)
    if step < warmup:
        return (step + 1) / warmup
    if config.lr_schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    floor = config.min_lr_ratio
    if config.lr_schedule == "cosine":
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    if config.lr_schedule == "linear":
        return floor + (1 - floor) * (1 - progress)
    raise ValueError(f"unknown lr_schedule '{config.lr_schedule}'; expected one of {list(LR_SCHEDULES)}")


def build_optimizer(
    params, config: OptimConfig, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW and a per-training-step LambdaLR following ``lr_multiplier``."""
    trainable = [p for p in params if p.requires_grad]
    optimizer = torch.optim.AdamW(
        trainable, lr=config.lr, betas=tuple(config.betas), weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, config, total_steps)
    )
    return optimizer, scheduler
