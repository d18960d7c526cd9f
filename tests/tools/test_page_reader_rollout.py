"""The page reader registered by config and called in a real rollout, in both tool-call formats.

A scripted policy opens a page of the agent tests' toy retriever (a real server
subprocess, ``conftest.retriever_url``) and then answers; the rollout, the format, the
dispatcher, the tool and the server's ``/open_page`` are the real ones.
"""

from __future__ import annotations

import json

import pytest
from support.dialects import DIALECTS, Dialect
from support.prompts import question_prompt
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants

from agentrl.agent import LLMGenerationManager
from agentrl.config.schema import RolloutConfig, ToolConfig
from agentrl.tools.retrieval.page_reader import PageReaderTool

BERLIN = "Berlin is the capital of Germany. " + "The city has many museums and parks. " * 30  # conftest's


def open_page_call(dialect: Dialect, arguments: dict) -> str:
    """A call of the schema tool ``open_page``: a JSON object between its tags, or a JSON call."""
    if dialect.name == "tags":
        return f"<open_page> {json.dumps(arguments)} </open_page>"
    return f"<tool_call>\n{json.dumps({'name': 'open_page', 'arguments': arguments})}\n</tool_call>"


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_the_page_reader_is_called_by_config_and_its_window_is_the_observation(
    tokenizer, retriever_url, dialect: Dialect
) -> None:
    config = RolloutConfig(
        max_turns=2,
        tools=[ToolConfig("agentrl.tools.retrieval.page_reader:PageReaderTool", {"url": retriever_url})],
        **dialect.config,
    )

    def policy(context: str) -> str:
        if dialect.results_seen(context) == 0:
            return "<think>read the page</think>" + open_page_call(dialect, {"title": "Berlin", "length": 12})
        return "<answer> Germany </answer>"

    engine = ScriptedEngine(tokenizer, policy)
    manager = LLMGenerationManager(
        engine, tokenizer, config, max_prompt_length=1024, max_response_length=1024
    )
    assert isinstance(manager.tools["open_page"], PageReaderTool)
    (traj,) = manager.run(
        [question_prompt(tokenizer, "Which country is Berlin the capital of?")]
    ).trajectories
    assert_rollout_invariants([traj], engine, tokenizer)
    assert traj.tool_calls == {"open_page": 1} and traj.finished and traj.answer == "Germany"
    total = len(BERLIN.split())
    window = " ".join(BERLIN.split()[:12])
    expected = f'Page "Berlin", words 0-11 of {total} (next offset: 12).\n{window}'
    assert expected in tokenizer.decode(traj.response_ids)
    assert traj.tool_metrics["open_page/words"] == 12.0
