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

from dataclasses import dataclass
from typing import Any

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

__all__ = ["CALCULATOR_TOOL", "SEARCH_TOOL", "TAGS", "Dialect", "dialect_of"]

SEARCH_TOOL = "agentrl.tools.retrieval.SearchTool"
CALCULATOR_TOOL = "agentrl.tools.calculator.CalculatorTool"
SEARCH = ("search", "query")  # (name, argument) of each tool as a hermes call names them
CALCULATE = ("calculate", "expression")


@dataclass(frozen=True)
class Dialect:
    """A tool-call format and the tools the quickstart's policy is given (see the module docstring)."""

    name: str  # "tags" | "hermes"
    calculator: bool = False
    parallel_searches: bool = True  # hermes: an arithmetic oracle's two searches in one turn

    @property
    def tool_call_tokens(self) -> bool:
        """Whether the tiny tokenizer needs the hermes tags as single tokens."""
        return self.name == "hermes"

    def tools(self, url: str) -> str:
        """``actor.rollout.tools`` as an override value: search at ``url`` (top-1), then the calculator."""
        search = "{class_path: " + SEARCH_TOOL + ", options: {url: '" + url + "', topk: 1}}"
        calculator = ", {class_path: " + CALCULATOR_TOOL + ", options: {}}" if self.calculator else ""
        return f"[{search}{calculator}]"

    def rollout_overrides(self, url: str) -> dict[str, Any]:
        """The PPO config's rollout keys this dialect sets (its tools; in hermes, the format and template)."""
        overrides: dict[str, Any] = {"actor.rollout.tools": self.tools(url)}
        if self.name == "hermes":
            overrides |= {"actor.rollout.tool_format": "hermes", "actor.rollout.chat_template": "hermes"}
        return overrides

    @property
    def instruction(self) -> str:
        """The user message's template (``{question}``): the default one in tags, hermes' own else."""
        if self.name == "tags":
            return INSTRUCTION_TEMPLATE
        tools = [DEFAULT_TOOLS[0]] + ([ToolPrompt(CALCULATE[0], "", CALCULATE[1])] if self.calculator else [])
        return instruction_template(tools, "hermes")

    def oracle(self, question: Question, end_of_turn: str) -> list[Turn]:
        """The question's ideal solution as scripted turns (``end_of_turn`` ends each hermes turn)."""
        if self.name == "tags":
            return oracle_trajectory(question)
        return hermes_oracle_trajectory(
            question,
            search=SEARCH,
            calculate=CALCULATE,
            end_of_turn=end_of_turn,
            parallel_searches=self.parallel_searches,
        )

    def guess(self, question: Question, guess: str, end_of_turn: str) -> list[Turn]:
        """A shortcut that answers ``guess`` at once, without a tool call."""
        if self.name == "tags":
            return guess_trajectory(question, guess, searches=0)
        return hermes_guess_trajectory(question, guess, end_of_turn=end_of_turn)

    def tokenizer_texts(self, world: World) -> list[str]:
        """What the BPE learns merges from: passages, the training split's prompts as the policy
        sees them (in hermes, rendered by the template with the tools' schemas) and oracle turns."""
        texts = [p["contents"] for p in world.passages]
        render = _hermes_renderer(self) if self.name == "hermes" else None
        for q in world.train_questions:
            prompt = make_prompt(q.question, self.instruction)
            texts.append(prompt if render is None else render(prompt))
            texts += [t.text for t in self.oracle(q, "")]
        return texts


TAGS = Dialect("tags")


def dialect_of(tool_format: str, calculator: bool, parallel_searches: bool = True) -> Dialect:
    """The dialect a profile names; the calculator only in hermes (the tags oracle never calls it)."""
    if tool_format not in ("tags", "hermes"):
        raise ValueError(
            f"a quickstart profile's tool_format must be 'tags' or 'hermes', got {tool_format!r}"
        )
    if calculator and tool_format != "hermes":
        raise ValueError("a quickstart profile's calculator needs tool_format: hermes")
    return Dialect(tool_format, calculator, parallel_searches)


def _hermes_renderer(dialect: Dialect) -> Any:
    """user text → the whole prompt as the Hermes-style template renders it with the tools' schemas.

    Rendering needs a tokenizer object only to run the template, so a throwaway one is used:
    the text does not depend on its vocabulary."""
    from agentrl.agent.formats import HERMES_TEMPLATE
    from agentrl.agent.formats.templates import ChatRenderer
    from agentrl.models.tiny import train_tokenizer
    from agentrl.tools import as_typed
    from agentrl.tools.calculator import CalculatorTool
    from agentrl.tools.retrieval.search import SearchTool

    tools = [SearchTool(topk=1)] + ([CalculatorTool()] if dialect.calculator else [])
    schemas = [as_typed(t).spec.to_openai() for t in tools]
    chat = ChatRenderer(train_tokenizer(["agentrl"], 300), HERMES_TEMPLATE)

    def render(user: str) -> str:
        return chat.render([{"role": "user", "content": user}], tools=schemas, add_generation_prompt=True)

    return render
