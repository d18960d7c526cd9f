"""One turn's sampling settings read from the rollout config."""

from __future__ import annotations

import asyncio

from agentrl.agent.sampling import rollout_sampling
from agentrl.config.schema import RolloutConfig
from agentrl.engines import build_engine
from agentrl.engines.base import SamplingParams

ROLLOUT = RolloutConfig(temperature=0.7, top_p=0.9, top_k=20, max_tokens_per_turn=12)


def test_sampling_carries_the_rollouts_temperature_top_p_top_k_budget_and_seed():
    assert rollout_sampling(ROLLOUT, seed=5) == SamplingParams(
        max_new_tokens=12, temperature=0.7, top_p=0.9, top_k=20, greedy=False, seed=5
    )
    assert rollout_sampling(ROLLOUT).seed is None


def test_greedy_decoding_keeps_the_budget_and_the_seed_and_leaves_the_sampling_knobs_neutral():
    assert rollout_sampling(ROLLOUT, greedy=True, seed=3) == SamplingParams(
        max_new_tokens=12, greedy=True, seed=3
    )


def test_greedy_decoding_picks_the_same_tokens_whatever_the_rollouts_temperature(tiny_model_dir, tokenizer):
    """Why greedy settings may drop temperature, top-p and top-k: the engine ignores them."""
    engine = build_engine("hf", model_path=tiny_model_dir)
    prompts = [tokenizer("Question: who wrote it?")["input_ids"], tokenizer("a b c")["input_ids"]]
    with_knobs = SamplingParams(max_new_tokens=12, temperature=0.7, top_p=0.9, top_k=20, greedy=True)
    ours, theirs = (
        asyncio.run(engine.generate_batch(prompts, params))
        for params in (rollout_sampling(ROLLOUT, greedy=True), with_knobs)
    )
    assert [r.token_ids for r in ours] == [r.token_ids for r in theirs]
    assert [r.log_probs for r in ours] == [r.log_probs for r in theirs]
