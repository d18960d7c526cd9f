"""The run's tool identity, one value: its tools' tags and names, and what their call format does.

The driver builds it once (``tools.check.check_tools``: every configured tool built, and the
traits of ``actor.rollout.tool_format``) and passes it whole: to the roles as
``RunContext.tools``, to the reward's format check, to validation and to the prompts'
instruction. Code outside ``agent/formats/`` asks the format's traits what to do
(``tools.format.calls_in_text``), never its name; the name is for configs and messages.
Standard library only: the reward rules, a leaf, read it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "FORMAT_TRAITS",
    "HERMES",
    "QWEN3_CODER",
    "SEARCH_ONLY",
    "TAGS",
    "FormatTraits",
    "ToolIdentity",
    "as_identity",
]


@dataclass(frozen=True)
class FormatTraits:
    """What a tool-call format does, as the parts outside ``agent/formats/`` need to know it."""

    name: str  # actor.rollout.tool_format: what a config says and a message shows
    # A call is read back from the response text (the reward's format check parses the tags);
    # else the rollout's own record of the calls is the only reader.
    calls_in_text: bool
    # Every prompt is the chat template's render of the conversation with the tools' schemas,
    # so a prompt must come with its messages.
    prompt_from_messages: bool
    # The instruction describes each tool in words; else the chat template shows their schemas.
    instruction_lists_tools: bool


TAGS = FormatTraits("tags", calls_in_text=True, prompt_from_messages=False, instruction_lists_tools=True)
HERMES = FormatTraits("hermes", calls_in_text=False, prompt_from_messages=True, instruction_lists_tools=False)
# Qwen3-Coder's XML calls do what hermes's JSON calls do: only the call syntax differs.
QWEN3_CODER = FormatTraits(
    "qwen3_coder", calls_in_text=False, prompt_from_messages=True, instruction_lists_tools=False
)
# By actor.rollout.tool_format (agentrl.config.schema.ToolFormat; a test keeps the two the same).
FORMAT_TRAITS: dict[str, FormatTraits] = {traits.name: traits for traits in (TAGS, HERMES, QWEN3_CODER)}


@dataclass(frozen=True)
class ToolIdentity:
    """The run's tools in config order (``tags[i]`` and ``names[i]`` are one tool's) and their format.

    ``tags`` are the grammar of the ``tags`` format; ``names`` key every per-tool count, as the
    rollout counts calls by name (a tag tool's name is its tag; a schema tool's tag may differ)."""

    tags: tuple[str, ...]
    names: tuple[str, ...]
    format: FormatTraits = TAGS

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", tuple(self.tags))
        object.__setattr__(self, "names", tuple(self.names))
        if len(self.names) != len(self.tags):
            raise ValueError(
                f"tool names {self.names} do not pair with tool tags {self.tags}: one name per tag, in order"
            )

    @classmethod
    def of_tags(cls, tags: Iterable[str], format: FormatTraits = TAGS) -> ToolIdentity:
        """Tag tools only, each named by its tag."""
        tags = tuple(tags)
        return cls(tags, tags, format)


SEARCH_ONLY = ToolIdentity.of_tags(("search",))  # the default experiment's tools: one SearchTool in tags


def as_identity(tools: ToolIdentity | Iterable[str]) -> ToolIdentity:
    """``tools`` as a tool identity: itself, or tag tools of these tags in the ``tags`` format (the
    tags alone, as the reward's functions took them before the identity existed)."""
    if isinstance(tools, ToolIdentity):
        return tools
    if isinstance(tools, str):
        raise TypeError(f"tools must be a ToolIdentity or a sequence of tags, got the string {tools!r}")
    return ToolIdentity.of_tags(tools)
