"""The endpoint's HTTP surface: inference outside an episode, the API's fields, and its refusals.

Plain HTTP requests (``aiohttp``'s client, raw JSON) against ``ChatEndpoint`` on loopback, with
the scripted engine behind it.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from support.dialects import Dialect
from support.scripted_engine import ScriptedEngine
from support.tool_conversations import SPECS, call_block

from agentrl.agent.formats import build_format
from agentrl.agent.sampling import rollout_sampling
from agentrl.config.schema import RolloutConfig
from agentrl.endpoint.episode import Budget
from agentrl.endpoint.server import EPISODE_HEADER, ChatEndpoint

CONFIG = RolloutConfig(
    tool_format="hermes", chat_template="hermes", max_tokens_per_turn=128, max_obs_length=256
)
QUESTION = [{"role": "user", "content": "How tall is the Eiffel Tower?"}]
TOOLS = [s.to_openai() for s in SPECS]


def serve(tokenizer, budget: Budget | None = None, text: str | None = None):
    """An endpoint whose policy searches once, then answers."""

    def policy(context: str) -> str:
        if text is not None:
            return text
        if Dialect("hermes").results_seen(context):
            return "<answer> 330 m </answer>"
        return "Searching.\n" + call_block("search", {"query": "Eiffel Tower height"})

    engine = ScriptedEngine(tokenizer, policy)
    fmt = build_format(CONFIG, tokenizer, SPECS)
    budget = budget or Budget(max_prompt_length=1024, max_response_length=512, max_obs_length=256)
    return ChatEndpoint(engine, fmt, tokenizer, budget, rollout_sampling(CONFIG)), engine


def requests(endpoint: ChatEndpoint, bodies: list[tuple[str, dict, dict]]) -> list[tuple[int, dict]]:
    """POST each (path, JSON body, headers) in turn; each reply's status and JSON."""

    async def main():
        url = await endpoint.start()
        replies = []
        try:
            async with aiohttp.ClientSession() as session:
                for path, body, headers in bodies:
                    async with session.post(url + path, json=body, headers=headers) as reply:
                        replies.append((reply.status, await reply.json()))
        finally:
            await endpoint.stop()
        return replies

    return asyncio.run(main())


def test_a_plain_http_request_outside_an_episode_gets_the_calls_as_the_api_writes_them(tokenizer):
    endpoint, engine = serve(tokenizer)
    body = {
        "model": "agentrl",
        "messages": QUESTION,
        "tools": TOOLS,
        "n": 2,
        "logprobs": True,
        "temperature": 0.5,
    }
    ((status, reply),) = requests(endpoint, [("/v1/chat/completions", body, {})])
    assert status == 200 and reply["object"] == "chat.completion"
    assert len(reply["choices"]) == 2
    for choice in reply["choices"]:
        message = choice["message"]
        assert choice["finish_reason"] == "tool_calls"
        assert message["content"] == "Searching."
        (call,) = message["tool_calls"]
        assert call["type"] == "function" and call["function"]["name"] == "search"
        assert json.loads(call["function"]["arguments"]) == {"query": "Eiffel Tower height"}  # a JSON string
        assert len(choice["logprobs"]["content"]) == len(engine.calls[0].result.token_ids)
    usage = reply["usage"]
    assert usage["prompt_tokens"] == len(engine.calls[0].prompt_ids)
    assert usage["completion_tokens"] == 2 * len(engine.calls[0].result.token_ids)
    assert engine.calls[0].params.temperature == 0.5  # inference honours the request's sampling
    assert endpoint.episodes == {}  # nothing recorded


def test_an_episode_samples_at_the_runs_temperature_and_counts_a_request_for_another(tokenizer):
    endpoint, engine = serve(tokenizer)
    endpoint.url = "http://unused"  # open_episode only formats the URL
    endpoint.open_episode("e1", "g1", task={"data_source": "nq", "ground_truth": {"target": ["330 m"]}})
    body = {"messages": QUESTION, "temperature": 0.2}
    ((status, reply),) = requests(endpoint, [("/v1/chat/completions", body, {EPISODE_HEADER: "e1"})])
    assert status == 200 and reply["choices"][0]["message"]["tool_calls"][0]["id"] == "call_0_0"
    assert engine.calls[0].params.temperature == CONFIG.temperature
    assert endpoint.metrics["endpoint/sampling_overridden"] == 1.0
    trajectory = endpoint.close_episode("e1")
    assert trajectory.prompt.data_source == "nq" and trajectory.num_turns == 1


BAD = {
    "messages": ({"messages": "hello"}, "'messages' must be a non-empty list"),
    "role": ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role must be one of"),
    "tool_choice": ({"messages": QUESTION, "tool_choice": "required"}, "'tool_choice' must be one of"),
    "tool_choice_none": ({"messages": QUESTION, "tool_choice": "none"}, "'tool_choice' must be one of"),
    "stop": ({"messages": QUESTION, "stop": ""}, "'stop' must be a string or a list of non-empty strings"),
    "tool_calls": (
        {"messages": [*QUESTION, {"role": "assistant", "tool_calls": 5}]},
        "messages[1].tool_calls must be a list of calls",
    ),
    "tools": ({"messages": QUESTION, "tools": TOOLS[:1]}, "'tools' must name the run's tools"),
    "temperature": ({"messages": QUESTION, "temperature": 5}, "'temperature' must be a number in [0.0, 2.0]"),
    "stream": ({"messages": QUESTION, "stream": True}, "'stream' is not supported"),
    "top_logprobs": ({"messages": QUESTION, "top_logprobs": 3}, "'top_logprobs' must be 0 or absent"),
    "arguments": (
        {
            "messages": [
                *QUESTION,
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "function": {"name": "search", "arguments": "{"}}],
                },
            ]
        },
        "messages[1].tool_calls[0].function.arguments is not valid JSON",
    ),
}


