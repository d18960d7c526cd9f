"""``AgentRollout``: agent functions as the rollout, with the built-in manager's contract.

The scripted policy searches once, then answers; the agents use only the ``openai`` SDK client
they are given (and the run's tools through ``task.tools``): the quickstart's shipped agent, and
small ones that fail in each way an episode can.
"""

from __future__ import annotations

import asyncio

import pytest
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


def always_searches(context: str) -> str:
    return call_block("search", {"query": "capital of France"})


def test_past_max_turns_the_final_turn_ends_the_episode_as_in_the_built_in_loop(tokenizer):
    config = RolloutConfig(
        tool_format="hermes", chat_template="hermes", max_turns=1, max_tokens_per_turn=128, max_obs_length=256
    )
    engine = ScriptedEngine(tokenizer, always_searches)
    tools = [Lookup(s) for s in SPECS]
    agents = AgentRollout(
        engine, tokenizer, config, "agentrl.quickstart.sdk_agent:run", tools=tools, **LENGTHS
    )
    (got,) = agents.run(prompts(tokenizer, 1), rollout_sampling(config, seed=3)).trajectories
    manager = LLMGenerationManager(
        ScriptedEngine(tokenizer, always_searches), tokenizer, config, tools=tools, **LENGTHS
    )
    (expected,) = manager.run(prompts(tokenizer, 1), rollout_sampling(config, seed=3)).trajectories
    # turn 0 searches; the observation carries the final-turn note; turn 1 is read for an answer only
    assert (got.response_ids, got.segments) == (expected.response_ids, expected.segments)
    assert got.num_turns == expected.num_turns == 2
    counts = (got.num_valid_actions, got.tool_calls_invalid, got.answer, got.finished)
    assert counts == (
        expected.num_valid_actions,
        expected.tool_calls_invalid,
        expected.answer,
        expected.finished,
    )
    assert got.tool_calls_invalid == {"no_action": 1} and got.answer is None


SECOND_TURNS = {  # what the policy writes once it has read the search's results
    "ramble": "I think " * 200,  # never closes anything: the response budget cuts it
    "unclosed_answer": "<answer> Paris " + "and more " * 200,
    "answer_cut_by_budget": "<answer> " + "Paris " * 60 + "</answer>",
    "call_off_schema": '<tool_call>\n{"name": "search", "arguments": {"q": 1}}\n</tool_call>',
    "unknown_tool": call_block("weather", {"city": "Paris"}),
    "two_answers": "<answer> Paris </answer><answer> Lyon </answer>",
    "answer_inside_thinking": "<think> maybe <answer> Lyon </answer> </think> no answer",
    "call_then_answer": call_block("search", {"query": "x"}) + "<answer> Paris </answer>",
    "answer_then_ramble_to_the_cap": "<answer> Paris </answer>" + " blah" * 300,
}


@pytest.mark.parametrize(
    ("second", "budget"),
    [
        ("ramble", 200),
        ("unclosed_answer", 200),
        ("answer_cut_by_budget", 120),
        ("call_off_schema", 300),
        ("unknown_tool", 300),
        ("two_answers", 512),
        ("answer_inside_thinking", 512),
        ("call_then_answer", 512),
        ("answer_then_ramble_to_the_cap", 512),
    ],
)
def test_an_episode_ending_at_the_budget_or_calling_what_cannot_run_is_counted_as_the_built_in_loop_counts_it(
    tokenizer, second, budget
):
    # 200 response tokens: the search and its observation leave less than the 128 a turn may take,
    # so a long second turn ends at the budget, not at its own cap
    def policy(context: str) -> str:
        if Dialect("hermes").results_seen(context):
            return SECOND_TURNS[second]
        return call_block("search", {"query": "capital of France"})

    lengths = {**LENGTHS, "max_response_length": budget}
    tools = [Lookup(s) for s in SPECS]
    agents = AgentRollout(
        ScriptedEngine(tokenizer, policy),
        tokenizer,
        CONFIG,
        "agentrl.quickstart.sdk_agent:run",
        tools=tools,
        **lengths,
    )
    (got,) = agents.run(prompts(tokenizer, 1), rollout_sampling(CONFIG, seed=5)).trajectories
    manager = LLMGenerationManager(
        ScriptedEngine(tokenizer, policy), tokenizer, CONFIG, tools=tools, **lengths
    )
    (expected,) = manager.run(prompts(tokenizer, 1), rollout_sampling(CONFIG, seed=5)).trajectories
    assert (got.response_ids, got.segments) == (expected.response_ids, expected.segments)
    fields = ("truncation", "finished", "answer", "tool_calls", "tool_calls_invalid", "num_valid_actions")
    assert {f: getattr(got, f) for f in fields} == {f: getattr(expected, f) for f in fields}
    assert [(c.turn, c.name, c.status) for c in got.calls] == [
        (c.turn, c.name, c.status) for c in expected.calls
    ]
    if second == "ramble":
        assert expected.truncation.response_budget and expected.truncation.turn_budget_hits == 0
    if second in ("unclosed_answer", "answer_cut_by_budget"):
        assert not expected.finished and expected.answer is None
    if second in ("call_off_schema", "unknown_tool"):
        reason = "schema" if second == "call_off_schema" else "unknown_tool"
        assert expected.tool_calls_invalid.get(reason, 0) >= 1


