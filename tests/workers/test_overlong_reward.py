"""The reward role's soft overlong punishment: a response's length against the response budget,
added to whichever score it gave."""

from __future__ import annotations

import pytest
import torch

from agentrl.agent.collate import collate
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.config.schema import ExperimentConfig, RewardConfig
from agentrl.workers.base import RunContext
from agentrl.workers.reward import RuleRewardWorker

BUDGET = 40


def _trajectory(model: int, observation: int, answer: str) -> Trajectory:
    segments = [Segment.MODEL] * model + [Segment.OBSERVATION] * observation
    return Trajectory(
        prompt=PromptSpec([1, 2], "nq", {"target": ["Paris"]}),
        group_id="g",
        uid=f"u{model}-{observation}",
        response_ids=[5] * len(segments),
        segments=segments,
        log_probs=[0.0] * len(segments),
        finished=True,
        answer=answer,
    )


def _worker(reward: RewardConfig) -> RuleRewardWorker:
    config = ExperimentConfig()
    config.data.max_response_length = BUDGET
    return RuleRewardWorker(reward, RunContext.from_config(config))


def test_the_soft_penalty_counts_every_response_token_and_is_added_to_the_score():
    # lengths 20 (before the 30-token mark), 35 (half-way down the 10-token buffer), 40 (the budget)
    batch = collate(
        [_trajectory(20, 0, "Paris"), _trajectory(15, 20, "Paris"), _trajectory(30, 10, "Rome")], 0
    )
    batch["response_text"] = ["<answer>x</answer>"] * 3
    plain, _ = _worker(RewardConfig()).compute_scores(batch)
    shaped, metrics = _worker(RewardConfig(overlong_buffer=10, overlong_penalty_factor=0.5)).compute_scores(
        batch
    )
    assert plain.tolist() == [1.0, 1.0, 0.0]
    assert torch.allclose(shaped, torch.tensor([1.0, 1.0 - 0.25, -0.5]))
    assert metrics["reward/overlong_penalty"] == pytest.approx(-0.75 / 3)
    assert metrics["reward/overlong_penalized"] == pytest.approx(2 / 3)


def test_without_a_buffer_the_scores_and_metrics_are_untouched():
    batch = collate([_trajectory(40, 0, "Paris")], 0)
    batch["response_text"] = ["<answer>x</answer>"]
    scores, metrics = _worker(RewardConfig()).compute_scores(batch)
    assert scores.tolist() == [1.0] and not any("overlong" in k for k in metrics)


def test_a_score_an_agent_harness_gave_replaces_the_rules_and_the_penalties_still_apply():
    rated = _trajectory(20, 0, "Rome")  # wrong by the rule: 0
    rated.outcome_reward = 0.75
    batch = collate([rated, _trajectory(20, 0, "Paris")], 0)
    batch["response_text"] = ["<answer>x</answer>"] * 2
    scores, metrics = _worker(RewardConfig()).compute_scores(batch)
    assert scores.tolist() == [0.75, 1.0] and metrics["reward/harness_scored"] == 0.5
    shaped, _ = _worker(RewardConfig(overlong_buffer=30, overlong_penalty_factor=1.0)).compute_scores(batch)
    assert torch.allclose(shaped, torch.tensor([0.75, 1.0]) - 10 / 30)
