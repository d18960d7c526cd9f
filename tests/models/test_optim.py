"""Learning-rate schedules: warmup then constant / cosine / linear decay."""

import math

import pytest
import torch

from agentrl.config.schema import OptimConfig
from agentrl.models.optim import build_optimizer, lr_multiplier


def test_linear_warmup_then_constant():
    cfg = OptimConfig(warmup_steps=4)
    assert [lr_multiplier(s, cfg, 100) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_warmup_ratio_and_cosine_floor():
    cfg = OptimConfig(warmup_ratio=0.1, lr_schedule="cosine", min_lr_ratio=0.1)
    assert lr_multiplier(0, cfg, 100) == pytest.approx(0.1)
    assert lr_multiplier(10, cfg, 100) == pytest.approx(1.0)
    midway = 10 + 45
    assert lr_multiplier(midway, cfg, 100) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_multiplier(100, cfg, 100) == pytest.approx(0.1)


def test_linear_decay_and_scheduler_follows_the_multiplier():
    cfg = OptimConfig(lr=1.0, lr_schedule="linear", weight_decay=0.0)
    assert lr_multiplier(50, cfg, 100) == pytest.approx(0.5)
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer, scheduler = build_optimizer([param], cfg, total_steps=10)
    seen = []
    for _ in range(3):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([1.0, 0.9, 0.8])
    with pytest.raises(ValueError, match="lr_schedule"):
        lr_multiplier(0, OptimConfig(lr_schedule="step"), 10)
