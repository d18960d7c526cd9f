"""``AgentRollout``: agent functions as the rollout, with the built-in manager's contract.

The scripted policy searches once, then answers; the agents use only the ``openai`` SDK client
they are given (and the run's tools through ``task.tools``): the quickstart's shipped agent, and
small ones that fail in each way an episode can.
"""

from __future__ import annotations

import asyncio

from support.dialects import Dialect
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants
from support.tool_conversations import SPECS, call_block

from agentrl.agent import LLMGenerationManager, PromptSpec
from agentrl.agent.formats import build_format
from agentrl.agent.sampling import rollout_sampling
from agentrl.config.schema import RolloutConfig
from agentrl.endpoint.agents import AgentRollout, answer_of
from agentrl.tools.base import ToolResult

CONFIG = RolloutConfig(
    tool_format="hermes", chat_template="hermes", max_turns=3, max_tokens_per_turn=128, max_obs_length=256
)
LENGTHS = {"max_prompt_length": 1024, "max_response_length": 512}


class Lookup:
    """A schema tool answering every call with a fixed text."""

    timeout_s = 5.0

    def __init__(self, spec) -> None:
        self.spec = spec

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        return [ToolResult(f"Doc: {self.spec.name} result") for _ in arguments]


def policy(context: str) -> str:
    if Dialect("hermes").results_seen(context):
        return "<answer> Paris </answer>"
    return call_block("search", {"query": "capital of France"})


def prompts(tokenizer, count: int) -> list[PromptSpec]:
    fmt = build_format(CONFIG, tokenizer, SPECS)
    out = []
    for i in range(count):
        messages = [{"role": "user", "content": f"Question {i}: where is the Louvre?"}]
        out.append(
            PromptSpec(fmt.render_conversation(messages), data_source="nq", index=i, messages=messages)
        )
    return out


def rollout(tokenizer, agent, **kwargs) -> tuple[AgentRollout, ScriptedEngine]:
    engine = ScriptedEngine(tokenizer, policy)
    tools = [Lookup(s) for s in SPECS]
    return AgentRollout(engine, tokenizer, CONFIG, agent, tools=tools, **LENGTHS, **kwargs), engine


def test_agent_episodes_equal_the_built_in_rollout_row_for_row_with_its_seeds(tokenizer):
    sampling = rollout_sampling(CONFIG, seed=7)
    agents, engine = rollout(tokenizer, "agentrl.quickstart.sdk_agent:run")  # the agent the docs ship
    got = agents.run(prompts(tokenizer, 3), sampling, n=2, first_row=4)
    built_in_engine = ScriptedEngine(tokenizer, policy)
    manager = LLMGenerationManager(
        built_in_engine, tokenizer, CONFIG, tools=[Lookup(s) for s in SPECS], **LENGTHS
    )
    expected = manager.run(prompts(tokenizer, 3), sampling, n=2, first_row=4)

    assert len(got.trajectories) == 6
    assert [t.prompt.index for t in got.trajectories] == [0, 0, 1, 1, 2, 2]  # grouped per prompt
    assert len({t.group_id for t in got.trajectories}) == 3
    for a, b in zip(got.trajectories, expected.trajectories, strict=True):
        assert (a.prompt_ids, a.response_ids, a.segments, a.log_probs) == (
            b.prompt_ids,
            b.response_ids,
            b.segments,
            b.log_probs,
        )
        assert (
            (a.answer, a.finished, a.tool_calls)
            == (b.answer, b.finished, b.tool_calls)
            == ("Paris", True, {"search": 1})
        )
    # the same per-row seed streams as the built-in loop, turn by turn
    assert sorted(c.params.seed for c in engine.calls) == sorted(c.params.seed for c in built_in_engine.calls)
    assert_rollout_invariants(got.trajectories, engine, tokenizer)
    assert got.metrics["rollout/tool_calls/search"] == 1.0 and got.metrics["endpoint/requests"] == 12.0


async def raises(task, client):
    await client.chat.completions.create(model="agentrl", messages=task.messages)
    raise RuntimeError("the agent's own bug")


async def hangs(task, client):
    await client.chat.completions.create(model="agentrl", messages=task.messages)
    await asyncio.sleep(60)


async def scores_itself(task, client):
    await client.chat.completions.create(model="agentrl", messages=task.messages)
    return 0.25


async def never_asks(task, client):
    return "<answer> 42 </answer>"


async def returns_a_list(task, client):
    return ["not", "an", "answer"]


def test_a_failed_episode_keeps_its_tokens_earns_no_answer_and_is_counted_by_reason(tokenizer):
    for agent, reason in ((raises, "RuntimeError"), (hangs, "timeout"), (returns_a_list, "bad_return")):
        agents, engine = rollout(tokenizer, agent, timeout_s=1.0)
        result = agents.run(prompts(tokenizer, 2), n=1)
        assert result.metrics[f"agent/errors/{reason}"] == 2.0, reason
        for t in result.trajectories:
            assert t.answer is None and not t.finished
        asked = sum(1 for t in result.trajectories if t.num_turns)
        assert asked == len(engine.calls) == (0 if agent is returns_a_list else 2)


def test_an_agents_number_is_its_outcome_and_one_that_never_asked_is_an_empty_sample(tokenizer):
    agents, _ = rollout(tokenizer, scores_itself)
    (t,) = agents.run(prompts(tokenizer, 1)).trajectories
    assert t.outcome_reward == 0.25 and t.num_turns == 1

    agents, engine = rollout(tokenizer, never_asks)
    (t,) = agents.run(prompts(tokenizer, 1)).trajectories
    assert engine.calls == [] and t.response_ids == [] and t.answer == "42"
    assert t.prompt_ids == prompts(tokenizer, 1)[0].prompt_ids


def test_the_answer_of_returned_text_is_its_answer_tags_body_or_the_text_stripped():
    assert answer_of("Thinking... <answer> Paris </answer>") == "Paris"
    assert answer_of("  Paris \n") == "Paris"
    assert answer_of("   ") is None


def test_an_agent_named_by_import_path_is_loaded_and_a_bad_path_names_the_config_key(tokenizer):
    agents, _ = rollout(tokenizer, "test_agent_rollout:scores_itself")
    assert agents.agent is scores_itself
    try:
        rollout(tokenizer, "no_such_module:run")
    except ImportError as error:
        assert "actor.rollout.agent.entry" in str(error)
    else:
        raise AssertionError("a bad import path must be refused")
