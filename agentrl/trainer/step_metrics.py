"""The metrics the driver itself produces in one PPO step: stage wall times and its stages' figures.

The roles' metrics (rollout, updates, reward) come back from their workers under their final
names; these are the ones the single controller computes on the batch it assembled.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from agentrl.core.batch import Batch
from agentrl.core.masked import masked_mean
from agentrl.workers.base import OldLogProbSource


class StepTimer:
    """Wall time per stage of one step, as ``timing_s/<stage>``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"timing_s/{k}": v for k, v in self.seconds.items()}


def step_metrics(batch: Batch, use_critic: bool, old_log_prob_source: OldLogProbSource) -> dict[str, float]:
    """What the driver's own stages produced: the reward placed on tokens, advantages, returns,
    values and, when stage 2 recomputed π_old, how far the engine's log-probs are from it (under
    ``update_forward`` the actor's update reports ``rollout/logprob_diff`` from its forward)."""
    mask = batch["response_mask"]
    metrics = {
        "reward/score/mean": float(batch["scores"].mean()),
        "reward/kl_penalized/mean": float(batch["token_level_rewards"].sum(-1).mean()),
        "advantages/mean": float(masked_mean(batch["advantages"], mask)),
        "returns/mean": float(masked_mean(batch["returns"], mask)),
    }
    if old_log_prob_source == "recomputed":
        metrics["rollout/logprob_diff"] = float(
            masked_mean((batch["old_log_probs"] - batch["rollout_log_probs"]).abs(), mask)
        )
    if use_critic:
        metrics["critic/values/mean"] = float(masked_mean(batch["values"], mask))
    return metrics


def bookkeeping_metrics(
    batch: Batch, step_seconds: float, global_step: int, filtered_overlong: int
) -> dict[str, float]:
    """Throughput over the whole step, the step counter, and the prompts left out as too long."""
    return {
        "throughput/tokens_per_s": float(batch["attention_mask"].sum()) / max(step_seconds, 1e-9),
        "training/global_step": float(global_step),
        "data/filtered_overlong_prompts": float(filtered_overlong),
    }
