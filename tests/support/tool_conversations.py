"""A tool conversation played through a format the way the rollout plays it, for token-level tests.

``play`` builds a trajectory's ids as the rollout does: the prompt's ids, then for every turn
the ids a policy sampled (tokenized here only to stand in for a policy) and the format's
observation ids for that turn's results. ``whole_conversation`` is the same conversation as
chat messages, for ``apply_chat_template`` to render in one piece.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentrl.agent.formats import ToolMessage
from agentrl.tools.spec import ToolSpec

SEARCH = ToolSpec(
    "search",
    "Search the knowledge base.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
CALCULATOR = ToolSpec(
    "calculator",
    "Evaluate an arithmetic expression.",
    {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
)
SPECS = [SEARCH, CALCULATOR]


def call_block(name: str, arguments: dict[str, Any]) -> str:
    """One call as a Hermes-style template renders it (and a policy writes it)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


@dataclass
class Turn:
    """One assistant turn: its text, its calls, and the results the tools give back."""

    content: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    results: list[str] = field(default_factory=list)

    def text(self, eot: str, header_has: str = "") -> str:
        """What the policy samples: the content (less what the header already holds), the calls, eot."""
        blocks = [call_block(n, a) for n, a in self.calls]
        body = self.content + ("\n" if self.content and blocks else "") + "\n".join(blocks)
        assert body.startswith(header_has), "the header's text must open the turn"
        return body[len(header_has) :] + eot


def play(
    fmt: Any,
    tokenizer: Any,
    question: str,
    turns: list[Turn],
    *,
    header_has: str = "",
    max_obs_length: int = 4096,
) -> tuple[list[int], list[list[int]]]:
    """The trajectory's ids and, per turn with results, its observation ids."""
    ids = fmt.prompt_ids([{"role": "user", "content": question}], SPECS)
    observations = []
    for turn in turns:
        ids += tokenizer.encode(turn.text(fmt.end_of_turn, header_has), add_special_tokens=False)
        if turn.results:
            names = [name for name, _ in turn.calls]
            messages = [ToolMessage(n, r) for n, r in zip(names, turn.results, strict=True)]
            obs = fmt.observation(messages, turn_closed=True, final_turn=False, max_obs_length=max_obs_length)
            assert obs.tokens_cut == 0
            observations.append(obs.ids)
            ids += obs.ids
    return ids, observations


def whole_conversation(question: str, turns: list[Turn]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for turn in turns:
        message: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": n, "arguments": a}} for n, a in turn.calls
            ]
        messages.append(message)
        messages += [
            {"role": "tool", "name": n, "content": r}
            for (n, _), r in zip(turn.calls, turn.results, strict=False)
        ]
    return messages


def rendered_up_to_last_turn(tokenizer: Any, messages: list[dict[str, Any]], eot: str, **kwargs: Any) -> str:
    """The template's render of the whole conversation, up to the last turn's end-of-turn token."""
    text = tokenizer.apply_chat_template(
        messages, tools=[s.to_openai() for s in SPECS], tokenize=False, **kwargs
    )
    return text[: text.rindex(eot) + len(eot)]


def assert_plays_as_rendered(
    fmt: Any,
    tokenizer: Any,
    question: str,
    turns: list[Turn],
    *,
    header_has: str = "",
    eot: str = "<|im_end|>",
    **render: Any,
) -> list[list[int]]:
    """Token-exactness: ``turns`` played through ``fmt`` (``play``) decode to the template's render
    of the whole conversation up to the last turn's ``eot`` (``rendered_up_to_last_turn`` with
    ``render``: ``chat_template``, ``enable_thinking``); returns the observation ids per turn."""
    ids, observations = play(fmt, tokenizer, question, turns, header_has=header_has)
    expected = rendered_up_to_last_turn(tokenizer, whole_conversation(question, turns), eot, **render)
    assert tokenizer.decode(ids, skip_special_tokens=False) == expected
    return observations


# A trajectory that makes 1, then 2, then 3 calls and then answers.
THREE_TURNS = [
    Turn("I should search.", [("search", {"query": "capital of France"})], ["Doc 1: Paris is the capital."]),
    Turn(
        "",
        [("search", {"query": "Eiffel Tower height"}), ("calculator", {"expression": "330 * 2"})],
        ["Doc 1: The tower is 330 m tall.", "660"],
    ),
    Turn(
        "Three more.",
        [
            ("search", {"query": "Seine"}),
            ("search", {"query": "Louvre"}),
            ("calculator", {"expression": "1 + 2"}),
        ],
        ["Doc 1: The Seine flows through Paris.", "Doc 1: The Louvre is a museum.", "3"],
    ),
    Turn("<answer> Paris </answer>"),
]
