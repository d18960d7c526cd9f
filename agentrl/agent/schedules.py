"""The two ways to drive many trajectories through one engine: concurrent and lockstep.

* ``concurrent``: one coroutine per trajectory. Each asks the engine for its next turn and
  then waits on that turn's tool calls, so a trajectory back from the retriever generates
  again while others still wait; the engine coalesces whatever requests are pending into
  batches, and the dispatcher coalesces calls to one tool from many trajectories.
* ``lockstep`` (Search-R1's loop): every live trajectory generates one turn together, then
  all their tool calls run together (one batch per tool), then the next turn.

Both play the same ``TrajectoryState`` machine, so they differ only in timing. A turn's
calls run concurrently and come back in call order in both. Each trajectory's tool
sessions are closed when it ends (``ToolDispatcher.trajectory`` / ``close_trajectory``);
the rollout closes whatever is left (``close_all``) however it ends.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, get_args

from agentrl.agent.tool_dispatch import ToolDispatcher, ToolOutcome
from agentrl.agent.turn_calls import TurnCalls
from agentrl.agent.turns import TrajectoryState
from agentrl.config.schema import Schedule
from agentrl.engines.base import Engine, SamplingParams

SCHEDULES: tuple[str, ...] = get_args(Schedule)


async def run_turn_calls(dispatcher: ToolDispatcher, uid: str, turn: TurnCalls) -> list[ToolOutcome]:
    """The outcomes of a turn's calls that run, in call order (all at once when there are several)."""
    runs = turn.runs
    if len(runs) == 1:  # the common case, awaited directly: no task of its own
        return [await dispatcher.call(uid, *runs[0])]
    return await dispatcher.call_many(uid, runs) if runs else []


async def run_concurrent(
    states: Sequence[TrajectoryState], engine: Engine, dispatcher: ToolDispatcher
) -> None:
    async def one(state: TrajectoryState) -> None:
        async with dispatcher.trajectory(state.uid):
            while (request := state.request()) is not None:
                turn = state.on_generation(await engine.generate(*request))
                if turn is not None:
                    state.on_tool_outcomes(turn, await run_turn_calls(dispatcher, state.uid, turn))

    tasks = [asyncio.ensure_future(one(s)) for s in states]
    try:
        await asyncio.gather(*tasks)  # the first failure (tool_error_policy="raise") propagates
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # reap the rest quietly


async def _generate_round(
    requests: list[tuple[TrajectoryState, tuple[list[int], SamplingParams]]], engine: Engine
) -> list[tuple[TrajectoryState, TurnCalls]]:
    """One turn of every requesting trajectory: one ``generate_batch`` per distinct (budget, stop
    set), each row with its own seed; the turns that made calls."""
    by_params: dict[SamplingParams, list[tuple[TrajectoryState, list[int], int | None]]] = defaultdict(list)
    for state, (ids, params) in requests:
        by_params[replace(params, seed=None)].append((state, ids, params.seed))
    turns = []
    for params, group in by_params.items():
        seeds = [seed for _, _, seed in group]
        results = await engine.generate_batch(
            [ids for _, ids, _ in group], params, seeds=None if None in seeds else seeds
        )
        for (state, _, _), result in zip(group, results, strict=True):
            turn = state.on_generation(result)
            if turn is not None:
                turns.append((state, turn))
    return turns


async def _call_round(dispatcher: ToolDispatcher, turns: list[tuple[TrajectoryState, TurnCalls]]) -> None:
    """Every call of every turn, one ``call_batch`` per tool (all tools at once); each turn's
    observation once its calls are back."""
    batches: dict[str, list[tuple[int, int, str, dict[str, Any]]]] = defaultdict(list)
    for i, (state, turn) in enumerate(turns):
        for k, (name, arguments) in enumerate(turn.runs):
            batches[name].append((i, k, state.uid, arguments))
    names = list(batches)
    answers = await asyncio.gather(
        *(dispatcher.call_batch(n, [(uid, args) for _, _, uid, args in batches[n]]) for n in names)
    )
    outcomes: list[dict[int, ToolOutcome]] = [{} for _ in turns]
    for name, outs in zip(names, answers, strict=True):
        for (i, k, _, _), outcome in zip(batches[name], outs, strict=True):
            outcomes[i][k] = outcome
    for (state, turn), outs in zip(turns, outcomes, strict=True):
        state.on_tool_outcomes(turn, [outs[k] for k in range(len(outs))])


async def run_lockstep(states: Sequence[TrajectoryState], engine: Engine, dispatcher: ToolDispatcher) -> None:
    active = list(states)
    while active:
        requests = [(s, req) for s in active if (req := s.request()) is not None]
        for state in active:
            if state.done:  # ended before its next turn (no room left)
                await dispatcher.close_trajectory(state.uid)
        if not requests:
            break
        await _call_round(dispatcher, await _generate_round(requests, engine))
        for state, _ in requests:
            if state.done:
                await dispatcher.close_trajectory(state.uid)
        active = [s for s, _ in requests if not s.done]


SCHEDULE_RUNNERS = {"concurrent": run_concurrent, "lockstep": run_lockstep}
