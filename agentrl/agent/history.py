"""The conversation a trajectory has played, and the token stream its next turn is sampled from.

``History`` records every turn as sampled (its ids, its text, what the format read in it) and
the observation that answered it (its ids, and the tool messages as the policy read them).
From it, ``expected_stream`` gives the tokens the next turn must be sampled from:

* in token mode (the ``tags`` format, and ``hermes`` on a template that keeps earlier turns):
  the prompt's ids, then each kept turn's sampled ids and its observation's ids, where a
  compacted observation is the one the format writes for the context marker instead of the
  tools' text. With nothing compacted this is exactly the trajectory's stream, so an
  append-only trajectory never leaves its first step.
* in render mode (a chat template that rewrites earlier turns): the template's render of
  the conversation as messages (the prompt's, then each kept turn as an assistant message
  with its calls, and its tool messages), with the generation prompt.

When the stream the trajectory holds is not the expected one, the turn begins a new step
(``Trajectory.begin_step``) whose prompt is the expected stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.agent.formats.base import ToolCallFormat, ToolMessage, TurnParse


@dataclass
class TurnRecord:
    """One model turn as sampled, and the observation that answered it (None: none did)."""

    model_ids: list[int]
    text: str  # decoded with special tokens: what the format parsed
    parse: TurnParse
    observation_ids: list[int] | None = None
    messages: list[ToolMessage] = field(default_factory=list)  # as the policy read them
    turn_closed: bool = True
    final_turn: bool = False
    compacted: bool = False  # its observation's contents became the context marker
    dropped: bool = False  # the turn and its observation left the conversation


class History:
    """Every turn of one trajectory (module docstring); ``render``: the format re-renders."""

    def __init__(self, fmt: ToolCallFormat, prompt_ids: list[int], messages: list[dict[str, Any]] | None):
        self.format = fmt
        self.render = bool(getattr(fmt, "renders_history", False))
        self.prompt_ids = list(prompt_ids)
        self.prompt_messages = list(messages) if messages is not None else None
        self.turns: list[TurnRecord] = []

    def add_turn(self, ids: list[int], text: str, parse: TurnParse) -> None:
        self.turns.append(TurnRecord(list(ids), text, parse))

    def add_observation(
        self, ids: list[int], messages: list[ToolMessage], *, turn_closed: bool, final_turn: bool
    ) -> None:
        last = self.turns[-1]
        last.observation_ids = list(ids)
        last.messages = list(messages)
        last.turn_closed = turn_closed
        last.final_turn = final_turn

    def expected_stream(self, marker: str | None, max_obs_length: int = 1 << 30) -> list[int]:
        """The tokens the next turn is sampled from (module docstring). ``marker``: what a
        compacted observation's contents read (None only when nothing is compacted)."""
        if self.render:
            return self.format.render_conversation(self.messages(marker))  # type: ignore[attr-defined]
        ids = list(self.prompt_ids)
        for turn in self.turns:
            if turn.dropped:
                continue
            ids.extend(turn.model_ids)
            if turn.observation_ids is None:
                continue
            if turn.compacted:
                ids.extend(self._marker_observation(turn, marker, max_obs_length))
            else:
                ids.extend(turn.observation_ids)
        return ids

    def _marker_observation(self, turn: TurnRecord, marker: str | None, max_obs_length: int) -> list[int]:
        if marker is None:
            raise ValueError("a compacted observation needs the context marker")
        messages = [ToolMessage(m.name, marker) for m in turn.messages]
        observation = self.format.observation(
            messages, turn_closed=turn.turn_closed, final_turn=turn.final_turn, max_obs_length=max_obs_length
        )
        return observation.ids

    def messages(self, marker: str | None) -> list[dict[str, Any]]:
        """The conversation as chat messages: the prompt's, then each kept turn and its results."""
        if self.prompt_messages is None:
            raise ValueError("re-rendering the conversation needs the prompt's chat messages")
        messages = list(self.prompt_messages)
        for turn in self.turns:
            if turn.dropped:
                continue
            messages.append(self.format.assistant_message(turn.text, turn.parse))  # type: ignore[attr-defined]
            for m in turn.messages:
                content = marker if turn.compacted and marker is not None else m.content
                messages.append({"role": "tool", "name": m.name, "content": content})
        return messages
