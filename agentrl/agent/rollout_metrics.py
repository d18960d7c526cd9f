"""Batch-level metrics of one rollout, named ``rollout/*`` (the rollout produced them)."""

from __future__ import annotations

from collections.abc import Sequence

from agentrl.agent.trajectory import Trajectory


def rollout_metrics(trajectories: Sequence[Trajectory], tool_tags: Sequence[str] = ()) -> dict[str, float]:
    """Means per trajectory unless the name ends in ``_total``; tool calls are counted per tool
    (``rollout/tool_calls/<tag>``, for every tag in ``tool_tags`` even when unused) and in all
    (``rollout/tool_calls``)."""
    if not trajectories:
        return {}
    n = len(trajectories)

    def mean(values: Sequence[float]) -> float:
        return float(sum(values)) / n

    metrics = {
        "rollout/num_turns": mean([t.num_turns for t in trajectories]),
        "rollout/tool_calls": mean([t.num_tool_calls for t in trajectories]),
        "rollout/valid_actions": mean([t.num_valid_actions for t in trajectories]),
        "rollout/invalid_actions": mean([t.num_invalid_actions for t in trajectories]),
        "rollout/finished": mean([t.finished for t in trajectories]),
        "rollout/model_tokens": mean([t.num_model_tokens for t in trajectories]),
        "rollout/response_length": mean([len(t.response_ids) for t in trajectories]),
        "rollout/obs_truncations_total": float(sum(t.truncation.observations_cut for t in trajectories)),
        "rollout/obs_tokens_cut_total": float(sum(t.truncation.observation_tokens_cut for t in trajectories)),
        "rollout/context_truncated": mean([t.truncation.context for t in trajectories]),
        "rollout/response_truncated": mean([t.truncation.response_budget for t in trajectories]),
        "rollout/turn_budget_hits_total": float(sum(t.truncation.turn_budget_hits for t in trajectories)),
        "rollout/tool_failures_total": float(sum(t.tool_failures for t in trajectories)),
    }
    for tag in sorted({*tool_tags, *(tag for t in trajectories for tag in t.tool_calls)}):
        metrics[f"rollout/tool_calls/{tag}"] = mean([t.tool_calls.get(tag, 0) for t in trajectories])
    for key in sorted({k for t in trajectories for k in t.tool_metrics}):
        metrics[f"rollout/tool/{key}"] = mean([t.tool_metrics.get(key, 0.0) for t in trajectories])
    drifts = [t.token_drift for t in trajectories if t.token_drift is not None]
    if drifts:
        metrics["rollout/token_drift_total"] = float(sum(drifts))
        metrics["rollout/token_drift_trajectories"] = float(sum(d > 0 for d in drifts))
    return metrics
