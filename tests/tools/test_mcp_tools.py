"""An MCP server's tools as agentrl tools (``agentrl/tools/mcp/tools.py``, ``client.py``).

Against a real MCP server written for the tests with the official SDK
(``tests/support/mcp_server.py``), started by the tests over stdio, and over streamable HTTP on
127.0.0.1. What is promised: the server's tools appear by config alone, with their descriptions
and schemas; they are called through the dispatcher and in a real rollout; arguments off the
schema never reach the server; an ``isError`` result is the tool message; a call past its
timeout is an error observation and the server stays; a server that dies becomes error
observations under ``tool_error_policy=observe`` (never a crashed rollout), the next call
starts it again within ``max_reconnects``; no server process is left once the tools are closed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.dialects import Dialect
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants
from support.tool_conversations import call_block

from agentrl.agent import LLMGenerationManager, PromptSpec
from agentrl.agent.prompts import encode_messages
from agentrl.agent.tool_dispatch import ToolDispatcher
from agentrl.config.schema import RolloutConfig, ToolConfig
from agentrl.ports import free_port
from agentrl.tools.base import ToolError
from agentrl.tools.check import ToolConfigError, check_tools
from agentrl.tools.mcp.tools import MCPTool, MCPTools
from agentrl.tools.registry import build_tool, build_tools, build_toolset

pytestmark = pytest.mark.timeout(120)

SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"
MCP_TOOLS = "agentrl.tools.mcp.MCPTools"
HERMES = Dialect("hermes")


def stdio_options(*extra: str, **options) -> dict:
    return {"command": [sys.executable, str(SERVER), *extra], **options}


def servers_running() -> list[int]:
    """Live (not zombie) processes of the test server that are children of this process."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == os.getpid() and state != "Z" and str(SERVER).encode() in cmdline:
            pids.append(int(entry.name))
    return pids


async def closing(tools: dict) -> None:
    """What the rollout does at its end: every tool's ``close`` (the server stops)."""
    for tool in tools.values():
        await tool.close()


@pytest.fixture(scope="module")
def listed() -> dict:
    """The test server's tools, listed once (each test's loop starts its own server)."""
    return build_tools([ToolConfig(MCP_TOOLS, stdio_options(timeout_s=1.0))])


