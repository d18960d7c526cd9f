"""The user instruction of a QA prompt, generated from the tools the policy is given.

The instruction asks for Search-R1's protocol: reason in ``<think>``, call tools, read their
results in ``<information>``, answer in ``<answer>``. What it says about the tools depends on
the tool-call format (``actor.rollout.tool_format``):

* ``tags``: one sentence per tool, in the order of ``actor.rollout.tools``, saying how to call
  it (``<tag> argument </tag>``). agentrl's ``SearchTool`` is introduced in Search-R1's own
  words, which the quickstart and the published results were trained on, so the default tool
  set (one ``SearchTool``) gives exactly the instruction they used; any other tool is
  introduced by its schema's description.
* ``hermes``: no call syntax, since the chat template shows the tools' schemas (``tools=``);
  the instruction only says that tools may be called.

Plain data in, text out: a :class:`ToolPrompt` per tool, made from a built tool by
:func:`tool_prompt` (duck-typed, so this package imports nothing of the rollout).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.tool_identity import FORMAT_TRAITS, TAGS, FormatTraits

__all__ = [
    "DEFAULT_TOOLS",
    "SEARCH_TOOL",
    "ToolPrompt",
    "instruction_template",
    "tool_prompt",
]

_OPENING = (
    "Answer the question below. Every time you receive new information, first reason about it "
    "inside <think> and </think>. "
)
_CLOSING = (
    "Once you need no further information, give the answer inside <answer> and </answer>, without "
    "detailed explanation. For example, <answer> Beijing </answer>. Question: {question}\n"
)
# Search-R1's sentence for its search engine, word for word as the quickstart was trained on it.
_SEARCH_R1 = (
    "If you find you are missing some knowledge, you can call a search engine by writing "
    "<{tag}> {argument} </{tag}>, and its top results will be returned between <information> and "
    "</information>. You may search as many times as you like. "
)
_GENERIC = (
    "The {tag} tool: {description} Call it by writing <{tag}> {argument} </{tag}>; its result will "
    "be returned between <information> and </information>. "
)
_GENERIC_REPEAT = "You may call each tool as many times as you like. "
_HERMES = (
    "If you find you are missing some knowledge, call the tools you are given, as many times as you like. "
)

SEARCH_TOOL = "agentrl.tools.retrieval.search.SearchTool"  # by its defining module: in Search-R1's words


@dataclass(frozen=True)
class ToolPrompt:
    """What the instruction says about one tool.

    ``tag``: what calls it (``<tag> … </tag>``); ``description``: its schema's description;
    ``argument``: the word written between the tags (a tag tool's one parameter);
    ``search_r1``: introduce it in Search-R1's sentence for its search engine.
    """

    tag: str
    description: str
    argument: str = "query"
    search_r1: bool = False

    def sentence(self) -> str:
        """This tool's part of the instruction; braces doubled, as the instruction is a format string."""
        template = _SEARCH_R1 if self.search_r1 else _GENERIC
        text = template.format(tag=self.tag, argument=self.argument, description=self.description.strip())
        return text.replace("{", "{{").replace("}", "}}")


# The default experiment's tools (one SearchTool), as ``tool_prompt`` reads them.
DEFAULT_TOOLS: tuple[ToolPrompt, ...] = (
    ToolPrompt(
        "search",
        "Search the passage index for a query and return the best-matching passages.",
        "query",
        search_r1=True,
    ),
)


def _is_search_tool(tool: Any) -> bool:
    return any(f"{c.__module__}.{c.__qualname__}" == SEARCH_TOOL for c in type(tool).__mro__)


def tool_prompt(tool: Any) -> ToolPrompt:
    """The :class:`ToolPrompt` of a built tool, read from its typed view (``as_typed(tool)``:
    ``tag``, ``spec.description``, ``argument``, ``raw``) or from a tag tool's own attributes."""
    raw = getattr(tool, "raw", tool)
    spec = getattr(tool, "spec", None)
    description = spec.description if spec is not None else getattr(tool, "description", "") or ""
    argument = getattr(tool, "argument", None) or "arguments"
    return ToolPrompt(tool.tag, description, argument, search_r1=_is_search_tool(raw))


def instruction_template(
    tools: Sequence[ToolPrompt] = DEFAULT_TOOLS, tool_format: FormatTraits | str = TAGS
) -> str:
    """The instruction for ``tools`` in ``tool_format`` (its traits, or ``actor.rollout.tool_format``):
    a format string with one field, ``{question}``. A format whose instruction lists the tools gets
    a sentence per tool; else the chat template shows their schemas and the instruction says so."""
    if isinstance(tool_format, str):
        if tool_format not in FORMAT_TRAITS:
            raise ValueError(f"tool_format must be one of {sorted(FORMAT_TRAITS)}, got {tool_format!r}")
        tool_format = FORMAT_TRAITS[tool_format]
    if not tool_format.instruction_lists_tools:
        middle = _HERMES if tools else ""
    else:
        middle = "".join(t.sentence() for t in tools)
        if any(not t.search_r1 for t in tools):
            middle += _GENERIC_REPEAT
    return _OPENING + middle + _CLOSING
