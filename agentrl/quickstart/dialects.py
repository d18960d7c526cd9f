"""How the quickstart's policy calls its tools: today's Search-R1 tags with search, or hermes with two tools.

A profile's ``tool_format`` and ``calculator`` choose a :class:`Dialect` once
(:func:`dialect_of`); every phase that depends on it asks the dialect: the rollout's tool
overrides, the prompt's instruction, the scripted demonstrations, the tokenizer's texts.

* ``tags`` (``make quickstart``): one ``SearchTool``, ``<search> … </search>`` calls, the
  default instruction: everything exactly as it was before dialects existed.
* ``hermes`` (the two-tool profile): the policy calls ``search`` and, with ``calculator``,
  ``calculate`` as JSON inside ``<tool_call>``, the tools' schemas reach the prompt through the
  project's Hermes-style chat template (``chat_template=hermes``), and each turn ends at the
  tokenizer's eos; the tiny tokenizer gets the hermes tags as single tokens.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from agentrl.data.instruction import DEFAULT_TOOLS, ToolPrompt, instruction_template
from agentrl.data.qa import INSTRUCTION_TEMPLATE, make_prompt
from agentrl.data.world import (
    Question,
    Turn,
    World,
    guess_trajectory,
    hermes_guess_trajectory,
    hermes_oracle_trajectory,
    oracle_trajectory,
)
from agentrl.data.world.numbers import age_statement
from agentrl.tool_identity import HERMES as HERMES_FORMAT
from agentrl.tool_identity import TAGS as TAGS_FORMAT
from agentrl.tool_identity import FormatTraits

__all__ = [
    "CALCULATOR_TOOL",
    "DIALECTS",
    "SEARCH_TOOL",
    "TAGS",
    "Dialect",
    "HermesDialect",
    "TagsDialect",
    "dialect_of",
]

SEARCH_TOOL = "agentrl.tools.retrieval.SearchTool"
CALCULATOR_TOOL = "agentrl.tools.calculator.CalculatorTool"
SEARCH = ("search", "query")  # (name, argument) of each tool as a hermes call names them
CALCULATE = ("calculate", "expression")


@dataclass(frozen=True)
class Dialect:
    """A tool-call format and the tools the quickstart's policy is given (see the module docstring);
    one subclass per format, chosen once by :func:`dialect_of`."""

    format: ClassVar[FormatTraits]
    calculator: bool = False
    parallel_searches: bool = True  # hermes: an arithmetic oracle's two searches in one turn
    restate_ages: bool = False  # hermes: an age is restated as its passage's sentence (numbers.age_statement)

    @property
    def tool_call_tokens(self) -> bool:
        """Whether the tiny tokenizer needs the format's call tags as single tokens."""
        return False

    def tools(self, url: str) -> str:
        """``actor.rollout.tools`` as an override value: search at ``url`` (top-1), then the calculator."""
        search = "{class_path: " + SEARCH_TOOL + ", options: {url: '" + url + "', topk: 1}}"
        calculator = ", {class_path: " + CALCULATOR_TOOL + ", options: {}}" if self.calculator else ""
        return f"[{search}{calculator}]"

    def rollout_overrides(self, url: str) -> dict[str, Any]:
        """The PPO config's rollout keys this dialect sets: its tools (and, off the default, its format)."""
        return {"actor.rollout.tools": self.tools(url)}

    @property
    def instruction(self) -> str:
        """The user message's template (``{question}``)."""
        raise NotImplementedError

    def oracle(self, question: Question, end_of_turn: str) -> list[Turn]:
        """The question's ideal solution as scripted turns (``end_of_turn`` ends each hermes turn)."""
        raise NotImplementedError

    def guess(self, question: Question, guess: str, end_of_turn: str) -> list[Turn]:
        """A shortcut that answers ``guess`` at once, without a tool call."""
        raise NotImplementedError

    def render_prompt(self, user: str) -> str:
        """A user message's text as the policy sees it before its first turn."""
        return user

    def tokenizer_texts(self, world: World) -> list[str]:
        """What the BPE learns merges from: passages, the training split's prompts as the policy
        sees them (in hermes, rendered by the template with the tools' schemas) and oracle turns."""
        texts = [p["contents"] for p in world.passages]
        for q in world.train_questions:
            texts.append(self.render_prompt(make_prompt(q.question, self.instruction)))
            texts += [t.text for t in self.oracle(q, "")]
        return texts