def test_an_mcp_servers_tools_appear_by_config_alone_with_their_descriptions_and_schemas(listed):
    assert list(listed) == ["add", "echo", "search", "fail", "sleep", "pid", "served_calls", "die"]
    add = listed["add"].spec
    assert add.description == "Add two integers."
    assert add.parameters["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert sorted(add.parameters["required"]) == ["a", "b"]
    assert listed["echo"].spec.to_openai()["function"]["description"] == "Say the text back."
    # an allow-list and a prefix: only those tools, renamed; the listing left no server behind
    (echo, add) = build_toolset(ToolConfig(MCP_TOOLS, stdio_options(tools=["echo", "add"], prefix="calc_")))
    assert (echo.spec.name, add.spec.name) == ("calc_echo", "calc_add")
    assert echo.remote_name == "echo"
    assert servers_running() == []


def test_a_tool_set_is_refused_where_one_tool_is_expected_and_a_bad_allow_list_names_the_choices():
    with pytest.raises(TypeError, match="tool set"):
        build_tool(ToolConfig(MCP_TOOLS, stdio_options()))
    with pytest.raises(ValueError, match=r"lists no tool \['ech'\] \(did you mean 'echo'"):
        build_toolset(ToolConfig(MCP_TOOLS, stdio_options(tools=["ech"])))
    with pytest.raises(ValueError, match="exactly one of 'command'"):
        MCPTools()
    search = ToolConfig("agentrl.tools.retrieval.SearchTool")
    with pytest.raises(ValueError, match="tools SearchTool and MCPTool both use tag <search>"):
        build_tools([search, ToolConfig(MCP_TOOLS, stdio_options(tools=["search"]))])


def test_calls_go_through_the_dispatcher_and_arguments_off_the_schema_never_reach_the_server(listed):
    async def run():
        dispatcher = ToolDispatcher(listed, "observe")
        outcomes = await dispatcher.call_many(
            "t0",
            [
                ("add", {"a": 2, "b": 3}),
                ("echo", {"text": "héllo\nworld"}),
                ("fail", {"reason": "no such page"}),
                ("add", {"a": "two", "b": 3}),
            ],
        )
        served = await dispatcher.call("t0", "served_calls", {})
        await closing(listed)
        return outcomes, served

    (added, echoed, failed, invalid), served = asyncio.run(run())
    assert added.result.text == "5" and added.result.metrics == {"add/errors": 0.0}
    assert echoed.result.text == "héllo\nworld"
    # isError: the server's message is the tool message, counted, not a failure
    assert failed.error is None and "no such page" in failed.result.text
    assert failed.result.metrics == {"fail/errors": 1.0}
    assert invalid.invalid == "schema" and "'two' is not of type 'integer'" in invalid.error
    assert served.result.text == "3", "the call off the schema reached the server"
    assert servers_running() == []


def test_a_call_past_its_timeout_is_an_error_and_the_server_stays(listed):
    async def run():
        dispatcher = ToolDispatcher(listed, "observe")
        first = await dispatcher.call("t0", "pid", {})
        start = time.perf_counter()
        slow = await dispatcher.call("t0", "sleep", {"seconds": 5})
        waited = time.perf_counter() - start
        again = await dispatcher.call("t0", "pid", {})
        await closing(listed)
        return first, slow, waited, again

    first, slow, waited, again = asyncio.run(run())
    assert slow.result is None and slow.error.startswith("ToolTimeout: ")
    assert "did not answer a call of 'sleep' within 1.0 s" in slow.error
    assert waited < 3.0
    assert again.result.text == first.result.text, "a slow call restarted the server"
    assert servers_running() == []


def test_a_server_that_dies_is_started_again_by_the_next_call_within_the_bound(listed):
    tools = MCPTools(**stdio_options(timeout_s=5.0, max_reconnects=1))
    pid, die = (MCPTool(listed[name].spec, name, tools.client, 5.0) for name in ("pid", "die"))

    async def run():
        dispatcher = ToolDispatcher([pid, die], "observe")
        pids, deaths = [], []
        for _ in range(2):
            pids.append((await dispatcher.call("t0", "pid", {})).result.text)
            deaths.append(await dispatcher.call("t0", "die", {}))
        refused = await dispatcher.call("t0", "pid", {})
        await tools.close()
        return pids, deaths, refused

    pids, deaths, refused = asyncio.run(run())
    assert len(set(pids)) == 2, "the call after a death runs on a new server"
    assert all(d.error.startswith("ToolError: ") and "connection ended" in d.error for d in deaths)
    assert refused.result is None and "is not restarted (max_reconnects=1)" in refused.error
    assert servers_running() == []


def test_a_server_that_dies_mid_rollout_becomes_error_observations_not_a_crash(tokenizer, tmp_path):
    """By config alone, in a real rollout (hermes): the server answers, dies for good, and every
    later call is an error observation; the trajectory still answers and no server is left."""
    marker = tmp_path / "dead"
    config = RolloutConfig(
        max_turns=4,
        max_tokens_per_turn=256,
        max_obs_length=512,
        tool_error_policy="observe",
        tools=[ToolConfig(MCP_TOOLS, stdio_options("--dead-marker", str(marker), timeout_s=5.0))],
        **HERMES.config,
    )
    script = [
        call_block("pid", {}),
        call_block("die", {}),
        call_block("add", {"a": 1, "b": 2}) + "\n" + call_block("echo", {"text": "anyone?"}),
        "<answer> done </answer>",
    ]
    engine = ScriptedEngine(tokenizer, lambda ctx: script[HERMES.results_seen(ctx)])
    manager = LLMGenerationManager(
        engine, tokenizer, config, max_prompt_length=1024, max_response_length=4096
    )
    messages = [{"role": "user", "content": "Add one and two."}]
    prompt = PromptSpec(
        encode_messages(tokenizer, messages), "nq", {"target": ["done"]}, 0, messages=messages
    )
    result = manager.run([prompt])
    (t,) = result.trajectories
    assert_rollout_invariants([t], engine, tokenizer)
    assert (t.finished, t.answer) == (True, "done")
    assert [c.status for c in t.calls] == ["ok", "failed", "failed", "failed"]
    assert "connection ended during a call of 'die'" in t.calls[1].message
    assert all("did not start" in c.message for c in t.calls[2:])
    assert t.tool_failures == 3 and result.metrics["rollout/tool_failures_total"] == 3
    assert t.tool_calls == {"pid": 1, "die": 1, "add": 1, "echo": 1}
    assert result.metrics["rollout/tool_calls/pid"] == 1 and result.metrics["rollout/tool/pid/errors"] == 0
    first_server = int(t.calls[0].message)
    assert servers_running() == [] and first_server not in servers_running()


@pytest.fixture(scope="module")
def http_server() -> Iterator[tuple[str, subprocess.Popen]]:
    """The test server over streamable HTTP on a loopback port."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the HTTP MCP server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.kill()
        process.wait(timeout=10)


def test_a_streamable_http_server_is_listed_and_called_and_its_death_is_an_error(http_server):
    url, process = http_server
    tools = build_tools([ToolConfig(MCP_TOOLS, {"url": url, "tools": ["add", "echo"], "timeout_s": 2.0})])
    assert list(tools) == ["add", "echo"]

    async def run():
        dispatcher = ToolDispatcher(tools, "observe")
        ok = await dispatcher.call("t0", "add", {"a": 40, "b": 2})
        process.kill()
        process.wait(timeout=10)
        gone = await dispatcher.call("t0", "echo", {"text": "still there?"})
        await closing(tools)
        return ok, gone

    ok, gone = asyncio.run(run())
    assert ok.result.text == "42"
    assert gone.result is None and gone.error.startswith("ToolError: ")


def test_a_server_nobody_answers_is_a_tool_error_when_listed_and_when_called(listed):
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(ToolError, match=r"MCP server http://127\.0\.0\.1:\d+/mcp did not start"):
        MCPTools(url=url, connect_timeout_s=5.0).list_tools()
    # tools listed while it was up, called while it is down: error observations, then fail-fast
    tools = MCPTools(url=url, connect_timeout_s=5.0, max_reconnects=1)
    add = MCPTool(listed["add"].spec, "add", tools.client, 1.0)

    async def run():
        dispatcher = ToolDispatcher([add], "observe")
        outcomes = [await dispatcher.call("t0", "add", {"a": 1, "b": 1}) for _ in range(3)]
        await tools.close()
        return outcomes

    outcomes = asyncio.run(run())
    assert [o.result for o in outcomes] == [None, None, None]
    assert all("did not start" in o.error for o in outcomes[:2])
    assert "is not restarted (max_reconnects=1)" in outcomes[2].error


def test_the_drivers_check_lists_an_mcp_servers_tools_and_names_the_element_of_a_clash():
    search = ToolConfig("agentrl.tools.retrieval.SearchTool")
    mcp = ToolConfig(MCP_TOOLS, stdio_options(tools=["search", "add"]))
    with pytest.raises(
        ToolConfigError,
        match=r"actor.rollout.tools\[1\] .*: tag 'search' is already used by "
        r"actor.rollout.tools\[0\]; .*'prefix'",
    ):
        check_tools([search, mcp])
    renamed = ToolConfig(MCP_TOOLS, stdio_options(tools=["search", "add"], prefix="mcp_"))
    checked = check_tools([search, renamed])
    assert checked.names == ("search", "mcp_search", "mcp_add") and checked.tags == checked.names
    nobody = ToolConfig(MCP_TOOLS, {"url": f"http://127.0.0.1:{free_port()}/mcp", "connect_timeout_s": 5.0})
    with pytest.raises(ToolConfigError, match=r"actor.rollout.tools\[0\] .*did not start"):
        check_tools([nobody])
    assert servers_running() == []
