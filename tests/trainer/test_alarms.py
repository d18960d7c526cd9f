"""The dead-signal alarms read a step's metrics: they fire on runs without a signal and stay quiet
on a run that learns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.trainer.alarms import DeadSignalAlarms


def _run(alarms: DeadSignalAlarms, steps: list[dict]) -> list[dict]:
    return [alarms.observe(i + 1, metrics) for i, metrics in enumerate(steps)]


def _alarms(after: int = 3, tools: bool = True, groups: bool = True):
    warnings: list[str] = []
    return DeadSignalAlarms(after, watch_tools=tools, watch_groups=groups, warn=warnings.append), warnings


def test_a_constant_reward_fires_once_after_n_steps_with_its_value():
    alarms, warnings = _alarms(after=3, groups=False)
    step = {"reward/score/mean": 0.0, "signal/score_spread": 0.0, "rollout/tool_calls": 1.0}
    out = _run(alarms, [step] * 5)
    assert [o["alarms/constant_reward_steps"] for o in out] == [1, 2, 3, 4, 5]
    assert len(warnings) == 1 and "step 3" in warnings[0] and "scored 0" in warnings[0]


def test_the_reward_streak_restarts_when_the_samples_differ_or_the_value_changes():
    alarms, warnings = _alarms(after=3, groups=False)
    flat = {"signal/score_spread": 0.0, "rollout/tool_calls": 1.0}
    steps = [
        flat | {"reward/score/mean": 0.0},
        flat | {"reward/score/mean": 0.0},
        {"signal/score_spread": 1.0, "reward/score/mean": 0.5, "rollout/tool_calls": 1.0},
        flat | {"reward/score/mean": 1.0},
        flat | {"reward/score/mean": 0.0},  # uniform, but not the value of the step before
    ]
    assert [o["alarms/constant_reward_steps"] for o in _run(alarms, steps)] == [1, 2, 0, 1, 1]
    assert warnings == []


def test_no_tool_call_for_n_steps_fires_and_a_call_resets_it():
    alarms, warnings = _alarms(after=2, groups=False)
    steps = [{"rollout/tool_calls": c} for c in (0.0, 0.5, 0.0, 0.0, 0.0)]
    assert [o["alarms/no_tool_call_steps"] for o in _run(alarms, steps)] == [1, 0, 1, 2, 3]
    assert len(warnings) == 1 and "step 4" in warnings[0] and "no tool was called" in warnings[0]


def test_a_run_without_tools_is_not_told_it_calls_none():
    alarms, warnings = _alarms(after=1, tools=False, groups=False)
    assert _run(alarms, [{"rollout/tool_calls": 0.0}]) == [{}]
    assert warnings == []


def test_every_group_tied_warns_on_that_step():
    alarms, warnings = _alarms(after=5)
    shares = [0.5, 1.0, 1.0, 0.75]
    out = _run(alarms, [{"signal/tied_group_share": s} for s in shares])
    assert [o["alarms/all_groups_tied_steps"] for o in out] == [0, 1, 2, 0]
    assert len(warnings) == 2 and "dynamic_sampling" in warnings[0]


def test_a_learning_run_stays_quiet():
    # the shape of the quickstart's first steps: tools called, scores varied, groups mixed
    alarms, warnings = _alarms(after=2)
    steps = [
        {
            "rollout/tool_calls": 0.6 + 0.1 * i,
            "reward/score/mean": 0.3 + 0.02 * i,
            "signal/score_spread": 1.0,
            "signal/tied_group_share": 0.4,
        }
        for i in range(10)
    ]
    out = _run(alarms, steps)
    assert warnings == [] and all(v == 0 for o in out for v in o.values())


def test_alarms_off_return_nothing():
    alarms, warnings = _alarms(after=0)
    assert _run(alarms, [{"rollout/tool_calls": 0.0, "signal/tied_group_share": 1.0}]) == [{}]
    with pytest.raises(ValueError, match="after_steps"):
        DeadSignalAlarms(-1, True, True)


def test_with_dynamic_sampling_on_the_all_tied_warning_suggests_more_rounds_instead():
    warnings: list[str] = []
    alarms = DeadSignalAlarms(5, True, True, warn=warnings.append, dynamic_sampling=True)
    alarms.observe(1, {"signal/tied_group_share": 1.0})
    assert "max_rounds" in warnings[0] and "enable=true" not in warnings[0]


QUICKSTART_METRICS = Path(__file__).resolve().parents[2] / "docs" / "results" / "quickstart" / "metrics.jsonl"


def test_the_quickstarts_own_run_stays_quiet():
    # the PPO log of `make quickstart` (archived with docs/quickstart.md): replayed, and as logged
    steps = [json.loads(line) for line in QUICKSTART_METRICS.read_text().splitlines()]
    steps = [row for row in steps if "timing_s/step" in row]
    assert len(steps) == 40
    alarms, warnings = _alarms(after=5, groups=False)  # PPO (gae): no groups
    out = _run(alarms, steps)
    assert warnings == [] and max(o["alarms/no_tool_call_steps"] for o in out) == 0
    assert max(o["alarms/constant_reward_steps"] for o in out) == 0
    assert all(row["alarms/no_tool_call_steps"] == row["alarms/constant_reward_steps"] == 0 for row in steps)