@dataclass(frozen=True)
class TagsDialect(Dialect):
    """Search-R1's tags with one search tool: the default experiment, as it was before dialects."""

    format: ClassVar[FormatTraits] = TAGS_FORMAT

    @property
    def instruction(self) -> str:
        return INSTRUCTION_TEMPLATE

    def oracle(self, question: Question, end_of_turn: str) -> list[Turn]:
        return oracle_trajectory(question)

    def guess(self, question: Question, guess: str, end_of_turn: str) -> list[Turn]:
        return guess_trajectory(question, guess, searches=0)


@dataclass(frozen=True)
class HermesDialect(Dialect):
    """JSON calls in ``<tool_call>`` through the project's Hermes-style chat template."""

    format: ClassVar[FormatTraits] = HERMES_FORMAT

    @property
    def tool_call_tokens(self) -> bool:
        return True

    def rollout_overrides(self, url: str) -> dict[str, Any]:
        format_keys = {"actor.rollout.tool_format": self.format.name, "actor.rollout.chat_template": "hermes"}
        return super().rollout_overrides(url) | format_keys

    @property
    def instruction(self) -> str:
        tools = [DEFAULT_TOOLS[0]] + ([ToolPrompt(CALCULATE[0], "", CALCULATE[1])] if self.calculator else [])
        return instruction_template(tools, self.format)

    def oracle(self, question: Question, end_of_turn: str) -> list[Turn]:
        return hermes_oracle_trajectory(
            question,
            search=SEARCH,
            calculate=CALCULATE,
            end_of_turn=end_of_turn,
            parallel_searches=self.parallel_searches,
            restate=age_statement if self.restate_ages else None,
        )

    def guess(self, question: Question, guess: str, end_of_turn: str) -> list[Turn]:
        return hermes_guess_trajectory(question, guess, end_of_turn=end_of_turn)

    def render_prompt(self, user: str) -> str:
        return _hermes_renderer(self.calculator)(user)


TAGS = TagsDialect()
DIALECTS: dict[str, type[Dialect]] = {cls.format.name: cls for cls in (TagsDialect, HermesDialect)}


def dialect_of(
    tool_format: str, calculator: bool, parallel_searches: bool = True, restate_ages: bool = False
) -> Dialect:
    """The dialect a profile names; the calculator only in hermes (the tags oracle never calls it)."""
    if tool_format not in DIALECTS:
        raise ValueError(
            f"a quickstart profile's tool_format must be one of {sorted(DIALECTS)}, got {tool_format!r}"
        )
    if calculator and DIALECTS[tool_format] is TagsDialect:
        raise ValueError("a quickstart profile's calculator needs tool_format: hermes")
    return DIALECTS[tool_format](calculator, parallel_searches, restate_ages)


@functools.lru_cache(maxsize=2)  # one per tool set: building it trains a throwaway tokenizer
def _hermes_renderer(calculator: bool) -> Any:
    """user text → the whole prompt as the Hermes-style template renders it with the tools' schemas.

    Rendering needs a tokenizer object only to run the template, so a throwaway one is used:
    the text does not depend on its vocabulary."""
    from agentrl.agent.formats import HERMES_TEMPLATE
    from agentrl.agent.formats.templates import ChatRenderer
    from agentrl.models.tiny import train_tokenizer
    from agentrl.tools import as_typed
    from agentrl.tools.calculator import CalculatorTool
    from agentrl.tools.retrieval.search import SearchTool

    tools = [SearchTool(topk=1)] + ([CalculatorTool()] if calculator else [])
    schemas = [as_typed(t).spec.to_openai() for t in tools]
    chat = ChatRenderer(train_tokenizer(["agentrl"], 300), HERMES_TEMPLATE)

    def render(user: str) -> str:
        return chat.render([{"role": "user", "content": user}], tools=schemas, add_generation_prompt=True)

    return render
