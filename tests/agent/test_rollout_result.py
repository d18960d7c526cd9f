"""The data-parallel ranks' rollouts merged into one (``RolloutResult.merge``), without an engine."""

from __future__ import annotations

from agentrl.agent.formats import MALFORMED_REASONS
from agentrl.agent.generation import RolloutResult
from agentrl.agent.rollout_metrics import rollout_metrics
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory


def rank_rollout(rank: int, busy_s: float) -> RolloutResult:
    """One rank's rollout of two trajectories, with its tool time."""
    trajectories = []
    for k in range(2):
        traj = Trajectory(prompt=PromptSpec([1, 2, 3]), group_id=f"g{rank}", uid=f"{rank}-{k}")
        traj.append([5] * (3 + rank + k), Segment.MODEL, [-0.5] * (3 + rank + k))
        trajectories.append(traj)
    result = RolloutResult(trajectories, rollout_metrics(trajectories, []))
    result.add_per_rank({"rollout/tool_busy_s": busy_s})
    return result


def test_per_rank_figures_merge_by_their_maximum_under_the_names_their_producers_gave():
    ranks = [rank_rollout(0, busy_s=0.5), rank_rollout(1, busy_s=0.2)]
    ranks[0].add_per_rank({"actor/weight_sync_s": 1.0, "actor/engine_sleep_freed_mb": 30.0})
    ranks[1].add_per_rank({"actor/weight_sync_s": 3.0, "actor/engine_sleep_freed_mb": 10.0})
    ranks[1].metrics["rollout/some_mean"] = 9.0  # undeclared: recomputed over all trajectories or dropped
    merged = RolloutResult.merge(ranks)
    trajectories = ranks[0].trajectories + ranks[1].trajectories
    assert merged.trajectories == trajectories
    assert merged.metrics == rollout_metrics(trajectories, []) | {
        "rollout/tool_busy_s": 0.5,
        "actor/weight_sync_s": 3.0,
        "actor/engine_sleep_freed_mb": 30.0,
    }
    assert list(merged.metrics)[-3:] == [
        "rollout/tool_busy_s",
        "actor/weight_sync_s",
        "actor/engine_sleep_freed_mb",
    ]
    assert merged.per_rank == ("rollout/tool_busy_s", "actor/weight_sync_s", "actor/engine_sleep_freed_mb")


def test_a_figure_only_some_ranks_report_is_the_largest_of_those_that_do():
    ranks = [rank_rollout(0, busy_s=0.1), rank_rollout(1, busy_s=0.0)]
    ranks[1].add_per_rank({"actor/weight_sync_s": 2.0})
    assert RolloutResult.merge(ranks).metrics["actor/weight_sync_s"] == 2.0
    assert "actor/weight_sync_s" not in RolloutResult.merge(ranks[:1]).metrics


def test_per_tool_counts_and_invalid_calls_by_reason_merge_over_the_ranks():
    """A tool no rank's trajectories called keeps its count (0); ``invalid/<reason>`` is summed,
    never mistaken for a tool."""
    ranks = []
    for rank, invalid in enumerate(({"invalid_json": 2}, {"invalid_json": 1, "schema": 1})):
        traj = Trajectory(prompt=PromptSpec([1, 2]), group_id=f"g{rank}", uid=f"{rank}")
        traj.tool_calls = {"search": rank + 1}
        traj.tool_calls_invalid = dict(invalid)
        ranks.append(RolloutResult([traj], rollout_metrics([traj], ["search", "lookup"])))
    metrics = RolloutResult.merge(ranks).metrics
    assert metrics["rollout/tool_calls/search"] == 1.5 and metrics["rollout/tool_calls/lookup"] == 0.0
    assert (
        metrics["rollout/tool_calls/invalid/invalid_json"] == 3
        and metrics["rollout/tool_calls/invalid/schema"] == 1
    )
    per_tool = {k for k in metrics if k.startswith("rollout/tool_calls/") and "/invalid/" not in k}
    assert per_tool == {"rollout/tool_calls/search", "rollout/tool_calls/lookup"}
    reasons = {k.rsplit("/", 1)[1] for k in metrics if k.startswith("rollout/tool_calls/invalid/")}
    assert reasons == set(MALFORMED_REASONS)
