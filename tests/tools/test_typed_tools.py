"""Typed tools: a schema per tool, arguments checked against it, tag tools as one-string tools,
synchronous tools bounded by their deadline."""

from __future__ import annotations

import asyncio
import copy
import pickle
import threading
import time

import pytest
from support.tag_tools import RecordingTagTool

from agentrl.agent.tool_dispatch import ToolDispatcher
from agentrl.config.schema import ToolConfig
from agentrl.tools import ToolResult, ToolSpec, argument_errors, as_typed
from agentrl.tools.calculator import CalculatorTool
from agentrl.tools.registry import build_tool, build_tools
from agentrl.tools.retrieval.search import SearchTool
from agentrl.tools.spec import _validator_of, validator_for

LOOKUP_SPEC = ToolSpec(
    "lookup",
    "Look a key up in a table.",
    {
        "type": "object",
        "properties": {
            "key": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1},
            "filters": {"type": "object", "properties": {"year": {"type": "integer"}}},
        },
        "required": ["key"],
        "additionalProperties": False,
    },
)


class LookupTool:
    """A schema tool built by the registry in these tests (``class_path`` is this module)."""

    spec = LOOKUP_SPEC

    def __init__(self, table: dict[str, str] | None = None, timeout_s: float = 2.0) -> None:
        self.table = table or {"pi": "3.14159"}
        self.timeout_s = timeout_s
        self.batches: list[list[dict]] = []

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        self.batches.append(arguments)
        return [ToolResult(self.table.get(a["key"], "no entry")) for a in arguments]


class DefineTool(RecordingTagTool):
    """A tag tool with neither ``argument`` nor ``description``."""

    def __init__(self) -> None:
        super().__init__("glossary", "define")

    async def answer(self, call: str) -> ToolResult:
        return ToolResult(f"def of {call}")


def test_a_spec_renders_in_the_openai_function_format():
    assert LOOKUP_SPEC.to_openai() == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a key up in a table.",
            "parameters": LOOKUP_SPEC.parameters,
        },
    }


def test_a_spec_refuses_a_name_or_parameters_a_template_could_not_use():
    with pytest.raises(ValueError, match="identifier"):
        ToolSpec("two words", "x", {"type": "object"})
    with pytest.raises(ValueError, match="type 'object'"):
        ToolSpec("lookup", "x", {"type": "string"})
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        ToolSpec("lookup", "x", {"type": "object", "properties": {"key": {"type": "no-such-type"}}})


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({}, "arguments: 'key' is a required property"),
        ({"key": 3}, "key: 3 is not of type 'string'"),
        ({"key": "pi", "limit": 0}, "limit: 0 is less than the minimum of 1"),
        ({"key": "pi", "filters": {"year": "1969"}}, "filters.year: '1969' is not of type 'integer'"),
        ({"key": "pi", "colour": "red"}, "('colour' was unexpected)"),
        (["pi"], "arguments of 'lookup' must be a JSON object, got list"),
    ],
)
def test_argument_errors_name_the_field_that_fails(arguments, reason):
    assert reason in argument_errors(LOOKUP_SPEC, arguments)


def test_arguments_that_fit_the_schema_have_no_errors():
    assert argument_errors(LOOKUP_SPEC, {"key": "pi", "limit": 2, "filters": {"year": 1969}}) is None


def test_a_schemas_validator_is_built_once_and_reused_while_the_spec_still_pickles():
    twin = ToolSpec(
        "lookup_twin", "The lookup schema under another name.", copy.deepcopy(LOOKUP_SPEC.parameters)
    )
    assert validator_for(twin) is validator_for(LOOKUP_SPEC)
    before = _validator_of.cache_info()
    for arguments in ({"key": "pi"}, {"key": 1}, {"limit": 0}):
        argument_errors(LOOKUP_SPEC, arguments)
        argument_errors(twin, arguments)
    after = _validator_of.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (6, 0)
    assert "key" in argument_errors(twin, {"key": 1})  # the shared validator checks as its own would

    shipped = pickle.loads(pickle.dumps(LOOKUP_SPEC))  # what Ray does to a spec on its way to a worker
    assert shipped == LOOKUP_SPEC and "limit" in argument_errors(shipped, {"key": "pi", "limit": 0})


def test_a_tag_tool_is_a_tool_with_one_string_parameter():
    search, calc, define = as_typed(SearchTool()), as_typed(CalculatorTool()), as_typed(DefineTool())
    assert (search.name, search.tag, search.argument) == ("search", "search", "query")
    assert search.spec.parameters["required"] == ["query"] and "passage" in search.spec.description
    assert (calc.name, calc.tag, calc.spec.parameters["required"]) == (
        "calculate",
        "calculate",
        ["expression"],
    )
    assert define.spec.description == "Call define with one string."
    assert define.spec.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    }
    assert argument_errors(calc.spec, {"expression": "1+1"}) is None
    assert "expression" in argument_errors(calc.spec, {"query": "1+1"})


