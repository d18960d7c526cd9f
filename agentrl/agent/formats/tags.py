"""The ``tags`` format: Search-R1's tag dialect, exactly as the rollout has always spoken it.

The policy calls a tool with ``<search> query </search>`` (one call per turn, the turn
stopped at the closing tag), answers with ``<answer> … </answer>`` and reads results as
``<information>…</information>``. This class only wraps what already exists, so the
default path is unchanged to the token: ``actions.parse_action`` reads the turn,
``observations.ObservationEncoder`` writes results, the invalid-action hint and the
final-turn note, and ``prompts.encode_messages`` the prompt (tools reach it through the
instruction text, not the template).

A tag tool has one string parameter, so the text between its tags is that argument; a tool
whose schema has several parameters takes a JSON object between its tags instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentrl.agent.actions import ANSWER_TAG, Action, parse_action, stop_strings
from agentrl.agent.formats.base import FormatError, ParsedCall, ToolMessage, TurnParse
from agentrl.agent.formats.templates import ChatRenderer
from agentrl.agent.observations import INVALID_ACTION_HINT, Observation, ObservationEncoder, encode_text
from agentrl.agent.prompts import encode_messages
from agentrl.tool_identity import TAGS
from agentrl.tools.spec import ToolSpec


def single_argument(spec: ToolSpec) -> str | None:
    """The one parameter a tag's text fills, or None when the schema has several (JSON between tags)."""
    properties = spec.parameters.get("properties") or {}
    return next(iter(properties)) if len(properties) == 1 else None


class TagsFormat:
    """Today's tag dialect behind the format protocol (see the module docstring)."""

    traits = TAGS  # what the format does, as the code outside formats/ asks it
    name = traits.name
    renders_history = False  # its turns are only ever appended (agent/history.py)

    def __init__(
        self,
        tokenizer: Any,
        specs: list[ToolSpec],
        *,
        tags: Mapping[str, str] | None = None,
        enable_thinking: bool | None = None,
        max_obs_length: int | None = None,
    ) -> None:
        """``tags``: each tool name's tag (default: its name), e.g. ``{"calculator": "calculate"}``."""
        self.tokenizer = tokenizer
        self.specs = {s.name: s for s in specs}
        tags = dict(tags or {})
        self.tags = tuple(tags.get(s.name, s.name) for s in specs)  # in tool order: the stop order
        self.name_of_tag = dict(zip(self.tags, (s.name for s in specs), strict=True))
        self._chat: ChatRenderer | None = None
        if enable_thinking is not None:
            if not getattr(tokenizer, "chat_template", None):
                raise FormatError(
                    "actor.rollout.enable_thinking is set but the tokenizer has no chat template"
                )
            self._chat = ChatRenderer(tokenizer, None, enable_thinking)
        self._encoders: dict[int, ObservationEncoder] = {}
        if max_obs_length is not None:
            self._encoder(max_obs_length)  # refuses a budget the wrapper does not fit in, now

    def _encoder(self, max_obs_length: int) -> ObservationEncoder:
        if max_obs_length not in self._encoders:
            self._encoders[max_obs_length] = ObservationEncoder(self.tokenizer, max_obs_length)
        return self._encoders[max_obs_length]

    def prompt_ids(self, messages: list[dict[str, Any]], specs: list[ToolSpec]) -> list[int]:
        """``encode_messages`` as always (tools are described by the instruction, not ``specs``)."""
        if self._chat is None:
            return encode_messages(self.tokenizer, messages)
        return encode_text(self.tokenizer, self._chat.render(list(messages), add_generation_prompt=True))

    def turn_stops(self, final_turn: bool) -> tuple[str, ...]:
        return stop_strings([ANSWER_TAG] if final_turn else [*self.tags, ANSWER_TAG])

    def parse(self, turn_text: str, finish_reason: str, final_turn: bool) -> TurnParse:
        """``parse_action`` on the turn (answer only on the final turn), as a ``TurnParse``."""
        action = parse_action(turn_text, () if final_turn else self.tags)
        if action.kind == "answer":
            return TurnParse(answer=action.content)
        if action.kind == "tool":
            return TurnParse(calls=(self._call(action),))
        reason = action.reason or ""
        if reason.startswith("empty"):
            return TurnParse(invalid="empty", detail=reason)
        if action.tag is None and finish_reason == "length":
            return TurnParse(invalid="truncated", detail=reason)
        return TurnParse(invalid="no_action", detail=reason)

    def _call(self, action: Action) -> ParsedCall:
        name = self.name_of_tag[action.tag]  # type: ignore[index]
        argument = single_argument(self.specs[name])
        if argument is not None:
            return ParsedCall(name, {argument: action.content})
        try:
            arguments = json.loads(action.content)
        except json.JSONDecodeError as exc:
            return ParsedCall(name, None, "invalid_json", f"<{action.tag}> takes a JSON object ({exc.msg})")
        except RecursionError:  # json's decoder gives up on deep nesting with this
            return ParsedCall(
                name, None, "invalid_json", f"<{action.tag}> takes a JSON object (nested too deeply)"
            )
        if not isinstance(arguments, dict):
            return ParsedCall(name, None, "bad_arguments", f"<{action.tag}> takes a JSON object")
        return ParsedCall(name, arguments)

    def observation(
        self, results: list[ToolMessage], *, turn_closed: bool, final_turn: bool, max_obs_length: int
    ) -> Observation:
        """``<information>…</information>`` around the results' text (one call a turn: one result)."""
        text = "\n".join(m.content for m in results)
        return self._encoder(max_obs_length).encode(text, final_turn=final_turn)

    def invalid_turn_message(self, parse: TurnParse) -> ToolMessage:
        return ToolMessage("", INVALID_ACTION_HINT)

    def call_error_message(self, call: ParsedCall) -> ToolMessage:
        return ToolMessage(call.name or "", f"Error: {call.detail or call.error}")
