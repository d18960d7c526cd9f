"""The sandboxed ``python`` tool registered by config and called in a real rollout, in both formats.

A scripted policy sets a variable in one call, prints it in the next and answers; the
rollout, the format, the dispatcher's sessions and the interpreter processes are the real
ones. Each trajectory keeps one interpreter across its calls, and none is left when the
rollout ends.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest
from support.dialects import DIALECTS, Dialect
from support.prompts import question_prompt
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants

from agentrl.agent import LLMGenerationManager
from agentrl.config.schema import RolloutConfig, ToolConfig
from agentrl.tools.sandbox.isolation import SandboxUnavailable
from agentrl.tools.sandbox.tool import PythonSandboxTool

CALLS = ["x = 6 * 7", "print('x is', x)"]


@pytest.fixture
def work_root() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="agentrl-sandbox-rollout-")  # under /tmp: the sandbox uid can enter it
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_the_python_tool_is_called_by_config_and_keeps_one_interpreter_per_trajectory(
    tokenizer, work_root, dialect: Dialect
) -> None:
    config = RolloutConfig(
        max_turns=3,
        tools=[ToolConfig("agentrl.tools.sandbox.PythonSandboxTool", {"work_root": work_root})],
        **dialect.config,
    )

    def policy(context: str) -> str:
        seen = dialect.results_seen(context)
        if seen < len(CALLS):
            return "<think>compute</think>" + dialect.call("python", "code", CALLS[seen])
        return "<answer> 42 </answer>"

    engine = ScriptedEngine(tokenizer, policy)
    try:
        manager = LLMGenerationManager(
            engine, tokenizer, config, max_prompt_length=1024, max_response_length=1024
        )
    except SandboxUnavailable as exc:  # e.g. no namespaces and the trainer's Python under /root
        pytest.skip(str(exc))
    tool = manager.tools["python"]
    assert isinstance(tool, PythonSandboxTool)
    trajectories = manager.run([question_prompt(tokenizer, "What is six times seven?")], n=2).trajectories
    assert_rollout_invariants(trajectories, engine, tokenizer)
    for traj in trajectories:
        assert traj.tool_calls == {"python": 2} and traj.finished and traj.answer == "42"
        assert "x is 42" in tokenizer.decode(traj.response_ids)  # the second call saw the first's x
        assert traj.tool_metrics["python/errors"] == 0.0 and traj.tool_metrics["python/restarts"] == 0.0
    assert tool.open_sessions == 0 and tool.pool.in_use == 0  # closed with their trajectories
