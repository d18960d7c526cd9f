"""The tool dispatcher by name: parallel calls in call order, checks before running, batching,
retries that isolate a bad call, and a tool's broken contract named instead of retried."""

from __future__ import annotations

import asyncio
import time

import pytest
from support.tag_tools import RecordingTagTool

from agentrl.agent.tool_dispatch import ToolDispatcher
from agentrl.tools import ToolContractError, ToolResult, ToolSpec

LATENCY_S = 0.4

WAIT_SPEC = {
    "type": "object",
    "properties": {"label": {"type": "string"}, "delay": {"type": "number", "minimum": 0}},
    "required": ["label"],
}


class WaitTool:
    """A real asyncio schema tool: each batch waits ``latency`` seconds (or the largest ``delay``)."""

    timeout_s = 5.0

    def __init__(self, name: str = "wait", latency: float = LATENCY_S) -> None:
        self.spec = ToolSpec(name, "Waits, then echoes its label.", WAIT_SPEC)
        self.latency = latency
        self.batches: list[list[str]] = []

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        self.batches.append([a["label"] for a in arguments])
        await asyncio.sleep(max([self.latency, *(a.get("delay", 0) for a in arguments)]))
        return [ToolResult(f"{self.spec.name}:{a['label']}") for a in arguments]


class PerCallWaitTool(WaitTool):
    """Waits per call, one call after another: only separate batches can overlap."""

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        results = []
        for a in arguments:
            results.extend(await super().call([a]))
        return results


def run(coro):
    start = time.perf_counter()
    result = asyncio.run(coro)
    return result, time.perf_counter() - start


def test_three_parallel_calls_to_a_tool_with_latency_l_finish_in_less_than_one_and_a_half_l():
    tool = WaitTool()
    dispatcher = ToolDispatcher([tool], "observe")
    calls = [("wait", {"label": str(i)}) for i in range(3)]
    outcomes, elapsed = run(dispatcher.call_many("t0", calls))
    assert [o.result.text for o in outcomes] == ["wait:0", "wait:1", "wait:2"]
    assert elapsed < 1.5 * LATENCY_S, f"3 calls of {LATENCY_S} s took {elapsed:.2f} s"
    assert tool.batches == [["0", "1", "2"]]  # one batch: the back end saw them together


def test_three_parallel_calls_to_three_tools_overlap_too():
    tools = [PerCallWaitTool(name) for name in ("a", "b", "c")]
    dispatcher = ToolDispatcher(tools, "observe")
    calls = [(name, {"label": "x"}) for name in ("a", "b", "c")]
    outcomes, elapsed = run(dispatcher.call_many("t0", calls))
    assert [o.result.text for o in outcomes] == ["a:x", "b:x", "c:x"]
    assert elapsed < 1.5 * LATENCY_S, f"3 calls of {LATENCY_S} s took {elapsed:.2f} s"


def test_outcomes_come_back_in_call_order_whatever_finishes_first():
    fast, slow = WaitTool("fast", latency=0.0), WaitTool("slow", latency=0.0)
    dispatcher = ToolDispatcher([fast, slow], "observe")
    calls = [
        ("slow", {"label": "1", "delay": 0.3}),
        ("fast", {"label": "2"}),
        ("nope", {"label": "3"}),
        ("slow", {"label": "4", "delay": 0.3}),
        ("fast", {"label": "5", "delay": "soon"}),
        ("fast", {"label": "6"}),
    ]
    outcomes, _ = run(dispatcher.call_many("t0", calls))
    texts = [o.result.text if o.result else o.invalid for o in outcomes]
    assert texts == ["slow:1", "fast:2", "unknown_tool", "slow:4", "schema", "fast:6"]


def test_a_call_that_does_not_fit_never_runs_and_says_why():
    tool = WaitTool(latency=0.0)
    dispatcher = ToolDispatcher([tool], "raise")  # the policy's mistakes never raise

    async def calls():
        return [
            await dispatcher.call("t0", "search", {"query": "x"}),
            await dispatcher.call("t0", "wait", {"delay": 1}),
            await dispatcher.call("t0", "wait", {"label": "x", "delay": -1}),
        ]

    unknown, missing, negative = asyncio.run(calls())
    assert (unknown.invalid, unknown.result) == ("unknown_tool", None)
    assert "unknown tool 'search'" in unknown.error and "['wait']" in unknown.error
    assert missing.invalid == "schema" and "'label' is a required property" in missing.error
    assert negative.invalid == "schema" and "delay: -1 is less than the minimum of 0" in negative.error
    assert tool.batches == []
    assert dispatcher.check("wait", {"label": "x"}) is None


