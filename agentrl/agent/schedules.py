"""The two ways to drive many trajectories through one engine: concurrent and lockstep.

* ``concurrent``: one coroutine per trajectory. Each asks the engine for its next turn and
  then waits on its tool, so a trajectory back from the retriever generates again while
  others still wait; the engine coalesces whatever requests are pending into batches.
* ``lockstep`` (Search-R1's loop): every live trajectory generates one turn together, then
  all their tool calls run together, then the next turn.

Both play the same ``TrajectoryState`` machine, so they differ only in timing.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import get_args

from agentrl.agent.tool_dispatch import ToolDispatcher
from agentrl.agent.turns import TrajectoryState
from agentrl.config.schema import Schedule
from agentrl.engines.base import Engine, SamplingParams

SCHEDULES: tuple[str, ...] = get_args(Schedule)


async def run_concurrent(
    states: Sequence[TrajectoryState], engine: Engine, dispatcher: ToolDispatcher
) -> None:
    async def one(state: TrajectoryState) -> None:
        while (request := state.request()) is not None:
            call = state.on_generation(await engine.generate(*request))
            if call is not None:
                state.on_tool_outcome(call.tag, await dispatcher.call(call.tag, call.content))

    tasks = [asyncio.ensure_future(one(s)) for s in states]
    try:
        await asyncio.gather(*tasks)  # the first failure (tool_error_policy="raise") propagates
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # reap the rest quietly


async def run_lockstep(states: Sequence[TrajectoryState], engine: Engine, dispatcher: ToolDispatcher) -> None:
    active = list(states)
    while active:
        requests = [(s, req) for s in active if (req := s.request()) is not None]
        if not requests:
            break
        # One generate_batch per distinct (budget, stop set), each row with its own seed.
        by_params: dict[SamplingParams, list[tuple[TrajectoryState, list[int], int | None]]] = defaultdict(
            list
        )
        for state, (ids, params) in requests:
            by_params[replace(params, seed=None)].append((state, ids, params.seed))
        calls: dict[str, list[tuple[TrajectoryState, str]]] = defaultdict(list)
        for params, group in by_params.items():
            seeds = [seed for _, _, seed in group]
            results = await engine.generate_batch(
                [ids for _, ids, _ in group], params, seeds=None if None in seeds else seeds
            )
            for (state, _, _), result in zip(group, results, strict=True):
                call = state.on_generation(result)
                if call is not None:
                    calls[call.tag].append((state, call.content))
        tags = list(calls)
        outcomes = await asyncio.gather(*(dispatcher.run_batch(t, [c for _, c in calls[t]]) for t in tags))
        for tag, outs in zip(tags, outcomes, strict=True):
            for (state, _), outcome in zip(calls[tag], outs, strict=True):
                state.on_tool_outcome(tag, outcome)
        active = [s for s, _ in requests if not s.done]


SCHEDULE_RUNNERS = {"concurrent": run_concurrent, "lockstep": run_lockstep}
