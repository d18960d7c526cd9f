"""The reward role: a score per trajectory, placed on its last model token by the trainer.

The default is rule-based (``agentrl.rewards``: exact match on the final ``<answer>``,
optionally format-aware, the format check in the run's tool identity ``RunContext.tools``: the
tag grammar knowing the run's tags where the format's calls are in the text (``tags``), the
rollout's per-row record of the calls (the batch's ``tool_calls``, ``tool_calls_invalid``,
``tool_outputs``) where they are not (``hermes``); each tool's calls counted under its name);
``reward.reward_model_path`` adds a learned scalar reward model whose output replaces the
rule score. ``reward.format_penalty`` (> 0) is subtracted from the score of every
trajectory with a malformed tool call or a turn that neither called nor answered (the
rollout's per-row counts, the batch's ``tool_calls_invalid``), whichever scores it.
``reward.overlong_buffer`` (> 0) adds DAPO's soft overlong punishment to every score
(``core.overlong.soft_overlong_penalty`` of the response's length against
``data.max_response_length``), whichever scores it.

With ``reward.judge.url`` set, the LLM judge (``rewards/judge.py``) scores each trajectory's
answer in place of the rule (``workers/judged.py``: its last row sent, the samples of one
``group_id`` judged together under ``group`` mode); the rule's metrics are still reported beside
``reward/judged`` and the judge's ``judge/*``, and a harness's ``outcome_reward`` and the
penalties apply after it as they do to the rule's score.

Turn rewards (``turn_scores``, computed on the driver: rule arithmetic on the rollout's
record, whichever worker scores the outcome): each turn's reward, the tools' own
(``ToolResult.reward``) plus the rules of ``reward.turn`` (``rewards/turns.py``), placed on
that turn's last sampled token in the row (step) that holds it, with
``reward/turn_reward/turn_<k>`` the mean reward of turn k over the trajectories that have it.
"""

from __future__ import annotations

import numpy as np
import torch

from agentrl.config.schema import RewardConfig
from agentrl.core.batch import Batch
from agentrl.core.masked import last_true_index
from agentrl.core.overlong import soft_overlong_penalty
from agentrl.models.forward import no_grad_over_micro_batches
from agentrl.models.layout import trim_padding
from agentrl.models.loading import build_value_model
from agentrl.rewards import RolloutCalls, score_batch
from agentrl.rewards.judge import LLMJudge
from agentrl.rewards.turns import rule_turn_rewards
from agentrl.workers.base import RoleWorker
from agentrl.workers.judged import judged_scores


def with_format_penalty(
    scores: torch.Tensor, batch: Batch, penalty: float, metrics: dict[str, float]
) -> torch.Tensor:
    """``scores`` less ``penalty`` where a row has any malformed call or invalid turn; with a
    penalty, ``reward/format_penalized`` (the share of rows penalised) joins ``metrics``."""
    if penalty == 0:
        return scores
    if "tool_calls_invalid" not in batch:
        raise KeyError("reward.format_penalty needs the batch's tool_calls_invalid (agentrl.agent.collate)")
    hit = torch.tensor([bool(counts) and sum(counts.values()) > 0 for counts in batch["tool_calls_invalid"]])
    metrics["reward/format_penalized"] = float(hit.float().mean()) if len(hit) else 0.0
    return scores - penalty * hit.to(scores.dtype)


def with_overlong_penalty(
    scores: torch.Tensor, batch: Batch, reward: RewardConfig, max_length: int, metrics: dict[str, float]
) -> torch.Tensor:
    """``scores`` plus the soft overlong punishment of each row's response length (model and
    observation tokens: what the budget ``max_length`` counts); with ``reward.overlong_buffer``
    > 0, ``reward/overlong_penalty`` (its mean) and ``reward/overlong_penalized`` (the share of
    rows it reached) join ``metrics``."""
    if reward.overlong_buffer == 0:
        return scores
    lengths = (batch["response_segments"] != 0).sum(dim=-1)
    penalty = soft_overlong_penalty(
        lengths, max_length, reward.overlong_buffer, reward.overlong_penalty_factor
    )
    metrics["reward/overlong_penalty"] = float(penalty.mean()) if len(penalty) else 0.0
    metrics["reward/overlong_penalized"] = float((penalty < 0).float().mean()) if len(penalty) else 0.0
    return scores + penalty.to(scores.dtype)


def with_outcome_rewards(scores: torch.Tensor, batch: Batch, metrics: dict[str, float]) -> torch.Tensor:
    """The score an agent harness gave a trajectory (``outcome_reward``, ``endpoint/agents.py``)
    in place of the rule's, row by row; ``reward/harness_scored`` is the share of rows it gave."""
    given = batch["outcome_reward"] if "outcome_reward" in batch else [None] * len(scores)
    mask = torch.tensor([value is not None for value in given], dtype=torch.bool)
    if not bool(mask.any()):
        return scores
    values = torch.tensor([0.0 if value is None else float(value) for value in given], dtype=scores.dtype)
    metrics["reward/harness_scored"] = float(mask.float().mean())
    return torch.where(mask, values, scores)


