"""The format check of one response in the run's tool-call format: well formed or not, calls per tool.

The run's tool-call format (``actor.rollout.tool_format``, part of the tool identity the driver
builds once and passes to the reward role as ``RunContext.tools``) decides what is read, by what
the format does (``tools.format.calls_in_text``), never by its name:

* ``tags`` (Search-R1's, whose calls are in the text): the response text under the tag grammar
  (``tags.parse_response``):
  well formed when it is ``think (CALL information think)* answer``; a tool's calls are its
  complete ``<tag>`` blocks; what the tools returned is the ``<information>`` blocks.
* ``hermes`` (and any other format: the rule does not depend on the dialect): the rollout's
  own record of the response (:class:`RolloutCalls`, the batch's ``tool_calls``,
  ``tool_calls_invalid`` and ``tool_outputs``), never the text again: the rollout's parser
  already read every turn, and where a tool call or a tool message sits in the text depends
  on the chat template. Well formed when the rollout accepted an answer and
  no call was malformed and no turn went without a call or an answer
  (``tool_calls_invalid`` is empty); a tool's calls are the calls the rollout sent it; what
  the tools returned is their outputs.

The answer is the same in both: the one the rollout accepted (``ScoreInput.answer``).

Calls are counted per tool by the tool's *name*, in both formats, as the rollout counts them
(``Trajectory.tool_calls``): the grammar of ``tags`` knows the tools by their tags, so its
per-tag counts are given the name of the tool each tag calls (``tools.names``; a schema tool's
tag may differ from its name, a tag tool's name is its tag).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentrl.rewards.tags import parse_response
from agentrl.tool_identity import SEARCH_ONLY, ToolIdentity, as_identity

__all__ = ["FormatCheck", "RolloutCalls", "check_format"]


@dataclass(frozen=True)
class RolloutCalls:
    """The rollout's record of one response's tool calls (``Trajectory`` fields, batch fields of
    the same names): what the ``hermes`` format check reads."""

    calls: Mapping[str, int] = field(default_factory=dict)  # calls sent to each tool, by name
    invalid: Mapping[str, int] = field(default_factory=dict)  # malformed calls, invalid turns, by reason
    outputs: tuple[str, ...] = ()  # what the tools returned, in order


@dataclass(frozen=True)
class FormatCheck:
    """What the format check read: well formed or not, calls per tool, the tools' results."""

    well_formed: bool
    calls: Mapping[str, int]  # per tool of the run, by name (0 when unused)
    information: tuple[str, ...]  # what the tools returned (where retrieval_hit looks)


def check_format(
    response_text: str,
    answer: str | None,
    tools: ToolIdentity | Sequence[str] = SEARCH_ONLY,
    rollout_calls: RolloutCalls | None = None,
) -> FormatCheck:
    """The format check of one response in the run's tool-call format (module docstring): the text
    under the grammar of ``tools.tags`` when the format's calls are in the text, else
    ``rollout_calls``; ``calls`` counts every tool of ``tools`` by name (tags alone: tag tools)."""
    tools = as_identity(tools)
    if tools.format.calls_in_text:
        structure = parse_response(response_text, tools.tags)
        information = tuple(b.content for b in structure.blocks if b.tag == "information")
        calls = {name: structure.count(tag) for tag, name in zip(tools.tags, tools.names, strict=True)}
        return FormatCheck(structure.well_formed, calls, information)
    if rollout_calls is None:
        raise ValueError(
            f"the {tools.format.name} format check reads the rollout's record of the calls (rollout_calls: "
            "the batch's tool_calls, tool_calls_invalid and tool_outputs), and none was given"
        )
    well_formed = answer is not None and sum(rollout_calls.invalid.values()) == 0
    calls = {name: int(rollout_calls.calls.get(name, 0)) for name in tools.names}
    return FormatCheck(well_formed, calls, tuple(rollout_calls.outputs))