def test_a_tag_tool_gets_the_stripped_texts_of_its_typed_calls():
    tool = DefineTool()
    results = asyncio.run(as_typed(tool).call([{"query": "  PPO "}, {"query": "RL"}]))
    assert tool.batches == [["PPO", "RL"]]
    assert [r.text for r in results] == ["def of PPO", "def of RL"]


def test_the_registry_builds_a_schema_tool_beside_the_tag_tools():
    lookup = build_tool(ToolConfig(f"{__name__}:LookupTool", {"table": {"e": "2.718"}}))
    assert isinstance(lookup, LookupTool) and lookup.table == {"e": "2.718"}
    tools = build_tools([ToolConfig(), ToolConfig(f"{__name__}:LookupTool")])
    assert sorted(tools) == ["lookup", "search"]
    typed = as_typed(tools["lookup"])
    assert (typed.name, typed.tag, typed.argument, typed.stateful) == ("lookup", "lookup", None, False)
    with pytest.raises(ValueError, match="unknown option"):
        build_tool(ToolConfig(f"{__name__}:LookupTool", {"tabel": {}}))
    with pytest.raises(ValueError, match="both use tag <lookup>"):
        build_tools([ToolConfig(f"{__name__}:LookupTool")] * 2)


def test_a_malformed_schema_tool_is_refused_by_name():
    class NoCall:
        spec = LOOKUP_SPEC
        timeout_s = 1.0

    class NoTimeout:
        spec = LOOKUP_SPEC

        async def call(self, arguments):
            return []

    class NotASpec(LookupTool):
        spec = {"name": "lookup"}

    class ReservedTag(LookupTool):
        tag = "answer"

    with pytest.raises(TypeError, match="NoCall has a spec but neither 'call' nor 'open_session'"):
        as_typed(NoCall())
    with pytest.raises(TypeError, match="NoTimeout has no 'timeout_s'"):
        as_typed(NoTimeout())
    with pytest.raises(TypeError, match=r"NotASpec.spec must be a ToolSpec"):
        as_typed(NotASpec())
    with pytest.raises(ValueError, match="reserved"):
        as_typed(ReservedTag())
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        as_typed(LookupTool(timeout_s=0))


class BlockingTool:
    """A synchronous tag tool whose ``execute`` blocks its thread until released (or 10 s)."""

    name = "blocking"
    tag = "block"
    timeout_s = 0.3

    def __init__(self) -> None:
        self.release = threading.Event()
        self.finished = threading.Event()

    def execute(self, calls: list[str]) -> list[ToolResult]:
        self.release.wait(timeout=10)
        self.finished.set()
        return [ToolResult("late") for _ in calls]


class SleepyTool:
    """A synchronous schema tool that takes ``delay`` seconds of blocking work per batch."""

    spec = ToolSpec("sleepy", "Sleeps.", {"type": "object", "properties": {}})
    timeout_s = 2.0

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def call(self, arguments: list[dict]) -> list[ToolResult]:
        time.sleep(self.delay)
        return [ToolResult("rested") for _ in arguments]


def test_a_blocking_synchronous_tool_is_cut_at_its_deadline_and_the_rollout_does_not_wait_for_it():
    tool = BlockingTool()
    dispatcher = ToolDispatcher([tool, LookupTool()], "observe")

    async def turn():
        return await dispatcher.call_many("t0", [("block", {"query": "x"}), ("lookup", {"key": "pi"})])

    start = time.perf_counter()
    blocked, looked_up = asyncio.run(turn())
    elapsed = time.perf_counter() - start
    try:
        assert elapsed < 1.5, f"the deadline of 0.3 s took {elapsed:.2f} s to fire"
        assert blocked.result is None and "ToolTimeout" in blocked.error and "<block>" in blocked.error
        assert looked_up.result.text == "3.14159"  # the loop kept serving other calls
        assert not tool.finished.is_set()  # the thread is still running in the background
    finally:
        tool.release.set()
    assert tool.finished.wait(timeout=5)


def test_a_synchronous_tool_runs_off_the_event_loop():
    dispatcher = ToolDispatcher([SleepyTool(0.4)], "observe")

    async def with_ticker():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        ticking = asyncio.ensure_future(ticker())
        outcome = await dispatcher.call("t0", "sleepy", {})
        ticking.cancel()
        return outcome, ticks

    outcome, ticks = asyncio.run(with_ticker())
    assert outcome.result.text == "rested"
    assert ticks >= 5  # the ticker ran while the tool slept 0.4 s on its thread (a blocked loop: 0)
