"""benchmarks/common/agent_workload.py: the rollout benchmark's workload is ragged and described truly."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from benchmarks.common import agent_workload as aw


def test_demonstrations_search_as_often_as_the_mix_says_with_thinking_of_varied_length():
    mix = aw.parse_search_mix(aw.DEFAULT_SEARCH_MIX)
    rng = random.Random(0)
    demos = [aw.demonstration("who wrote hamlet", "Shakespeare", rng, mix, 30) for _ in range(2000)]
    counts = Counter(d.count("<search>") for d in demos)
    total = sum(mix.values())
    for k, weight in mix.items():
        assert counts[k] / len(demos) == pytest.approx(weight / total, abs=0.03)
    thoughts = [len(t.split("</think>")[0].split()) for d in demos for t in d.split("<think>")[1:]]
    assert min(thoughts) <= 4 and max(thoughts) >= 28  # 2..30 words, plus nothing else inside
    assert all(d.endswith("<answer> Shakespeare </answer>") for d in demos)


def test_a_malformed_search_mix_is_refused_naming_the_flag():
    for bad in ("1", "a:0.5", "-1:1", "0:0"):
        with pytest.raises(SystemExit, match="--search-mix"):
            aw.parse_search_mix(bad)


def test_turn_lengths_are_the_runs_of_policy_tokens_between_observations():
    traj = Trajectory(prompt=PromptSpec([1, 2]), group_id="g", uid="g-0")
    traj.append([3, 4, 5], Segment.MODEL, [0.0] * 3)
    traj.append([6, 7], Segment.OBSERVATION)
    traj.append([8], Segment.MODEL, [0.0])
    assert aw.turn_lengths(traj) == [3, 1]
    assert "median 2" in aw.describe([traj])
