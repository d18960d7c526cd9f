"""Tool sessions: per-trajectory state, opened at the first call, and none outlives its trajectory."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentrl.agent.tool_dispatch import ToolDispatcher
from agentrl.tools import ToolResult, ToolSpec, as_typed

COUNTER_SPEC = ToolSpec(
    "counter",
    "Adds to a running total kept per trajectory.",
    {
        "type": "object",
        "properties": {"add": {"type": "integer"}, "delay": {"type": "number"}},
        "required": ["add"],
    },
)


class CounterSession:
    def __init__(self, log: list[str]) -> None:
        self.total = 0
        self.closed = False
        self.log = log

    async def call(self, arguments: dict) -> ToolResult:
        await asyncio.sleep(arguments.get("delay", 0.0))
        self.total += arguments["add"]
        self.log.append(f"+{arguments['add']}")
        return ToolResult(str(self.total))

    async def close(self) -> None:
        self.closed = True


class CounterTool:
    """A stateful schema tool: each trajectory has its own running total."""

    spec = COUNTER_SPEC

    def __init__(self, timeout_s: float = 2.0, open_delay: float = 0.0) -> None:
        self.timeout_s = timeout_s
        self.open_delay = open_delay
        self.sessions: list[CounterSession] = []
        self.log: list[str] = []

    async def open_session(self) -> CounterSession:
        await asyncio.sleep(self.open_delay)
        session = CounterSession(self.log)
        self.sessions.append(session)
        return session

    def live(self) -> list[CounterSession]:
        return [s for s in self.sessions if not s.closed]


def test_a_session_keeps_state_between_one_trajectorys_calls_and_not_anothers():
    tool = CounterTool()
    dispatcher = ToolDispatcher([tool], "observe")
    assert as_typed(tool).stateful

    async def rollout():
        a1 = await dispatcher.call("a", "counter", {"add": 1})
        b1 = await dispatcher.call("b", "counter", {"add": 100})
        a2 = await dispatcher.call("a", "counter", {"add": 2})
        return [o.result.text for o in (a1, b1, a2)]

    assert asyncio.run(rollout()) == ["1", "100", "3"]
    assert len(tool.sessions) == 2  # one per trajectory, opened at its first call


def test_one_turns_calls_to_a_session_run_one_after_another_in_call_order():
    tool = CounterTool()
    dispatcher = ToolDispatcher([tool], "observe")
    calls = [("counter", {"add": 1, "delay": 0.2}), ("counter", {"add": 10}), ("counter", {"add": 100})]
    outcomes = asyncio.run(dispatcher.call_many("a", calls))
    assert [o.result.text for o in outcomes] == ["1", "11", "111"]
    assert tool.log == ["+1", "+10", "+100"] and len(tool.sessions) == 1


def test_sessions_of_different_trajectories_run_in_parallel():
    tool = CounterTool()
    dispatcher = ToolDispatcher([tool], "observe")

    async def three():
        return await asyncio.gather(
            *(dispatcher.call(uid, "counter", {"add": 1, "delay": 0.4}) for uid in ("a", "b", "c"))
        )

    start = time.perf_counter()
    outcomes = asyncio.run(three())
    assert [o.result.text for o in outcomes] == ["1", "1", "1"]
    assert time.perf_counter() - start < 0.6


def test_no_session_outlives_its_trajectory_whether_it_ends_fails_or_is_cancelled():
    tool = CounterTool()
    dispatcher = ToolDispatcher([tool], "observe")

    async def ends(uid: str) -> None:
        async with dispatcher.trajectory(uid):
            await dispatcher.call(uid, "counter", {"add": 1})

    async def fails(uid: str) -> None:
        async with dispatcher.trajectory(uid):
            await dispatcher.call(uid, "counter", {"add": 1})
            raise RuntimeError("the trajectory failed")

    async def cancelled(uid: str, started: asyncio.Event) -> None:
        async with dispatcher.trajectory(uid):
            await dispatcher.call(uid, "counter", {"add": 1})
            started.set()
            await dispatcher.call(uid, "counter", {"add": 1, "delay": 60})

    async def rollout() -> None:
        started = asyncio.Event()
        slow = asyncio.ensure_future(cancelled("c", started))
        await ends("a")
        with pytest.raises(RuntimeError, match="the trajectory failed"):
            await fails("b")
        await started.wait()
        assert len(tool.live()) == 1  # only the cancelled one's, mid-call
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow

    asyncio.run(rollout())
    assert len(tool.sessions) == 3 and tool.live() == []
    assert dispatcher.sessions.open_count == 0


def test_close_all_closes_what_is_left_and_a_closed_trajectory_opens_no_new_session():
    tool = CounterTool()
    dispatcher = ToolDispatcher([tool], "observe")

    async def rollout():
        await dispatcher.call_many("a", [("counter", {"add": 1})])
        await dispatcher.call("b", "counter", {"add": 1})
        assert len(tool.live()) == 2
        await dispatcher.close_all()
        return await dispatcher.call("a", "counter", {"add": 1})

    late = asyncio.run(rollout())
    assert tool.live() == [] and len(tool.sessions) == 2
    assert late.result is None and "trajectory 'a' is closed" in late.error


def test_a_session_call_past_its_deadline_ends_that_session_and_the_next_call_opens_a_fresh_one():
    tool = CounterTool(timeout_s=0.2)
    dispatcher = ToolDispatcher([tool], "observe")

    async def rollout():
        first = await dispatcher.call("a", "counter", {"add": 5})
        hung = await dispatcher.call("a", "counter", {"add": 1, "delay": 60})
        fresh = await dispatcher.call("a", "counter", {"add": 2})
        return first, hung, fresh

    first, hung, fresh = asyncio.run(rollout())
    assert first.result.text == "5"
    assert hung.error.startswith("ToolTimeout: tool 'counter' <counter> did not answer within 0.2 s")
    assert "its session was closed" in hung.error
    assert fresh.result.text == "2"  # a new session: the old total is gone with its session
    assert [s.closed for s in tool.sessions] == [True, False]


def test_a_session_that_opens_after_its_deadline_is_closed_as_soon_as_it_exists():
    tool = CounterTool(timeout_s=0.1, open_delay=0.3)
    dispatcher = ToolDispatcher([tool], "observe")

    async def rollout():
        outcome = await dispatcher.call("a", "counter", {"add": 1})
        await asyncio.sleep(0.4)  # the opening finishes in the background
        await dispatcher.close_all()
        return outcome

    outcome = asyncio.run(rollout())
    assert "did not open a session within 0.1 s" in outcome.error
    assert len(tool.sessions) == 1 and tool.live() == []


def test_a_session_still_opening_when_its_trajectory_closes_is_closed_at_once():
    tool = CounterTool(open_delay=0.2)
    dispatcher = ToolDispatcher([tool], "observe")

    async def rollout():
        calling = asyncio.ensure_future(dispatcher.call("a", "counter", {"add": 1}))
        await asyncio.sleep(0.05)
        await dispatcher.close_trajectory("a")
        return await calling

    outcome = asyncio.run(rollout())
    assert "was closed" in outcome.error
    assert len(tool.sessions) == 1 and tool.live() == []


class SyncCounterTool:
    """A stateful tool written without asyncio: its methods run on threads."""

    spec = COUNTER_SPEC
    timeout_s = 2.0

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.closed = 0

    def open_session(self):
        tool = self

        class Session:
            total = 0

            def call(self, arguments: dict) -> ToolResult:
                tool.threads.add(threading.current_thread().name)
                self.total += arguments["add"]
                return ToolResult(str(self.total))

            def close(self) -> None:
                tool.closed += 1

        return Session()


def test_a_synchronous_stateful_tool_keeps_its_state_on_worker_threads():
    tool = SyncCounterTool()
    dispatcher = ToolDispatcher([tool], "observe")

    async def rollout():
        async with dispatcher.trajectory("a"):
            outcomes = await dispatcher.call_many("a", [("counter", {"add": 2}), ("counter", {"add": 3})])
        return [o.result.text for o in outcomes]

    assert asyncio.run(rollout()) == ["2", "5"]
    assert tool.closed == 1 and threading.main_thread().name not in tool.threads


def test_a_stateful_tool_needs_the_trajectorys_uid():
    dispatcher = ToolDispatcher([CounterTool()], "observe")
    with pytest.raises(ValueError, match="keeps a session per trajectory"):
        asyncio.run(dispatcher.call_batch("counter", [(None, {"add": 1})]))
