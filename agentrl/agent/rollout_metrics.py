"""Batch-level metrics of one rollout, named ``rollout/*`` (the rollout produced them)."""

from __future__ import annotations

from collections.abc import Sequence

from agentrl.agent.formats.base import MALFORMED_REASONS
from agentrl.agent.trajectory import Trajectory

INVALID_CALLS = "rollout/tool_calls/invalid/"  # + a reason: malformed calls and invalid turns, summed


def rollout_metrics(trajectories: Sequence[Trajectory], tool_names: Sequence[str] = ()) -> dict[str, float]:
    """Means per trajectory unless the name ends in ``_total``; tool calls are counted per tool
    (``rollout/tool_calls/<name>``, for every name in ``tool_names`` even when unused; a tag
    tool's name is its tag) and in all (``rollout/tool_calls``). Malformed calls and turns that
    neither call nor answer are summed over the trajectories by reason, every reason of
    ``formats.MALFORMED_REASONS`` each time (``rollout/tool_calls/invalid/<reason>``), and
    calls past a call budget in ``rollout/call_budget_hits_total``. ``rollout/steps``: samples
    per trajectory; ``rollout/context/compactions_total``: times the context policy fired."""
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
        "rollout/response_length": mean([len(t.response_ids_of_all_steps()) for t in trajectories]),
        # samples per trajectory (history.py): above 1 where a template or the context policy re-prompted
        "rollout/steps": mean([t.num_steps for t in trajectories]),
        "rollout/context/compactions_total": float(sum(t.context_compactions for t in trajectories)),
        "rollout/obs_truncations_total": float(sum(t.truncation.observations_cut for t in trajectories)),
        "rollout/obs_tokens_cut_total": float(sum(t.truncation.observation_tokens_cut for t in trajectories)),
        "rollout/context_truncated": mean([t.truncation.context for t in trajectories]),
        "rollout/response_truncated": mean([t.truncation.response_budget for t in trajectories]),
        "rollout/turn_budget_hits_total": float(sum(t.truncation.turn_budget_hits for t in trajectories)),
        "rollout/tool_failures_total": float(sum(t.tool_failures for t in trajectories)),
        "rollout/call_budget_hits_total": float(sum(t.calls_over_budget for t in trajectories)),
    }
    for name in sorted({*tool_names, *(name for t in trajectories for name in t.tool_calls)}):
        metrics[f"rollout/tool_calls/{name}"] = mean([t.tool_calls.get(name, 0) for t in trajectories])
    for reason in MALFORMED_REASONS:
        count = sum(t.tool_calls_invalid.get(reason, 0) for t in trajectories)
        metrics[INVALID_CALLS + reason] = float(count)
    for key in sorted({k for t in trajectories for k in t.tool_metrics}):
        metrics[f"rollout/tool/{key}"] = mean([t.tool_metrics.get(key, 0.0) for t in trajectories])
    drifts = [t.token_drift for t in trajectories if t.token_drift is not None]
    if drifts:
        metrics["rollout/token_drift_total"] = float(sum(drifts))
        metrics["rollout/token_drift_trajectories"] = float(sum(d > 0 for d in drifts))
    return metrics