def test_calls_of_many_trajectories_in_one_pass_are_coalesced_into_one_batch():
    tool = WaitTool(latency=0.05)
    dispatcher = ToolDispatcher([tool], "observe")

    async def trajectories():
        return await asyncio.gather(*(dispatcher.call(f"t{i}", "wait", {"label": str(i)}) for i in range(4)))

    outcomes = asyncio.run(trajectories())
    assert [o.result.text for o in outcomes] == [f"wait:{i}" for i in range(4)]
    assert tool.batches == [["0", "1", "2", "3"]]
    assert dispatcher.busy_seconds >= 0.05


class FlakyTool(WaitTool):
    """Raises on a batch that holds 'boom', hangs on 'hang'."""

    timeout_s = 0.3

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        labels = [a["label"] for a in arguments]
        self.batches.append(labels)
        if "boom" in labels:
            raise RuntimeError("backend exploded")
        if "hang" in labels:
            await asyncio.sleep(3600)
        return [ToolResult(f"ok {label}") for label in labels]


def test_a_failing_batch_is_retried_call_by_call_so_one_bad_call_costs_only_itself():
    tool = FlakyTool(latency=0.0)
    dispatcher = ToolDispatcher([tool], "observe")
    batch = [(f"t{i}", {"label": label}) for i, label in enumerate(["fine", "boom", "hang"])]
    ok, boom, hang = asyncio.run(dispatcher.call_batch("wait", batch))
    assert ok.result.text == "ok fine"
    assert boom.error == "RuntimeError: backend exploded" and boom.invalid is None
    assert hang.error.startswith("ToolTimeout: tool 'wait' <wait> did not answer within 0.3 s")
    assert tool.batches[0] == ["fine", "boom", "hang"] and sorted(tool.batches[1:]) == [
        ["boom"],
        ["fine"],
        ["hang"],
    ]
    with pytest.raises(RuntimeError, match="backend exploded"):
        asyncio.run(ToolDispatcher([FlakyTool()], "raise").call_batch("wait", batch[1:2]))


class MiscountingTool(WaitTool):
    """Drops the last result of every batch: a bug in the tool."""

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        self.batches.append([a["label"] for a in arguments])
        return [ToolResult("x") for _ in arguments[:-1]]


@pytest.mark.parametrize("policy", ["observe", "raise"])
def test_a_tool_that_returns_the_wrong_number_of_results_is_named_not_retried(policy):
    tool = MiscountingTool(name="miscount")
    dispatcher = ToolDispatcher([tool], policy)
    calls = [("miscount", {"label": "a"}), ("miscount", {"label": "b"})]
    with pytest.raises(ToolContractError, match=r"tool 'miscount' <miscount> returned 1 results for 2 calls"):
        asyncio.run(dispatcher.call_many("t0", calls))
    assert tool.batches == [["a", "b"]]  # no call-by-call retry hid it


def test_a_tool_that_returns_something_else_than_results_is_named():
    class Strings(WaitTool):
        async def call(self, arguments):
            return ["plain text" for _ in arguments]

    dispatcher = ToolDispatcher([Strings("strings")], "observe")
    with pytest.raises(ToolContractError, match=r"tool 'strings' <strings> returned str for call 0"):
        asyncio.run(dispatcher.call("t0", "strings", {"label": "a"}))


class EchoTagTool(RecordingTagTool):
    """Today's tag tool: ``<echo> text </echo>``."""

    def __init__(self) -> None:
        super().__init__("echoer", "echo")

    async def answer(self, call: str) -> ToolResult:
        return ToolResult(f"echo {call}")


def test_the_tags_rollouts_calls_by_tag_reach_the_tag_tool_unchanged():
    tool = EchoTagTool()
    dispatcher = ToolDispatcher({"echo": tool}, "observe")

    async def tag_calls():
        single = await asyncio.gather(dispatcher.call("echo", "a b"), dispatcher.call("echo", "c"))
        batch = await dispatcher.run_batch("echo", ["d", "e"])
        named = await dispatcher.call("t0", "echo", {"query": "f"})
        return [*single, *batch, named]

    outcomes = asyncio.run(tag_calls())
    assert [o.result.text for o in outcomes] == ["echo a b", "echo c", "echo d", "echo e", "echo f"]
    assert tool.batches == [["a b", "c"], ["d", "e"], ["f"]]
    assert dispatcher.tool_for_tag("echo").name == "echo"


def test_two_tools_may_not_share_a_name():
    with pytest.raises(ValueError, match="share the name 'wait'"):
        ToolDispatcher([WaitTool(), WaitTool()], "observe")
    with pytest.raises(ValueError, match="tool_error_policy"):
        ToolDispatcher([], "ignore")
