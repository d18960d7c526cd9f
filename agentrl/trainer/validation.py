"""Validation during training: greedy rollouts of the validation prompts, scored by ``agentrl.eval``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from agentrl.config.schema import DataConfig
from agentrl.eval.records import records_of
from agentrl.eval.report import flat_metrics
from agentrl.tool_identity import ToolIdentity
from agentrl.trainer.step_sampler import StepSampler


def validation_prompts(prompts: Sequence[Any], limit: int | None, seed: int) -> list[Any]:
    """``data.val_limit`` of the prompts, the same seeded pick at every validation (all without one)."""
    if limit is None or limit >= len(prompts):
        return list(prompts)
    picked = np.random.default_rng(seed).choice(len(prompts), limit, replace=False)
    return [prompts[i] for i in sorted(picked)]


def validate(
    sampler: StepSampler,
    prompts: Sequence[Any],
    data: DataConfig,
    step: int,
    tokenizer: Any,
    tools: ToolIdentity,
) -> dict[str, float]:
    """``val/<source>/<metric>`` per data source and ``val/all/<metric>`` over all of them, from one
    greedy rollout of each prompt in batches of ``data.val_batch_size``; the records count the calls
    of each of the run's ``tools`` by name. Also ``timing_s/validation``: the driver's wait for all
    of it, which ``training/elapsed_s`` counts and ``timing_s/step`` does not."""
    began = time.perf_counter()
    sampler.drain()  # where the actor's engine serves one rollout at a time
    records = []
    size = data.val_batch_size
    for start in tqdm(range(0, len(prompts), size), desc="validating", leave=False):
        rollout = sampler.generate(list(prompts[start : start + size]), step, validate=True)
        records += records_of(rollout.trajectories, tokenizer)
    waited = {"timing_s/validation": time.perf_counter() - began}
    return flat_metrics(records, "val", tools=tools.names) | waited
