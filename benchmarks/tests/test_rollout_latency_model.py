"""benchmarks/common/tool_latency.py and rollout_report.py: the rollout benchmark's tool delays are seeded per
call and slept for real, and each cell's bound is computed from what the trajectories did."""

from __future__ import annotations

import asyncio
import math
import statistics
import time

import pytest

from agentrl.agent.tool_dispatch import ToolDispatcher
from agentrl.agent.trajectory import CallRecord, PromptSpec, Segment, Trajectory
from agentrl.tools.calculator import CalculatorTool
from benchmarks.common import rollout_report as rr
from benchmarks.common import tool_latency as tl


def test_a_calls_delay_depends_on_the_seed_the_tool_and_its_arguments_never_on_when_it_is_asked():
    model = tl.LatencyModel({"search": tl.Latency("lognormal", 0.3, 0.5)}, seed=7)
    calls = [{"query": f"question {i}"} for i in range(50)]
    forward = [model.delay("search", c) for c in calls]
    backward = [model.delay("search", c) for c in reversed(calls)][::-1]
    assert forward == backward
    assert len(set(forward)) == len(forward)  # a draw per call, not one for all
    other_seed = tl.LatencyModel(model.per_tool, seed=8)
    assert [other_seed.delay("search", c) for c in calls] != forward
    assert model.delay("calculate", calls[0]) == 0.0  # a tool without a model waits nothing


def test_lognormal_delays_have_the_median_and_spread_asked_for_and_fixed_ones_never_vary():
    model = tl.LatencyModel({"search": tl.Latency("lognormal", 0.3, 0.5)})
    delays = [model.delay("search", {"query": str(i)}) for i in range(4000)]
    assert statistics.median(delays) == pytest.approx(0.3, rel=0.05)
    assert statistics.stdev(math.log(d) for d in delays) == pytest.approx(0.5, rel=0.05)
    assert max(delays) <= 0.3 * math.exp(4 * 0.5) + 1e-9 == pytest.approx(model.ceiling("search"))
    fixed = tl.LatencyModel({"search": tl.Latency("fixed", 0.2)})
    assert {fixed.delay("search", {"query": str(i)}) for i in range(100)} == {0.2}
    swept = model.with_median(1.0)
    assert swept.per_tool["search"] == tl.Latency("lognormal", 1.0, 0.5)


def test_a_latency_is_parsed_from_the_command_line_or_refused_naming_the_flag():
    assert tl.parse_latency("search=lognormal:0.3:0.4") == ("search", tl.Latency("lognormal", 0.3, 0.4))
    assert tl.parse_latency("calculate=fixed:1") == ("calculate", tl.Latency("fixed", 1.0))
    for bad in ("search", "search=gamma:1", "search=fixed:x", "search=fixed:-1", "=fixed:1"):
        with pytest.raises(SystemExit, match="--tool-latency"):
            tl.parse_latency(bad)


def test_a_wrapped_tool_sleeps_its_batchs_slowest_delay_without_blocking_and_then_answers_as_itself():
    model = tl.LatencyModel({"calculate": tl.Latency("lognormal", 0.15, 0.5)})
    (wrapped,) = tl.with_latency([CalculatorTool()], model)
    dispatcher = ToolDispatcher([wrapped], "observe")
    calls = [{"expression": "1 + 2"}, {"expression": "6 * 7"}]

    async def both_and_a_ticker():
        ticks = 0

        async def tick():  # the event loop keeps serving while the tool sleeps
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        t0 = time.perf_counter()
        outcomes = await dispatcher.call_batch("calculate", [(None, c) for c in calls])
        elapsed = time.perf_counter() - t0
        ticker.cancel()
        return outcomes, elapsed, ticks

    outcomes, elapsed, ticks = asyncio.run(both_and_a_ticker())
    slowest = max(model.delay("calculate", c) for c in calls)
    assert elapsed >= slowest
    assert ticks >= 5
    assert [o.result.text for o in outcomes] == ["3", "42"]
    assert wrapped.timeout_s == CalculatorTool().timeout_s + model.ceiling("calculate")


def _trajectory() -> Trajectory:
    """Prompt of 4 tokens; turns of 3, 2 and 1 model tokens with observations of 5 and 2."""
    traj = Trajectory(prompt=PromptSpec([1, 2, 3, 4]), group_id="g", uid="g-0")
    traj.append([5, 6, 7], Segment.MODEL, [0.0] * 3)
    traj.append([8] * 5, Segment.OBSERVATION)
    traj.append([9, 10], Segment.MODEL, [0.0] * 2)
    traj.append([11] * 2, Segment.OBSERVATION)
    traj.append([12], Segment.MODEL, [0.0])
    traj.calls = [
        CallRecord(0, "search", {"query": "a"}, "ok", ""),
        CallRecord(1, "search", {"query": "b"}, "ok", ""),
        CallRecord(1, "search", {"query": "c"}, "failed", ""),
        CallRecord(1, "search", {"query": "d"}, "over_budget", ""),
    ]
    return traj


def test_a_trajectory_waits_each_turns_slowest_call_and_nothing_for_calls_that_never_ran():
    model = tl.LatencyModel({"search": tl.Latency("lognormal", 0.5, 0.5)})
    waited = tl.trajectory_tool_seconds(_trajectory(), model)
    turn0 = model.delay("search", {"query": "a"})
    turn1 = max(model.delay("search", {"query": q}) for q in "bc")
    assert waited == pytest.approx(turn0 + turn1)


def test_the_bound_is_the_larger_of_the_work_at_full_batch_and_the_longest_trajectorys_path():
    traj = _trajectory()
    assert rr.prefill_tokens(traj) == 4 + (4 + 3 + 5) + (4 + 3 + 5 + 2 + 2)  # every turn's context
    assert rr.decode_steps(traj) == 6 - 3  # each turn's first token comes from its prefill
    rates = rr.Rates(rows=4, step_s=0.01, prefill_tok_s=1000.0)
    run = rr.Run(wall=1.0, trajectories=[traj] * 8, tool_busy=0.0, engine_busy=0.0, forwards={})
    idle = tl.LatencyModel({})
    work, path = rr.bound(run, rates, idle)
    assert work == pytest.approx(8 * 3 * 0.01 / 4 + 8 * 32 / 1000)
    assert path == pytest.approx(3 * 0.01 + 32 / 1000)
    slow = tl.LatencyModel({"search": tl.Latency("fixed", 2.0)})
    assert rr.bound(run, rates, slow) == pytest.approx((work, path + 4.0))


def test_the_full_batch_rates_are_those_of_the_fastest_run_at_full_batch():
    def run(step_s: float, prefill_s: float) -> rr.Run:
        forwards = {
            ("decode", 8): [100, 100 * step_s, 800],
            ("decode", 3): [50, 50 * 0.001, 150],  # not a full batch: ignored
            ("prefill", 8): [10, 10 * prefill_s, 8000],
        }
        return rr.Run(wall=1.0, trajectories=[], tool_busy=0.0, engine_busy=0.0, forwards=forwards)

    rates = rr.full_batch_rates([run(0.004, 0.05), run(0.002, 0.08)], rows=8)
    assert rates == rr.Rates(8, pytest.approx(0.002), pytest.approx(8000 / 0.5))
    assert rr.full_batch_rates([run(0.002, 0.05)], rows=16) is None  # never ran that full
