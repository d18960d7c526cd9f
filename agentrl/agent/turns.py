"""The state machine of one trajectory: ask for a turn, read its action, append the observation.

``TrajectoryState`` is driven by a schedule (``schedules.py``): ``request()`` gives the next
engine call (or None when the trajectory is over), ``on_generation`` records the sampled
turn and returns the tool call it asked for, ``on_tool_outcome`` appends what the tool
returned. It knows only the ``TurnRules``: budgets, the tags it may call, stop strings,
and the tokenizer and observation encoder that read actions and write observations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agentrl.agent.actions import ANSWER_TAG, parse_action, stop_strings
from agentrl.agent.observations import INVALID_ACTION_HINT, ObservationEncoder
from agentrl.agent.tool_dispatch import ToolOutcome
from agentrl.agent.trajectory import Segment, Trajectory
from agentrl.engines.base import GenerationResult, SamplingParams
from agentrl.seeding import derive_seed


@dataclass(frozen=True)
class TurnRules:
    """What every trajectory of one rollout plays by (see ``generation.py`` for the rules)."""

    tokenizer: Any
    observations: ObservationEncoder
    tool_tags: tuple[str, ...]
    max_turns: int  # turns that may call a tool; one final answer-only turn follows
    max_prompt_length: int
    max_response_length: int

    @property
    def turn_stops(self) -> tuple[str, ...]:
        return stop_strings([*self.tool_tags, ANSWER_TAG])

    @property
    def final_stops(self) -> tuple[str, ...]:
        return stop_strings([ANSWER_TAG])


@dataclass(frozen=True)
class ToolCall:
    tag: str
    content: str


class TrajectoryState:
    """One trajectory in progress (see the module docstring)."""

    def __init__(self, traj: Trajectory, base: SamplingParams, seed: int | None, rules: TurnRules) -> None:
        self.traj = traj
        self.base = base
        self.seed = seed  # this trajectory's own stream; turn t samples with derive_seed(seed, t)
        self.rules = rules
        self.turns_used = 0  # non-final turns consumed
        self.done = False
        self._turn_cap_binding = True  # whether max_new_tokens (not a budget) set this turn's cap

    # --- budgets ---------------------------------------------------------------------

    def _room(self) -> tuple[int, str]:
        """Tokens the response may still grow by, and which limit binds."""
        rules, resp = self.rules, len(self.traj.response_ids)
        response_room = rules.max_response_length - resp
        context_room = rules.max_prompt_length + rules.max_response_length - len(self.traj.prompt_ids) - resp
        return (context_room, "context") if context_room < response_room else (response_room, "response")

    def _end_over_budget(self, limit: str) -> None:
        if limit == "context":
            self.traj.truncation.context = True
        else:
            self.traj.truncation.response_budget = True
        self.done = True

    @property
    def final_turn(self) -> bool:
        return self.turns_used >= self.rules.max_turns

    # --- the loop --------------------------------------------------------------------

    def request(self) -> tuple[list[int], SamplingParams] | None:
        """The next engine call, or None when the trajectory is over."""
        if self.done:
            return None
        room, limit = self._room()
        if room <= 0:
            self._end_over_budget(limit)
            return None
        per_turn = self.base.max_new_tokens
        self._turn_cap_binding = per_turn <= room
        stops = self.rules.final_stops if self.final_turn else self.rules.turn_stops
        params = replace(
            self.base,
            max_new_tokens=min(per_turn, room),
            stop=tuple(dict.fromkeys((*self.base.stop, *stops))),
            seed=None if self.seed is None else derive_seed(self.seed, self.traj.num_turns),
        )
        return self.traj.prompt_ids + self.traj.response_ids, params

    def on_generation(self, result: GenerationResult) -> ToolCall | None:
        """Record a turn; returns the tool call to run, if any."""
        traj = self.traj
        traj.append(list(result.token_ids), Segment.MODEL, list(result.log_probs))
        traj.num_turns += 1
        traj.finish_reasons.append(result.finish_reason)
        final = self.final_turn
        text = self.rules.tokenizer.decode(list(result.token_ids), skip_special_tokens=False)
        action = parse_action(text, () if final else self.rules.tool_tags)
        over_budget = result.finish_reason == "length" and not self._turn_cap_binding
        if result.finish_reason == "length" and self._turn_cap_binding and action.kind == "invalid":
            traj.truncation.turn_budget_hits += 1

        if action.kind == "answer":
            traj.num_valid_actions += 1
            traj.finished = True
            traj.answer = action.content
            self.done = True
            return None
        if action.kind == "tool":
            traj.num_valid_actions += 1
            self.turns_used += 1
            traj.tool_calls[action.tag] = traj.tool_calls.get(action.tag, 0) + 1  # type: ignore[index]
            return ToolCall(action.tag, action.content)  # type: ignore[arg-type]

        traj.num_invalid_actions += 1
        if over_budget:
            self._end_over_budget(self._room()[1])
        elif final:
            self.done = True
        else:
            self.turns_used += 1
            self._observe(INVALID_ACTION_HINT)
        return None

    def on_tool_outcome(self, tag: str, outcome: ToolOutcome) -> None:
        if outcome.result is not None:
            for key, value in outcome.result.metrics.items():
                self.traj.tool_metrics[key] = self.traj.tool_metrics.get(key, 0.0) + float(value)
            if self._observe(outcome.result.text):
                self.traj.tool_outputs.append((tag, outcome.result.text))
        else:
            self.traj.tool_failures += 1
            self._observe(f"Error: the tool call failed ({outcome.error}).")

    def _observe(self, text: str) -> bool:
        """Append ``text`` as an observation; False when there was no room and the trajectory ended."""
        obs = self.rules.observations.encode(text, final_turn=self.final_turn)
        if obs.tokens_cut:
            self.traj.truncation.observations_cut += 1
            self.traj.truncation.observation_tokens_cut += obs.tokens_cut
        room, limit = self._room()
        if len(obs.ids) >= room:  # no room left for the policy to respond to it
            self._end_over_budget(limit)
            return False
        self.traj.append(obs.ids, Segment.OBSERVATION)
        return True
