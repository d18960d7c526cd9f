"""Running the policy's tool calls: checked, batched, bounded, one failure costing one trajectory.

``ToolDispatcher`` knows tools by name (``TypedTool``, see ``tools/typed.py``). A call's
arguments are checked against the tool's schema first: an unknown tool or arguments that
do not fit come back as an outcome with ``invalid`` set (``"unknown_tool"``/``"schema"``)
and the reason, without running anything.

* ``call(uid, name, arguments)`` is the concurrent path: calls to a stateless tool that
  arrive in the same event-loop pass, from any trajectories, are coalesced into one batch;
  ``call_many(uid, calls)`` runs one turn's calls concurrently and returns their outcomes
  in call order.
* ``call_batch(name, calls)`` runs one batch of one tool (the lockstep schedule's path).
* Calls to a stateful tool go through their trajectory's session (``tools/sessions.py``);
  ``trajectory(uid)`` / ``close_trajectory(uid)`` / ``close_all()`` close them, so no
  session outlives its trajectory.

If a batch fails, each call is retried alone so that one bad call (or a back end that
chokes on one input) costs only its own trajectory. A failed call becomes an outcome with
an error (``tool_error_policy="observe"``: the trajectory sees an error observation) or
fails the rollout with the tool's own error (``"raise"``). A tool that breaks its contract
(the wrong number of results) raises ``ToolContractError`` whatever the policy: that is a
bug in the tool, never hidden by the retry. Nothing waits without a timeout: every call is
bounded by its tool's ``timeout_s``, synchronous tools included (they run on a thread).

``call(tag, content)`` and ``run_batch(tag, calls)``, keyed by tag with the text between
the tags, are the tags rollout's form of the same calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from agentrl.config.schema import ToolErrorPolicy
from agentrl.tools.base import ToolContractError, ToolResult, ToolTimeout
from agentrl.tools.rules import Claims
from agentrl.tools.sessions import SessionTable
from agentrl.tools.spec import ToolSpec, argument_errors
from agentrl.tools.typed import TypedTool, as_typed, within_deadline

__all__ = [
    "TOOL_ERROR_POLICIES",
    "ToolContractError",
    "ToolDispatcher",
    "ToolOutcome",
    "ToolTimeout",
    "refused_call",
]

TOOL_ERROR_POLICIES: tuple[str, ...] = get_args(ToolErrorPolicy)


def refused_call(specs: Mapping[str, ToolSpec], name: str, arguments: Any) -> tuple[str, str] | None:
    """Why a call of ``name`` must not run, as (reason, error text): ``unknown_tool``, or ``schema``
    for arguments off the tool's schema; None when it may run. The one rule the dispatcher and the
    endpoint (which reads an agent's calls as the built-in loop would) apply."""
    spec = specs.get(name)
    if spec is None:
        return "unknown_tool", f"unknown tool {name!r}; tools: {sorted(specs)}"
    problem = argument_errors(spec, arguments)
    return None if problem is None else ("schema", problem)


@dataclass(frozen=True)
class ToolOutcome:
    """What one call produced: a result, or the error text of a call that failed or never ran.

    ``invalid`` says why a call never ran (``"unknown_tool"`` or ``"schema"``, the policy's
    mistake); it is None for a result and for a tool that failed.
    """

    result: ToolResult | None
    error: str | None = None
    invalid: str | None = None


class ToolDispatcher:
    """Runs tool calls by name with schema checks, batching, timeouts, sessions and failure isolation.

    ``tools``: the tools (a tag → tool mapping, as the tags rollout keeps them, or a sequence),
    tag tools and schema tools alike; ``policy``: ``tool_error_policy``.
    """

    def __init__(self, tools: Mapping[str, Any] | Sequence[Any], policy: str) -> None:
        if policy not in TOOL_ERROR_POLICIES:
            raise ValueError(f"tool_error_policy must be one of {TOOL_ERROR_POLICIES}, got {policy!r}")
        entries = tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools)
        self.tools: dict[str, TypedTool] = {}
        self._by_tag: dict[str, TypedTool] = {}
        claims: Claims[TypedTool] = Claims()  # the tools' rule: a tag and a name belong to one tool
        for key, tool in entries:
            typed = as_typed(tool, f"tool for <{key}>" if key is not None else "tool")
            clash = claims.claim(typed, name=typed.name, tag=typed.tag)
            if clash is not None:
                raise ValueError(
                    f"{clash.holder.label} and {typed.label} share the {clash.kind} {clash.value!r}"
                )
            self.tools[typed.name] = self._by_tag[typed.tag] = typed
        self._specs = {name: tool.spec for name, tool in self.tools.items()}  # what check reads, per call
        self.policy = policy
        self.sessions = SessionTable()
        self._pending: dict[str, list[tuple[dict[str, Any], asyncio.Future[ToolOutcome]]]] = defaultdict(list)
        self.busy_seconds = 0.0  # wall time with at least one tool call in flight
        self._in_flight = 0
        self._busy_since = 0.0

    # --- checks ----------------------------------------------------------------------

    def check(self, name: str, arguments: Any) -> ToolOutcome | None:
        """The outcome of a call that must not run (unknown tool, arguments off the schema), else None."""
        refused = refused_call(self._specs, name, arguments)
        return None if refused is None else ToolOutcome(None, refused[1], refused[0])

    def tool_for_tag(self, tag: str) -> TypedTool:
        """The tool a tag calls (the tags format)."""
        return self._by_tag[tag]

    # --- calls -----------------------------------------------------------------------

    async def call(
        self, uid: str | None, name: str, arguments: Mapping[str, Any] | None = None
    ) -> ToolOutcome:
        """One call of trajectory ``uid`` to tool ``name``, coalesced with concurrent calls.

        ``call(tag, content)`` (no ``arguments``) is the tags rollout's form: the tool its tag
        names, called with the text between the tags as its one string argument.
        """
        if arguments is None:
            tool = self._by_tag[uid]  # type: ignore[index]
            return await self.call(None, tool.name, {self._argument_of(tool): name})
        rejected = self.check(name, arguments)
        if rejected is not None:
            return rejected
        tool = self.tools[name]
        if tool.stateful:
            return await self._session_call(tool, uid, dict(arguments))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ToolOutcome] = loop.create_future()
        self._pending[name].append((dict(arguments), future))
        if len(self._pending[name]) == 1:
            loop.create_task(self._flush(tool))
        return await future

    async def call_many(
        self, uid: str | None, calls: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> list[ToolOutcome]:
        """One turn's calls ``[(name, arguments), ...]``, run concurrently; outcomes in call order."""
        return list(await asyncio.gather(*(self.call(uid, name, args) for name, args in calls)))

    async def call_batch(
        self, name: str, calls: Sequence[tuple[str | None, Mapping[str, Any]]]
    ) -> list[ToolOutcome]:
        """One batch of calls ``[(uid, arguments), ...]`` to one tool; outcomes in call order."""
        outcomes: list[ToolOutcome | None] = [self.check(name, args) for _, args in calls]
        todo = [i for i, o in enumerate(outcomes) if o is None]
        if todo:
            tool = self.tools[name]
            if tool.stateful:
                ran = await asyncio.gather(
                    *(self._session_call(tool, calls[i][0], dict(calls[i][1])) for i in todo)
                )
            else:
                ran = await self._run_stateless(tool, [dict(calls[i][1]) for i in todo])
            for i, outcome in zip(todo, ran, strict=True):
                outcomes[i] = outcome
        return outcomes  # type: ignore[return-value]

    async def run_batch(self, tag: str, calls: list[str]) -> list[ToolOutcome]:
        """The tags rollout's batch: the texts between the tags of the tool ``tag`` names."""
        tool = self._by_tag[tag]
        argument = self._argument_of(tool)
        return await self.call_batch(tool.name, [(None, {argument: c}) for c in calls])

    # --- sessions --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def trajectory(self, uid: str) -> AsyncIterator[None]:
        """Closes ``uid``'s sessions when the block ends, however it ends (cancellation included)."""
        try:
            yield
        finally:
            # shielded: a second cancellation must not leave a session open
            await asyncio.shield(self.close_trajectory(uid))

    async def close_trajectory(self, uid: str) -> None:
        """Close every tool session of trajectory ``uid`` (it ended, failed or was cancelled)."""
        await self.sessions.close_trajectory(uid)

    async def close_all(self) -> None:
        """Close every session still open (the rollout's end)."""
        await self.sessions.close_all()

    # --- running ---------------------------------------------------------------------

    @staticmethod
    def _argument_of(tool: TypedTool) -> str:
        if tool.argument is None:
            raise ValueError(f"{tool.label} takes a JSON object, not the text between tags")
        return tool.argument

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        if self._in_flight == 0:
            self._busy_since = time.perf_counter()
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.busy_seconds += time.perf_counter() - self._busy_since

    def _failed(self, exc: Exception) -> ToolOutcome:
        """A failed call's outcome under ``tool_error_policy`` (or the error itself, re-raised)."""
        if isinstance(exc, ToolContractError) or self.policy == "raise":
            raise exc
        return ToolOutcome(None, f"{type(exc).__name__}: {exc}")

    async def _run_stateless(self, tool: TypedTool, arguments: list[dict[str, Any]]) -> list[ToolOutcome]:
        try:
            with self._busy():
                results = await within_deadline(tool.call(arguments), tool)
            return [ToolOutcome(r) for r in results]
        except Exception as exc:
            if len(arguments) > 1 and not isinstance(exc, ToolContractError) and self.policy != "raise":
                singles = await asyncio.gather(*(self._run_stateless(tool, [a]) for a in arguments))
                return [o for outs in singles for o in outs]
            return [self._failed(exc)]

    async def _session_call(self, tool: TypedTool, uid: str | None, arguments: dict[str, Any]) -> ToolOutcome:
        if uid is None:
            raise ValueError(
                f"{tool.label} keeps a session per trajectory: call it with the trajectory's uid"
            )
        try:
            with self._busy():
                return ToolOutcome(await self.sessions.call(tool, uid, arguments))
        except Exception as exc:
            return self._failed(exc)

    async def _flush(self, tool: TypedTool) -> None:
        await asyncio.sleep(0)  # let every coroutine that is ready this pass enqueue its call
        batch, self._pending[tool.name] = self._pending[tool.name], []
        try:
            outcomes = await self._run_stateless(tool, [args for args, _ in batch])
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
