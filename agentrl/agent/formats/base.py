"""The tool-call format protocol: how one dialect reads a turn and writes the tokens that answer it.

A format is a parser plus a renderer. ``parse`` reads one sampled turn's text into the calls
it makes (several, in order), its answer, or why it is invalid; ``observation`` writes the
exact tokens the rollout appends after the turn (tool results, the next assistant header),
and ``prompt_ids`` the prompt's. Sampled tokens are never re-tokenized: a format only ever
tokenizes text it writes itself. A third dialect is one more class with these methods.

Malformed calls are values, not exceptions: a ``ParsedCall`` with an ``error`` (one of the
closed list ``MalformedReason``) and a ``detail`` the policy reads in its error message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from agentrl.agent.observations import Observation
from agentrl.tool_identity import FormatTraits
from agentrl.tools.spec import ToolSpec

# Why a call or a turn is malformed, counted by name (rollout/tool_calls/invalid/<reason>).
MalformedReason = Literal[
    "invalid_json",  # the call's body is not JSON
    "not_an_object",  # JSON, but not one object (a list, a string, a number)
    "missing_name",  # no "name", or a name that is not a string
    "unknown_tool",  # a name no registered tool has
    "bad_arguments",  # "arguments" is not an object
    "schema",  # arguments that fail the tool's JSON Schema (checked by the rollout)
    "truncated",  # cut by the token budget before the call (or the turn) closed
    "unclosed",  # an opened call the turn ended without closing (not the budget)
    "empty",  # an empty call or an empty answer
    "no_action",  # a turn with neither a call nor an answer
]
MALFORMED_REASONS: tuple[str, ...] = get_args(MalformedReason)


@dataclass(frozen=True)
class ParsedCall:
    """One tool call of a turn: a name and its arguments, or why it could not be read."""

    name: str | None
    arguments: dict[str, Any] | None
    error: MalformedReason | None = None  # None: well formed (the schema is checked later)
    detail: str = ""  # human text for the error tool message


@dataclass(frozen=True)
class TurnParse:
    """What one turn did: calls (in order), an answer, or neither (``invalid``)."""

    calls: tuple[ParsedCall, ...] = ()
    answer: str | None = None  # the body of <answer>…</answer> in a turn that calls nothing
    invalid: MalformedReason | None = None  # the turn neither answers nor calls (or is cut)
    detail: str = ""  # why it is invalid, for dumps and the viewer


@dataclass(frozen=True)
class ToolMessage:
    """One result the policy reads: the tool's name and the text it returned."""

    name: str
    content: str


class FormatError(ValueError):
    """A format cannot work with this tokenizer, template or config; names the key to change."""


class ToolCallFormat(Protocol):
    """A tool-call dialect (see the module docstring)."""

    name: str  # "tags" | "hermes": for configs and messages
    traits: FormatTraits  # what the format does: what code outside formats/ asks
    # the rollout renders the conversation before each turn (its template rewrites earlier turns);
    # such a format also has render_conversation(messages) and assistant_message(text, parse)
    renders_history: bool

    def prompt_ids(self, messages: list[dict[str, Any]], specs: list[ToolSpec]) -> list[int]:
        """Token ids of the conversation, ending where the assistant starts."""
        ...

    def turn_stops(self, final_turn: bool) -> tuple[str, ...]:
        """Stop strings that end a turn (besides the engine's eos)."""
        ...

    def parse(self, turn_text: str, finish_reason: str, final_turn: bool) -> TurnParse:
        """The calls, answer or invalidity of one turn's decoded text (never raises)."""
        ...

    def observation(
        self, results: list[ToolMessage], *, turn_closed: bool, final_turn: bool, max_obs_length: int
    ) -> Observation:
        """Exactly the tokens to append after the turn; contents cut to ``max_obs_length``, counted.

        ``turn_closed``: the sampled turn ended with the template's end-of-turn token;
        when it did not, the observation starts with it (a template token, masked).
        """
        ...

    def invalid_turn_message(self, parse: TurnParse) -> ToolMessage:
        """What the policy reads after a turn that neither called nor answered."""
        ...

    def call_error_message(self, call: ParsedCall) -> ToolMessage:
        """What the policy reads for a malformed call (or one whose arguments fail the schema)."""
        ...
