"""Running the policy's tool calls: batched, with timeouts, one failure costing one trajectory.

``ToolDispatcher.run_batch`` executes one batch of calls to one tool; if the batch fails,
each call is retried alone so that one bad call (or a back end that chokes on one input)
costs only its own trajectory. ``call`` is the concurrent path: calls that arrive in the
same event-loop pass are coalesced into one ``run_batch`` per tool.

A failed call becomes an outcome with an error (``tool_error_policy="observe"``: the
trajectory sees an error observation) or fails the rollout with the tool's own error
(``"raise"``). Nothing waits without a timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import get_args

from agentrl.agent.tools.base import Tool, ToolResult
from agentrl.config.schema import ToolErrorPolicy

TOOL_ERROR_POLICIES: tuple[str, ...] = get_args(ToolErrorPolicy)


class ToolTimeout(TimeoutError):
    """A tool call exceeded its ``timeout_s``."""


@dataclass(frozen=True)
class ToolOutcome:
    """What one call produced: a result, or the error text of a failed call."""

    result: ToolResult | None
    error: str | None = None


class ToolDispatcher:
    """Runs tool calls in batches with timeouts and failure isolation (see the module docstring)."""

    def __init__(self, tools: Mapping[str, Tool], policy: str) -> None:
        if policy not in TOOL_ERROR_POLICIES:
            raise ValueError(f"tool_error_policy must be one of {TOOL_ERROR_POLICIES}, got {policy!r}")
        self.tools = tools
        self.policy = policy
        self._pending: dict[str, list[tuple[str, asyncio.Future[ToolOutcome]]]] = defaultdict(list)
        self.busy_seconds = 0.0  # wall time with at least one tool call in flight
        self._in_flight = 0
        self._busy_since = 0.0

    async def _execute(self, tag: str, calls: list[str]) -> list[ToolResult]:
        tool = self.tools[tag]
        if self._in_flight == 0:
            self._busy_since = time.perf_counter()
        self._in_flight += 1
        try:
            results = await asyncio.wait_for(tool.execute(list(calls)), timeout=tool.timeout_s)
        except asyncio.TimeoutError:
            raise ToolTimeout(
                f"tool {tool.name!r} <{tag}> did not answer within {tool.timeout_s} s"
            ) from None
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.busy_seconds += time.perf_counter() - self._busy_since
        if len(results) != len(calls):
            raise RuntimeError(
                f"tool {tool.name!r} <{tag}> returned {len(results)} results for {len(calls)} calls"
            )
        return list(results)

    async def run_batch(self, tag: str, calls: list[str]) -> list[ToolOutcome]:
        try:
            return [ToolOutcome(r) for r in await self._execute(tag, calls)]
        except Exception as exc:
            if self.policy == "raise":
                raise
            if len(calls) > 1:
                return [
                    o
                    for outs in await asyncio.gather(*(self.run_batch(tag, [c]) for c in calls))
                    for o in outs
                ]
            return [ToolOutcome(None, f"{type(exc).__name__}: {exc}")]

    async def call(self, tag: str, content: str) -> ToolOutcome:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ToolOutcome] = loop.create_future()
        self._pending[tag].append((content, future))
        if len(self._pending[tag]) == 1:
            loop.create_task(self._flush(tag))
        return await future

    async def _flush(self, tag: str) -> None:
        await asyncio.sleep(0)  # let every coroutine that is ready this pass enqueue its call
        batch, self._pending[tag] = self._pending[tag], []
        try:
            outcomes = await self.run_batch(tag, [c for c, _ in batch])
        except BaseException as exc:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, fut), outcome in zip(batch, outcomes, strict=True):
            if not fut.done():
                fut.set_result(outcome)
