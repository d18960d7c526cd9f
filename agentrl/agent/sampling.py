"""One turn's sampling settings read from a rollout config: the one mapping every caller uses."""

from __future__ import annotations

from agentrl.config.schema import RolloutConfig
from agentrl.engines.base import SamplingParams


def rollout_sampling(
    rollout: RolloutConfig, *, greedy: bool = False, seed: int | None = None
) -> SamplingParams:
    """Sampling of ``rollout.max_tokens_per_turn`` tokens a turn at its temperature, top-p and
    top-k, from ``seed`` (None: unseeded); or greedy decoding, which ignores those three (every
    engine takes the argmax and reports log-probs at temperature 1), so they keep their defaults."""
    if greedy:
        return SamplingParams(max_new_tokens=rollout.max_tokens_per_turn, greedy=True, seed=seed)
    return SamplingParams(
        max_new_tokens=rollout.max_tokens_per_turn,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        seed=seed,
    )
