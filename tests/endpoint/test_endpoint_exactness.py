"""An agent written against the ``openai`` SDK, rolled out through the endpoint, is token-exact.

The same scripted policy plays the same conversation twice: once in the built-in ``hermes``
loop (``LLMGenerationManager``), once answered by the endpoint (``ChatEndpoint`` on loopback)
to an agent that only uses ``openai.AsyncOpenAI``: it sends the conversation, echoes each
reply, runs the calls and sends their results as tool messages. The two trajectories are the
same id for id, mask for mask and log-prob for log-prob, with parallel calls and a malformed
call. An agent that rewrites its history instead yields steps whose sampled tokens are each
in exactly one step's loss, and whose prompts are the render of what the agent sent.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from openai import AsyncOpenAI
from support.dialects import Dialect
from support.registry_tokenizers import load
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants
from support.tool_conversations import SPECS, THREE_TURNS, Turn

from agentrl.agent import LLMGenerationManager, PromptSpec
from agentrl.agent.formats import build_format
from agentrl.agent.sampling import rollout_sampling
from agentrl.config.schema import RolloutConfig
from agentrl.endpoint.episode import Budget
from agentrl.endpoint.server import ChatEndpoint
from agentrl.tools.base import ToolResult

QUESTION = "Where is the Eiffel Tower?"
CONFIG = RolloutConfig(
    tool_format="hermes", chat_template="hermes", max_turns=6, max_tokens_per_turn=256, max_obs_length=512
)
# Qwen3's own template with thinking off drops each earlier turn's empty think block: every turn
# of the built-in loop is a new step, and the endpoint must begin the same steps
QWEN3 = RolloutConfig(
    tool_format="hermes", enable_thinking=False, max_turns=6, max_tokens_per_turn=256, max_obs_length=512
)
BUDGET = Budget(max_prompt_length=2048, max_response_length=2048, max_obs_length=512)
BAD_CALL = '<tool_call>\n{"name": "search", "arguments": {"query": "x"}\n</tool_call>'  # one brace short
MALFORMED = [
    Turn("Two at once.", [("search", {"query": "capital of France"})], ["Doc 1: Paris is the capital."]),
    Turn("<answer> Paris </answer>"),
]


def results_of(turns: list[Turn]) -> dict[str, str]:
    return {
        next(iter(arguments.values())): result
        for turn in turns
        for (_, arguments), result in zip(turn.calls, turn.results, strict=True)
    }


class ScriptedResults:
    """A schema tool whose result for each argument set is the conversation's."""

    timeout_s = 5.0

    def __init__(self, spec, results: dict[str, str]) -> None:
        self.spec, self.results = spec, results

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        return [ToolResult(self.results[next(iter(a.values()))]) for a in arguments]


def policy(turns: list[Turn], malformed_at: int | None = None):
    """The turn texts, chosen by how many observations the context holds."""

    def play(context: str) -> str:
        k = Dialect("hermes").results_seen(context)
        text = turns[k].text("")
        return text + "\n" + BAD_CALL if k == malformed_at else text

    return play


def built_in(tokenizer, config: RolloutConfig, turns: list[Turn], malformed_at: int | None = None):
    engine = ScriptedEngine(tokenizer, policy(turns, malformed_at))
    tools = [ScriptedResults(s, results_of(turns)) for s in SPECS]
    manager = LLMGenerationManager(
        engine, tokenizer, config, tools=tools, max_prompt_length=2048, max_response_length=2048
    )
    messages = [{"role": "user", "content": QUESTION}]
    (t,) = manager.run(
        [PromptSpec(manager.format.render_conversation(messages), messages=messages)]
    ).trajectories
    return t, engine


async def sdk_agent(client: AsyncOpenAI, results: dict[str, str], rewrite: bool = False) -> str | None:
    """An agent as people write them: the conversation in, the reply echoed, the calls run.
    ``rewrite``: before each request it shortens every tool result but the latest."""
    tools = [s.to_openai() for s in SPECS]
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    for _ in range(8):
        sent = messages
        if rewrite:
            last_tool = max((i for i, m in enumerate(messages) if m["role"] == "tool"), default=-1)
            sent = [
                {**m, "content": "[shortened]"} if m["role"] == "tool" and i < last_tool - 2 else m
                for i, m in enumerate(messages)
            ]
        reply = await client.chat.completions.create(model="agentrl", messages=sent, tools=tools)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        extra = message.model_extra or {}
        answers = {
            c.id: results[next(iter(json.loads(c.function.arguments).values()))]
            for c in message.tool_calls or []
        }
        answers |= {c["id"]: c["message"] for c in extra.get("invalid_calls", [])}
        if not answers:
            return message.content
        for call_id in sorted(answers, key=lambda i: int(i.rsplit("_", 1)[1])):  # in call order
            messages.append({"role": "tool", "tool_call_id": call_id, "content": answers[call_id]})
    return None