class FailsOnce(ScriptedEngine):
    """Raises on its ``fail_at``-th generation (0-based), as an engine that lost a request."""

    def __init__(self, tokenizer, policy, fail_at: int) -> None:
        super().__init__(tokenizer, policy)
        self.fail_at, self.seen = fail_at, 0

    async def generate(self, prompt_ids, params):
        self.seen += 1
        if self.seen - 1 == self.fail_at:
            raise RuntimeError("engine lost the request")
        return await super().generate(prompt_ids, params)


async def retries(task, client):
    """The quickstart agent with a client that retries a server error, as SDK clients do."""
    import openai

    from agentrl.quickstart.sdk_agent import run

    create = client.chat.completions.create

    async def again(**kwargs):
        for _ in range(3):
            try:
                return await create(**kwargs)
            except openai.InternalServerError:
                continue
        raise AssertionError("three server errors")

    client.chat.completions.create = again
    return await run(task, client)


def test_a_request_retried_after_a_server_error_is_recorded_once(tokenizer):
    agents, engine = rollout(tokenizer, retries)
    agents.engine = FailsOnce(tokenizer, policy, fail_at=1)  # the request after the tool result
    (got,) = agents.run(prompts(tokenizer, 1)).trajectories
    clean, _ = rollout(tokenizer, "agentrl.quickstart.sdk_agent:run")
    (expected,) = clean.run(prompts(tokenizer, 1)).trajectories
    assert (got.response_ids, got.segments, got.answer) == (expected.response_ids, expected.segments, "Paris")
    assert agents.engine.seen == 3


async def asks_twice_at_once(task, client):
    replies = await asyncio.gather(
        *(client.chat.completions.create(model="agentrl", messages=task.messages) for _ in range(2))
    )
    return replies[-1].choices[0].message.content


def test_concurrent_requests_of_one_episode_are_taken_in_turn_each_turn_from_its_own_prompt(tokenizer):
    agents, engine = rollout(tokenizer, asks_twice_at_once)
    (got,) = agents.run(prompts(tokenizer, 1)).trajectories
    # the second request does not extend the first's reply: it is a step of its own
    assert got.num_steps == 2 and [step.turns for step in got.all_steps] == [[0], [1]]
    assert all(step.prompt_ids == got.all_steps[0].prompt_ids for step in got.all_steps)
    assert_rollout_invariants([got], engine, tokenizer)


async def answers_then_raises(task, client):
    await client.chat.completions.create(model="agentrl", messages=task.messages)
    raise RuntimeError("the agent's own bug")


def test_a_timed_out_episode_records_nothing_after_it_ends_and_a_failed_one_keeps_no_answer(tokenizer):
    agents, _ = rollout(tokenizer, "agentrl.quickstart.sdk_agent:run", timeout_s=0.3)
    agents.engine = ScriptedEngine(tokenizer, policy, delay_s=1.5)
    result = agents.run(prompts(tokenizer, 1))
    (t,) = result.trajectories
    assert result.metrics["agent/errors/timeout"] == 1.0
    assert t.num_turns == 0 and t.response_ids == []  # the turn in flight was cancelled, not recorded

    agents, _ = rollout(tokenizer, answers_then_raises)
    agents.engine = ScriptedEngine(tokenizer, lambda context: "<answer> Paris </answer>")
    (t,) = agents.run(prompts(tokenizer, 1)).trajectories
    assert t.num_turns == 1 and t.answer is None and not t.finished  # the turn's answer is not the agent's


async def calculates(task, client):
    await client.chat.completions.create(model="agentrl", messages=task.messages)
    ok = await task.tools["calculate"]({"expression": "6 * 7"})
    refused = await task.tools["calculate"]({"query": "6 * 7"})
    return f"<answer> {ok} </answer> {refused}"


def test_the_runs_tag_tools_run_for_an_agent_through_the_dispatcher_with_their_schema_and_metrics(tokenizer):
    from support.tool_conversations import SEARCH

    from agentrl.tools.calculator import CalculatorTool

    engine = ScriptedEngine(tokenizer, policy)
    agents = AgentRollout(
        engine, tokenizer, CONFIG, calculates, tools=[Lookup(SEARCH), CalculatorTool()], **LENGTHS
    )
    result = agents.run(prompts(tokenizer, 1))
    (t,) = result.trajectories
    assert result.metrics.get("agent/episodes") == 1.0, result.metrics
    assert t.answer == "42" and t.tool_metrics == {"calc_errors": 0.0} and t.tool_failures == 0, (
        result.metrics
    )


def test_the_agents_counts_add_up_over_data_parallel_ranks(tokenizer):
    from agentrl.agent.generation import RolloutResult

    agents, _ = rollout(tokenizer, raises)
    parts = [agents.run(prompts(tokenizer, 2)) for _ in range(2)]
    merged = RolloutResult.merge(parts)
    assert merged.metrics["agent/errors/RuntimeError"] == 4.0 and merged.metrics["agent/episodes"] == 4.0
    assert merged.metrics["endpoint/requests"] == 4.0