@pytest.mark.parametrize("field", list(BAD))
def test_a_request_the_endpoint_cannot_take_is_an_api_error_naming_the_field_and_the_next_one_is_served(
    tokenizer, field
):
    endpoint, _ = serve(tokenizer)
    body, says = BAD[field]
    (status, error), (ok, _) = requests(
        endpoint, [("/v1/chat/completions", body, {}), ("/v1/chat/completions", {"messages": QUESTION}, {})]
    )
    assert status == 400 and says in error["error"]["message"], error
    assert error["error"]["type"] == "invalid_request_error"
    assert ok == 200
    assert endpoint.metrics["endpoint/errors/invalid_request"] == 1.0


def test_an_episode_refuses_n_above_one_and_an_unknown_episode_is_not_found(tokenizer):
    endpoint, _ = serve(tokenizer)
    endpoint.url = "http://unused"
    endpoint.open_episode("e1", "g1")
    (many, error), (missing, gone) = requests(
        endpoint,
        [
            ("/episodes/e1/v1/chat/completions", {"messages": QUESTION, "n": 2}, {}),
            ("/episodes/nope/v1/chat/completions", {"messages": QUESTION}, {}),
        ],
    )
    assert many == 400 and "'n' must be 1 in an episode" in error["error"]["message"]
    assert missing == 404 and gone["error"]["code"] == "episode_not_found"


def test_a_turn_with_no_room_left_is_refused_as_context_length_exceeded_and_marks_the_trajectory(tokenizer):
    endpoint, engine = serve(tokenizer, text="word " * 10)  # neither calls nor answers
    endpoint.url = "http://unused"
    prompt_tokens = len(build_format(CONFIG, tokenizer, SPECS).render_conversation(QUESTION))
    endpoint.budget = Budget(max_prompt_length=prompt_tokens, max_response_length=48, max_obs_length=256)
    endpoint.open_episode("e1", "g1")
    first_reply = requests(endpoint, [("/episodes/e1/v1/chat/completions", {"messages": QUESTION}, {})])
    ((status, reply),) = first_reply
    assert status == 200 and reply["choices"][0]["message"]["invalid_turn"]["reason"] == "no_action"
    message = reply["choices"][0]["message"]
    hint = {"role": "tool", "content": message["invalid_turn"]["message"]}
    ((status, error),) = requests(
        endpoint, [("/episodes/e1/v1/chat/completions", {"messages": [*QUESTION, message, hint]}, {})]
    )
    assert status == 400 and error["error"]["code"] == "context_length_exceeded"
    trajectory = endpoint.close_episode("e1")
    assert trajectory.truncation.response_budget or trajectory.truncation.context
    assert len(trajectory.response_ids) == len(engine.calls[0].result.token_ids)  # the hint was not appended


def test_with_the_tools_run_on_the_server_one_request_returns_the_answer_and_every_call_made(tokenizer):
    from agentrl.agent import LLMGenerationManager
    from agentrl.serve.tool_loop import ToolLoop
    from agentrl.tools.base import ToolResult

    class Lookup:
        timeout_s = 5.0

        def __init__(self, spec) -> None:
            self.spec = spec

        async def call(self, arguments: list[dict]) -> list[ToolResult]:
            return [ToolResult("Doc: the tower is 330 m tall.") for _ in arguments]

    endpoint, engine = serve(tokenizer)
    lengths = {"max_prompt_length": 1024, "max_response_length": 512}
    manager = LLMGenerationManager(engine, tokenizer, CONFIG, tools=[Lookup(s) for s in SPECS], **lengths)
    endpoint.custom_infer = ToolLoop(manager).reply
    ((status, reply),) = requests(endpoint, [("/v1/chat/completions", {"messages": QUESTION, "n": 2}, {})])
    assert status == 200 and len(reply["choices"]) == 2
    for choice in reply["choices"]:
        message = choice["message"]
        assert message["content"] == "<answer> 330 m </answer>" and message["answer"] == "330 m"
        (call,) = message["tool_calls_made"]
        assert call == {
            "turn": 0,
            "name": "search",
            "arguments": {"query": "Eiffel Tower height"},
            "status": "ok",
            "result": "Doc: the tower is 330 m tall.",
        }
    assert reply["usage"]["completion_tokens"] == sum(len(c.result.token_ids) for c in engine.calls)


def test_an_engine_failure_is_a_server_error_object_counted_and_the_next_request_is_served(tokenizer):
    endpoint, engine = serve(tokenizer)
    real = engine.generate
    calls = []

    async def fails_first(prompt_ids, params):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the engine lost it")
        return await real(prompt_ids, params)

    engine.generate = fails_first
    (status, error), (ok, _) = requests(endpoint, [("/v1/chat/completions", {"messages": QUESTION}, {})] * 2)
    assert status == 500 and error["error"]["type"] == "server_error"
    assert "RuntimeError: the engine lost it" in error["error"]["message"]
    assert ok == 200 and endpoint.metrics["endpoint/errors/server_error"] == 1.0