def through_endpoint(
    tokenizer,
    config: RolloutConfig,
    turns: list[Turn],
    malformed_at: int | None = None,
    rewrite: bool = False,
):
    engine = ScriptedEngine(tokenizer, policy(turns, malformed_at))
    fmt = build_format(config, tokenizer, SPECS)
    endpoint = ChatEndpoint(engine, fmt, tokenizer, BUDGET, rollout_sampling(config))

    async def main():
        await endpoint.start()
        try:
            client = AsyncOpenAI(base_url=endpoint.open_episode("e0", "g0"), api_key="none", max_retries=0)
            answer = await sdk_agent(client, results_of(turns), rewrite)
            await client.close()
            return answer, endpoint.close_episode("e0")
        finally:
            await endpoint.stop()

    answer, trajectory = asyncio.run(main())
    return answer, trajectory, engine


def steps_of(t):
    fields = (
        "prompt_ids",
        "response_ids",
        "segments",
        "log_probs",
        "segment_spans",
        "turns",
        "turn_ends",
        "tail_ids",
    )
    return [[getattr(step, name) for name in fields] for step in t.all_steps]


@pytest.fixture(scope="module")
def qwen3():
    return load("qwen3")


CASES = {
    # name: (config, turns, the malformed call's turn, steps the built-in loop takes)
    "parallel-calls": (CONFIG, THREE_TURNS, None, 1),
    "malformed-call": (CONFIG, MALFORMED, 0, 1),
    "qwen3-rewrites-history": (QWEN3, THREE_TURNS, None, 4),
}


@pytest.mark.filterwarnings("ignore:the chat template rewrites earlier turns")
@pytest.mark.parametrize("case", list(CASES))
def test_an_sdk_agent_making_the_built_in_loops_calls_yields_its_trajectory_id_for_id(tokenizer, qwen3, case):
    config, turns, malformed_at, steps = CASES[case]
    tok = qwen3 if config is QWEN3 else tokenizer
    expected, _ = built_in(tok, config, turns, malformed_at)
    answer, got, engine = through_endpoint(tok, config, turns, malformed_at)

    assert answer == "<answer> Paris </answer>" and got.answer == expected.answer == "Paris"
    assert expected.num_steps == steps
    assert steps_of(got) == steps_of(expected)
    assert [step.reason for step in got.all_steps] == [step.reason for step in expected.all_steps]
    assert (got.num_turns, got.tool_calls, got.tool_calls_invalid) == (
        expected.num_turns,
        expected.tool_calls,
        expected.tool_calls_invalid,
    )
    assert [(c.turn, c.name, c.arguments, c.status, c.message) for c in got.calls] == [
        (c.turn, c.name, c.arguments, c.status, c.message) for c in expected.calls
    ]
    assert_rollout_invariants([got], engine, tok)
    if malformed_at is not None:
        assert got.tool_calls_invalid == {"invalid_json": 1}


def test_an_sdk_agent_that_rewrites_its_history_trains_every_sampled_token_once_in_steps(tokenizer):
    answer, got, engine = through_endpoint(tokenizer, CONFIG, THREE_TURNS, rewrite=True)
    assert got.answer == "Paris"
    assert got.num_steps > 1 and {s.reason for s in got.steps[1:]} | {got.step_reason} == {
        "history_rewritten"
    }
    assert [turn for step in got.all_steps for turn in step.turns] == [0, 1, 2, 3]
    assert_rollout_invariants([got], engine, tokenizer)
    # each step's prompt is what the engine was asked to continue: the render of the agent's messages
    fmt = build_format(CONFIG, tokenizer, SPECS)
    first_prompts = [c.prompt_ids for c in engine.calls]
    assert all(step.prompt_ids in first_prompts for step in got.all_steps)
    assert got.all_steps[0].prompt_ids == fmt.render_conversation([{"role": "user", "content": QUESTION}])
