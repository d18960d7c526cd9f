"""The state machine of one trajectory: ask for a turn, read its calls or answer, append the observation.

``TrajectoryState`` is driven by a schedule (``schedules.py``): ``request()`` gives the next
engine call (or None when the trajectory is over), ``on_generation`` records the sampled
turn and returns the calls it made (``turn_calls.TurnCalls``: which run, which are
answered at once), ``on_tool_outcomes`` appends the one observation that answers them all.
It knows only the ``TurnRules``: budgets, the tool-call format that reads turns and writes
observations (``formats/``), the call budgets and the context policy.

When the format re-renders the conversation (a template that rewrites earlier turns) or a
context policy is set, the state keeps a ``History`` and, before each turn, compares the
trajectory's stream with the one the history expects: when they differ, the turn begins a
new step from the expected one (``history.py``, ``context.py``). The budgets are the
current step's: its prompt plus response within the context window, its response within
``max_response_length``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.agent.context import compact
from agentrl.agent.formats.base import ToolCallFormat, ToolMessage, TurnParse
from agentrl.agent.history import History
from agentrl.agent.tool_dispatch import ToolOutcome
from agentrl.agent.trajectory import CallRecord, Segment, Trajectory
from agentrl.agent.turn_calls import (
    FAILED,
    INVALID,
    OK,
    OVER_BUDGET,
    CallBudget,
    TurnCalls,
    plan_turn,
    settle,
)
from agentrl.config.schema import ContextConfig
from agentrl.engines.base import GenerationResult, SamplingParams
from agentrl.engines.version import WeightsVersion
from agentrl.seeding import derive_seed


@dataclass(frozen=True)
class TurnRules:
    """What every trajectory of one rollout plays by (see ``generation.py`` for the rules)."""

    tokenizer: Any
    format: ToolCallFormat
    tool_names: tuple[str, ...]  # the tools, by name (the keys of Trajectory.tool_calls)
    max_turns: int  # turns that may call a tool; one final answer-only turn follows
    max_prompt_length: int
    max_response_length: int
    max_obs_length: int
    calls: CallBudget
    context: ContextConfig = field(default_factory=ContextConfig)
    # the engine's weights now: read as each turn comes back (engines/version.py)
    weights: WeightsVersion = field(default_factory=WeightsVersion)


class TrajectoryState:
    """One trajectory in progress (see the module docstring)."""

    def __init__(self, traj: Trajectory, base: SamplingParams, seed: int | None, rules: TurnRules) -> None:
        self.traj = traj
        self.base = base
        self.seed = seed  # this trajectory's own stream; turn t samples with derive_seed(seed, t)
        self.rules = rules
        self.turns_used = 0  # non-final turns consumed
        self.calls_sent = 0  # calls sent to the tools so far (what the per-trajectory budget counts)
        self.done = False
        self._turn_cap_binding = True  # whether max_new_tokens (not a budget) set this turn's cap
        self._turn_version = rules.weights.value  # the weights when the turn in flight was asked for
        tracked = getattr(rules.format, "renders_history", False) or rules.context.policy != "none"
        self.history = History(rules.format, traj.prompt_ids, traj.prompt.messages) if tracked else None

    @property
    def uid(self) -> str:
        return self.traj.uid

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
        """No more calls: the turns, or the trajectory's call budget, are used up."""
        most = self.rules.calls.per_trajectory
        return self.turns_used >= self.rules.max_turns or (most is not None and self.calls_sent >= most)

    # --- the loop --------------------------------------------------------------------

    def request(self) -> tuple[list[int], SamplingParams] | None:
        """The next engine call, or None when the trajectory is over."""
        if self.done:
            return None
        if self.history is not None and self.history.turns:
            self._follow_history()
            if self.done:
                return None
        room, limit = self._room()
        if room <= 0:
            self._end_over_budget(limit)
            return None
        per_turn = self.base.max_new_tokens
        self._turn_cap_binding = per_turn <= room
        # the weights when the turn is asked for: new weights arriving while it samples (a partial
        # rollout) cannot make its older tokens look newer than they are
        self._turn_version = self.rules.weights.value
        stops = self.rules.format.turn_stops(self.final_turn)
        params = replace(
            self.base,
            max_new_tokens=min(per_turn, room),
            stop=tuple(dict.fromkeys((*self.base.stop, *stops))),
            seed=None if self.seed is None else derive_seed(self.seed, self.traj.num_turns),
        )
        return self.traj.prompt_ids + self.traj.response_ids, params

    def _follow_history(self) -> None:
        """Begin a new step when the conversation the next turn sees is not the stream held."""
        traj, context = self.traj, self.rules.context
        fired = compact(context, self.history, len(traj.prompt_ids) + len(traj.response_ids))  # type: ignore[arg-type]
        if fired:
            traj.context_compactions += 1
        expected = self.history.expected_stream(context.marker, self.rules.max_obs_length)  # type: ignore[union-attr]
        if expected == traj.prompt_ids + traj.response_ids:
            return
        if len(expected) >= self.rules.max_prompt_length + self.rules.max_response_length:
            self._end_over_budget("context")  # a step with no room to sample would hold no outcome
            return
        traj.begin_step(expected, "context_compacted" if fired else "history_rewritten")

    def on_generation(self, result: GenerationResult) -> TurnCalls | None:
        """Record a turn; returns its calls when it made any (to run, then ``on_tool_outcomes``)."""
        traj, rules = self.traj, self.rules
        ids = list(result.token_ids)
        turn = traj.add_turn(ids, list(result.log_probs), result.finish_reason, self._turn_version)
        final = self.final_turn
        text = rules.tokenizer.decode(ids, skip_special_tokens=False)
        parse = rules.format.parse(text, result.finish_reason, final)
        if self.history is not None:
            self.history.add_turn(ids, text, parse)
        acted = parse.answer is not None or any(c.error is None for c in parse.calls)
        cut = parse.invalid is not None or any(c.error == "truncated" for c in parse.calls)
        if result.finish_reason == "length" and self._turn_cap_binding and cut:
            traj.truncation.turn_budget_hits += 1
        if acted:
            traj.num_valid_actions += 1
        else:
            traj.num_invalid_actions += 1

        if parse.answer is not None:
            traj.finished = True
            traj.answer = parse.answer
            self.done = True
            return None
        closed = bool(ids) and ids[-1] == rules.tokenizer.eos_token_id
        if parse.calls:
            self.turns_used += 1
            before = self.calls_sent
            planned = plan_turn(
                parse.calls, rules.format, rules.calls, turn=turn, turn_closed=closed, sent_before=before
            )
            self.calls_sent += planned.sent
            return planned
        over_budget = result.finish_reason == "length" and not self._turn_cap_binding
        self._invalid_turn(parse, over_budget, final, closed)
        return None

    def _invalid_turn(self, parse: TurnParse, over_budget: bool, final: bool, closed: bool) -> None:
        """A turn that neither called nor answered: counted by reason, then a hint or the end."""
        reason = parse.invalid or "no_action"
        self.traj.tool_calls_invalid[reason] = self.traj.tool_calls_invalid.get(reason, 0) + 1
        if over_budget:
            self._end_over_budget(self._room()[1])
        elif final:
            self.done = True
        else:
            self.turns_used += 1
            self._observe([self.rules.format.invalid_turn_message(parse)], closed)

    def on_tool_outcomes(self, turn: TurnCalls, outcomes: list[ToolOutcome]) -> None:
        """Append the one observation that answers every call of ``turn`` (``outcomes``: its runs')."""
        traj = self.traj
        settled = settle(turn, outcomes, self.rules.format)
        for s in settled:
            name = s.call.name
            if s.status in (OK, FAILED):
                traj.tool_calls[name] = traj.tool_calls.get(name, 0) + 1  # type: ignore[index]
            if s.status == FAILED:
                traj.tool_failures += 1
            elif s.status == OVER_BUDGET:
                traj.calls_over_budget += 1
            elif s.status.startswith(INVALID):
                reason = s.status[len(INVALID) :]
                traj.tool_calls_invalid[reason] = traj.tool_calls_invalid.get(reason, 0) + 1
            if s.result is not None:
                for key, value in s.result.metrics.items():
                    traj.tool_metrics[key] = traj.tool_metrics.get(key, 0.0) + float(value)
                if s.result.reward is not None:
                    traj.turn_rewards[turn.turn] += float(s.result.reward)
            traj.calls.append(CallRecord(turn.turn, name, s.call.arguments, s.status, s.message.content))
        if self._observe([s.message for s in settled], turn.turn_closed):
            traj.tool_outputs.extend((s.call.name, s.result.text) for s in settled if s.result is not None)  # type: ignore[misc]

    def _observe(self, messages: list[ToolMessage], turn_closed: bool) -> bool:
        """Append the observation of ``messages``; False when there was no room and the trajectory ended."""
        rules = self.rules
        obs = rules.format.observation(
            messages, turn_closed=turn_closed, final_turn=self.final_turn, max_obs_length=rules.max_obs_length
        )
        if obs.tokens_cut:
            self.traj.truncation.observations_cut += 1
            self.traj.truncation.observation_tokens_cut += obs.tokens_cut
        room, limit = self._room()
        if len(obs.ids) >= room:  # no room left for the policy to respond to it
            self._end_over_budget(limit)
            return False
        self.traj.append(obs.ids, Segment.OBSERVATION)
        if self.history is not None:
            read = (
                [ToolMessage(m.name, c) for m, c in zip(messages, obs.contents, strict=True)]
                if obs.contents
                else messages
            )
            self.history.add_observation(obs.ids, read, turn_closed=turn_closed, final_turn=self.final_turn)
        return True