def rollout_calls(batch: Batch) -> list[RolloutCalls]:
    """Each row's record of its calls, as the rollout made it (``agentrl.agent.collate``)."""
    fields = ("tool_calls", "tool_calls_invalid", "tool_outputs")
    missing = [name for name in fields if name not in batch]
    if missing:
        raise KeyError(f"the format check needs the batch's {missing} (agentrl.agent.collate)")
    rows = zip(*(batch[name] for name in fields), strict=True)
    return [RolloutCalls(dict(calls), dict(invalid), tuple(outputs)) for calls, invalid, outputs in rows]


def turn_scores(batch: Batch, reward: RewardConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """(B, R) float: each turn's reward on its last sampled token (module docstring), and its
    metrics by turn index."""
    rules = reward.turn
    out = torch.zeros(batch["responses"].shape, dtype=torch.float32)
    by_turn: dict[int, list[float]] = {}
    fields = ("turn_rewards", "calls", "ground_truth", "step_turns", "step_turn_ends")
    rows = zip(*(batch[name] for name in fields), strict=True)
    for i, (tools, calls, ground_truth, turns, ends) in enumerate(rows):
        per_turn = list(tools)
        if rules.search_hit or rules.malformed_call or rules.calculation_hit:
            rule = rule_turn_rewards(
                calls,
                len(per_turn),
                ground_truth,
                search_hit=rules.search_hit,
                search_tools=rules.search_tools,
                malformed_call=rules.malformed_call,
                calculation_hit=rules.calculation_hit,
                calculation_tools=rules.calculation_tools,
            )
            per_turn = [a + b for a, b in zip(per_turn, rule, strict=True)]
        for turn, end in zip(turns, ends, strict=True):
            out[i, end] = per_turn[turn]
        if batch["last_step"][i]:
            for k, value in enumerate(per_turn):
                by_turn.setdefault(k, []).append(value)
    metrics = {f"reward/turn_reward/turn_{k}": float(np.mean(v)) for k, v in sorted(by_turn.items())}
    return out, metrics


class RuleRewardWorker(RoleWorker):
    """Scores rendered responses against ground truth with the registry's scorers."""

    def _setup(self, reward: RewardConfig) -> None:
        self.reward = reward
        # built once: its cache and concurrency bound serve every step. A failed request's answers
        # get the judge's default fallback, the rule metric reward.judge.fallback_metric.
        self.judge = LLMJudge(reward.judge) if reward.judge.url else None

    def compute_scores(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        tools = self.context.tools
        scores, per_sample = score_batch(
            list(batch["response_text"]),
            list(batch["ground_truth"]),
            list(batch["data_source"]),
            list(batch["extra_info"]),
            config=self.reward,
            answers=list(batch["answer"]),
            tools=tools,
            rollout_calls=None if tools.format.calls_in_text else rollout_calls(batch),
        )
        metrics = {
            f"reward/{name}": float(np.nanmean(values)) for name, values in per_sample.items() if values
        }
        scores = torch.tensor(scores, dtype=torch.float32)
        if self.judge is not None:
            # the rule's metrics stay (reward/em beside reward/judged shows where the two disagree)
            scores, judged = judged_scores(self.judge, batch)
            metrics |= judged
        scores = with_outcome_rewards(scores, batch, metrics)
        scores = with_format_penalty(scores, batch, self.reward.format_penalty, metrics)
        return with_overlong_penalty(
            scores, batch, self.reward, self.context.max_response_length, metrics
        ), metrics


class RewardModelWorker(RoleWorker):
    """A learned reward model: a scalar head read at the last model token of each response."""

    def _setup(self, reward: RewardConfig) -> None:
        if not reward.reward_model_path:
            raise ValueError("RewardModelWorker needs reward.reward_model_path")
        self.reward = reward
        self.model = build_value_model(reward.reward_model_path, device=self.device).eval()

    def _score(self, micro: Batch) -> torch.Tensor:
        inputs = trim_padding(micro)
        values = self.model(inputs.input_ids, inputs.attention_mask, inputs.position_ids)
        response_values = values[
            :, inputs.first_logit + 1 : inputs.first_logit + 1 + inputs.responses.shape[1]
        ]
        last = last_true_index(micro["response_mask"][:, : inputs.responses.shape[1]]).clamp(min=0)
        return response_values.gather(1, last.unsqueeze(1)).squeeze(1).float()

    def compute_scores(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        scores = no_grad_over_micro_batches(self._score, batch, self.reward.micro_batch_size)
        metrics = {"reward/model_score": float(scores.mean())}
        scores = with_format_penalty(scores, batch, self.reward.format_penalty, metrics)
        return with_overlong_penalty(
            scores, batch, self.reward, self.context.max_response_length, metrics
        ), metrics
