"""One agent episode's chat requests, recorded as a token-exact trajectory.

An agent written against a chat API sends the whole conversation with every request; the
trainer needs the ids the engine sampled, never the returned text encoded again. ``Episode``
keeps, beside the trajectory, the conversation as the rollout itself would hold it (each
sampled turn as ``format.assistant_message`` makes it, each tool message as the policy read
it) and the messages the agent was last seen to hold (its request, then the reply it got).

A request is read by ``prompt_for`` into a ``Pending`` (what the turn is sampled from, and what
the request adds to the trajectory) and applied by ``record`` only once its turn is sampled:
a request whose turn never comes (the engine failed, the episode was closed) leaves the
trajectory as it was, so a retried request is recorded once. The endpoint holds
``Episode.lock`` from one to the other, so concurrent requests of one episode are taken in turn.

* The first request gives the prompt: the template's render of its messages with the tools.
* A request that extends what the agent last held (the same messages, the reply as it was
  returned, then only tool messages) continues the trajectory: the tool messages become the
  format's observation ids (``format.observation``, as the built-in loop writes them),
  appended as observation tokens, and the next turn is sampled from the tokens held.
* On a template that rewrites earlier turns (``format.renders_history``) the stream held is
  then compared with the render of the conversation, and a new step begins from the render
  where they differ, as the built-in loop does.
* Any other request (an agent that dropped, edited or summarised its history, or added a
  user message) begins a new step whose prompt is the render of the messages it sent.

The built-in loop's turn rules hold too (``Budget.max_turns``): after ``max_turns`` turns that
called a tool or neither called nor answered, the next turn is the final one (the observation
before it carries the final-turn note, and it is read for an answer only); after it, or after a
turn cut by the token budget, the episode is over and further requests are refused. So an agent
that makes the calls the built-in loop makes yields its trajectory id for id, and every sampled
token is in exactly one step. A tool message names its call by ``tool_call_id`` (one the endpoint
returned); one that names none takes its ``name`` field, else the empty name (the built-in
loop's name for a call that named no tool).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.agent.formats.base import ParsedCall, ToolMessage, TurnParse
from agentrl.agent.observations import Observation
from agentrl.agent.tool_dispatch import refused_call
from agentrl.agent.trajectory import CallRecord, PromptSpec, Segment, Trajectory
from agentrl.endpoint.messages import EpisodeError, normalise, same
from agentrl.engines.base import GenerationResult


@dataclass(frozen=True)
class Budget:
    """The rollout's budgets, as the built-in loop's ``TurnRules`` hold them (``max_turns`` None:
    no turn rule, as for plain inference)."""

    max_prompt_length: int
    max_response_length: int
    max_obs_length: int
    max_turns: int | None = None

    @property
    def window(self) -> int:
        return self.max_prompt_length + self.max_response_length


@dataclass
class _Sent:
    """What the agent holds after a reply: its request's messages and the reply, normalised."""

    messages: list[dict[str, Any]]
    call_names: dict[str, str | None] = field(default_factory=dict)  # tool_call id → the name it gave
    call_arguments: dict[str, Any] = field(default_factory=dict)  # tool_call id → arguments
    call_status: dict[str, str] = field(default_factory=dict)  # tool_call id → ok | invalid/<reason>
    turn: int = 0
    turn_closed: bool = True
    calls_logged: bool = False  # the calls the tool messages answer are in the trajectory's log


@dataclass
class Pending:
    """One request, read: the ids its turn is sampled from, at most ``room`` new tokens, and what
    ``record`` adds to the trajectory before the turn (nothing is applied before then)."""

    ids: list[int]
    room: int
    final: bool  # the final turn: read for an answer only
    conversation: list[dict[str, Any]]  # the conversation the turn answers, as the rollout holds it
    start: PromptSpec | None = None  # the episode's first request: its prompt
    observation: Observation | None = None  # the tool messages' ids, appended before the turn
    results: list[tuple[str, ToolMessage]] = field(default_factory=list)  # (call id, message as sent)
    step: bool = False  # the turn begins a new step whose prompt is ``ids``


def _name_of(sent: _Sent, message: dict[str, Any]) -> str:
    """The tool name a tool message is read under: its call's (the empty name for a call that
    named none, as the built-in loop has it), else the message's own ``name``."""
    call_id = message["tool_call_id"]
    return (sent.call_names[call_id] or "") if call_id in sent.call_names else message["name"]


class Episode:
    """One agent episode: its requests' prompts and replies, as one trajectory (module docstring)."""

    def __init__(
        self,
        fmt: Any,
        tokenizer: Any,
        budget: Budget,
        *,
        uid: str,
        group_id: str,
        task: dict[str, Any] | None = None,
    ) -> None:
        self.format, self.tokenizer, self.budget = fmt, tokenizer, budget
        specs = getattr(fmt, "specs", ())  # the run's tools, by name: what a call is checked against
        self.specs = specs if isinstance(specs, dict) else {spec.name: spec for spec in specs}
        self.uid, self.group_id = uid, group_id
        self.task = dict(task or {})
        self.trajectory: Trajectory | None = None
        self.conversation: list[dict[str, Any]] = []  # as the rollout holds it (module docstring)
        self.sent: _Sent | None = None
        self.turns_used = 0  # turns that called a tool or neither called nor answered (not the final)
        self.over = False  # the final turn, or a turn cut by the budget, ended it
        self.closed = False  # the endpoint closed it: nothing more is recorded
        self.lock = asyncio.Lock()

    # --- the request ----------------------------------------------------------------

    def prompt_for(self, messages: Any) -> Pending:
        """The request read (module docstring); raises ``EpisodeError`` when it cannot be taken or
        leaves no room to sample (then the trajectory is marked truncated and the calls its tool
        messages answer are logged, as the built-in loop does, and nothing else changes)."""
        if self.closed:
            raise EpisodeError(f"episode {self.uid!r} is closed", status=410, code="episode_closed")
        if self.over:
            raise EpisodeError(
                f"episode {self.uid!r} is over: its final turn was sampled (actor.rollout.max_turns), "
                "or a turn reached the token budget",
                code="episode_over",
            )
        messages = normalise(messages)
        limit = self.budget.max_turns
        final = limit is not None and self.turns_used >= limit
        if self.trajectory is None:
            return self._first(messages, final)
        extension = self._extension(messages)
        if extension is None:
            render = self.format.render_conversation(messages)
            return Pending(render, self._room_of(render, 0), final, messages, step=True)
        traj, sent = self.trajectory, self.sent
        assert sent is not None
        obs = self.format.observation(
            [m for _, m in extension],
            turn_closed=sent.turn_closed,
            final_turn=final,
            max_obs_length=self.budget.max_obs_length,
        )
        held = self._room(len(traj.prompt_ids), len(traj.response_ids))
        if len(obs.ids) >= held[0]:  # the built-in loop ends here too, its calls logged unobserved
            self._log_calls(traj, sent, extension, observed=False)
            self._refuse(f"the tool messages' {len(obs.ids)} tokens leave the next turn no room", held[1])
        contents = obs.contents or tuple(m.content for _, m in extension)
        conversation = self.conversation + [
            {"role": "tool", "name": m.name, "content": c}
            for (_, m), c in zip(extension, contents, strict=True)
        ]
        stream = traj.prompt_ids + traj.response_ids + obs.ids
        pending = Pending(stream, held[0] - len(obs.ids), final, conversation, None, obs, extension)
        if getattr(self.format, "renders_history", False):
            render = self.format.render_conversation(conversation)
            if render != stream:
                pending.ids, pending.step, pending.room = render, True, self._room_of(render, 0)
        return pending

    def _first(self, messages: list[dict[str, Any]], final: bool) -> Pending:
        ids = self.format.render_conversation(messages)
        prompt = PromptSpec(
            ids,
            data_source=str(self.task.get("data_source", "unknown")),
            ground_truth=self.task.get("ground_truth"),
            index=self.task.get("index"),
            extra_info=dict(self.task.get("extra_info") or {}),
            messages=messages,
        )
        return Pending(ids, self._room_of(ids, 0), final, list(messages), start=prompt)

    def _extension(self, messages: list[dict[str, Any]]) -> list[tuple[str, ToolMessage]] | None:
        """The tool messages (with the call ids they answer) that extend what the agent held, or
        None when the request does not extend it by tool messages alone."""
        sent = self.sent
        if sent is None or len(messages) <= len(sent.messages):
            return None
        if not all(same(a, b) for a, b in zip(messages, sent.messages, strict=False)):
            return None
        new = messages[len(sent.messages) :]
        if any(m["role"] != "tool" for m in new):
            return None
        return [(m["tool_call_id"], ToolMessage(_name_of(sent, m), m["content"])) for m in new]

    def _room(self, prompt: int, response: int) -> tuple[int, str]:
        """Tokens a turn may still sample after ``prompt`` + ``response`` tokens, and which limit binds."""
        context = self.budget.window - prompt - response
        own = self.budget.max_response_length - response
        return (context, "context") if context < own else (own, "response")

    def _room_of(self, ids: list[int], response: int) -> int:
        """The room of a turn sampled from ``ids``; refused (the context marked) when there is none."""
        room, limit = self._room(len(ids), response)
        if room <= 0:
            self._refuse(f"the conversation's {len(ids)} tokens leave no room to sample", limit)
        return room

    def _refuse(self, why: str, limit: str) -> None:
        """Mark which budget ended the trajectory (as the built-in loop does) and refuse."""
        if self.trajectory is not None:
            if limit == "context":
                self.trajectory.truncation.context = True
            else:
                self.trajectory.truncation.response_budget = True
        raise EpisodeError(
            f"{why} (context window {self.budget.window} tokens = max_prompt_length + max_response_length; "
            f"response budget {self.budget.max_response_length})",
            code="context_length_exceeded",
        )

    # --- the reply ------------------------------------------------------------------

    def record(
        self,
        pending: Pending,
        messages: list[dict[str, Any]],
        result: GenerationResult,
        cap_binding: bool,
        version: int = 0,
    ) -> tuple[dict[str, Any], TurnParse]:
        """Apply ``pending`` and record its sampled turn; returns the assistant message the agent
        is to read (``reply``) and what the format read. ``cap_binding``: the turn's token cap
        was the per-turn one, not the room the budgets left (how the built-in loop tells a turn
        cut by its own cap from a trajectory out of budget)."""
        if self.closed:
            raise EpisodeError(
                f"episode {self.uid!r} was closed during its turn", status=410, code="episode_closed"
            )
        traj = self._apply(pending)
        ids = list(result.token_ids)
        turn = traj.add_turn(ids, list(result.log_probs), result.finish_reason, version)
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        parse = self.format.parse(text, result.finish_reason, pending.final)
        canonical = self.format.assistant_message(text, parse)
        self.conversation.append(canonical)
        over_budget = self._count(parse, traj, result.finish_reason, cap_binding)
        parse = self._refuse_calls(parse, traj)
        if pending.final or over_budget:
            self.over = True
        elif parse.answer is None:
            self.turns_used += 1  # a call turn, or a turn the hint will answer
        message = self.reply(turn, canonical, parse, hint=not self.over)
        closed = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        self.sent = self._sent(messages, message, turn, closed)
        return message, parse

    def _apply(self, pending: Pending) -> Trajectory:
        """What the request adds before its turn: the prompt, the observation, a new step."""
        if pending.start is not None:
            self.trajectory = Trajectory(prompt=pending.start, group_id=self.group_id, uid=self.uid)
        traj, sent = self.trajectory, self.sent
        assert traj is not None
        if pending.observation is not None:
            assert sent is not None
            obs = pending.observation
            if obs.tokens_cut:
                traj.truncation.observations_cut += 1
                traj.truncation.observation_tokens_cut += obs.tokens_cut
            traj.append(obs.ids, Segment.OBSERVATION)
            self._log_calls(traj, sent, pending.results, observed=True)
        if pending.step:
            traj.begin_step(pending.ids, "history_rewritten")
        self.conversation = list(pending.conversation)
        return traj

    @staticmethod
    def _log_calls(
        traj: Trajectory, sent: _Sent, results: list[tuple[str, ToolMessage]], observed: bool
    ) -> None:
        """The calls ``results`` answer, in the trajectory's log and counts once, as the built-in loop
        keeps them: a call that ran counts for its tool, and its output is kept when it was observed."""
        if sent.calls_logged:  # a request retried after a refusal brings the same results again
            return
        sent.calls_logged = True
        for call_id, m in results:
            status = sent.call_status.get(call_id)
            if status == "ok":
                traj.tool_calls[m.name] = traj.tool_calls.get(m.name, 0) + 1
                if observed:
                    traj.tool_outputs.append((m.name, m.content))
            if status is not None:  # a message answering no call of the turn (a hint) logs no call
                name, arguments = sent.call_names[call_id], sent.call_arguments.get(call_id)
                traj.calls.append(CallRecord(sent.turn, name, arguments, status, m.content))

    def _sent(
        self, messages: list[dict[str, Any]], message: dict[str, Any], turn: int, closed: bool
    ) -> _Sent:
        calls = message.get("tool_calls", ())
        names = {c["id"]: c["function"]["name"] for c in calls}
        names |= {c["id"]: c["name"] for c in message.get("invalid_calls", ())}
        arguments = {c["id"]: c["function"]["arguments"] for c in calls}
        status = {c["id"]: "ok" for c in calls}
        status |= {c["id"]: f"invalid/{c['reason']}" for c in message.get("invalid_calls", ())}
        held = [*normalise(messages), normalise([message])[0]]
        return _Sent(held, names, arguments, status, turn, closed)

    def reply(
        self, turn: int, canonical: dict[str, Any], parse: TurnParse, hint: bool = True
    ) -> dict[str, Any]:
        """The assistant message for the agent: the turn's content as the rollout holds it, its
        well-formed calls as ``tool_calls`` (ids ``call_<turn>_<k>``, k the call's place in the
        turn), and fields the API does not have, for an agent that acts as the built-in loop
        does: ``invalid_calls`` (each call that cannot run, malformed or refused: its id, name,
        reason and the error message the built-in loop sends), ``answer`` (the body of the
        turn's ``<answer>`` as the built-in loop reads it, in a turn that calls nothing) and,
        where the episode goes on, ``invalid_turn`` (a turn that neither called nor answered: the
        built-in loop's hint). Tool messages answer calls and hints by id, in call order."""
        message: dict[str, Any] = {"role": "assistant", "content": canonical["content"]}
        if not parse.calls:
            if parse.answer is not None:  # the answer as the built-in loop reads the turn
                message["answer"] = parse.answer
            if hint and parse.answer is None and parse.invalid is not None:
                note = self.format.invalid_turn_message(parse)
                message["invalid_turn"] = {"reason": parse.invalid, "message": note.content}
            return message
        good = [(k, c) for k, c in enumerate(parse.calls) if c.error is None]
        bad = [(k, c) for k, c in enumerate(parse.calls) if c.error is not None]
        if good:
            message["tool_calls"] = [
                {
                    "id": f"call_{turn}_{k}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for k, c in good
            ]
        if bad:
            message["invalid_calls"] = [
                {
                    "id": f"call_{turn}_{k}",
                    "name": c.name,
                    "reason": c.error,
                    "message": self.format.call_error_message(c).content,
                }
                for k, c in bad
            ]
        return message

    def _refuse_calls(self, parse: TurnParse, traj: Trajectory) -> TurnParse:
        """The turn's well-formed calls that must not run (an unknown tool, arguments off its schema)
        marked malformed with the error the built-in loop's dispatcher gives, and counted as it
        counts them, so the agent is told as the policy would be (``invalid_calls``)."""
        calls = []
        for call in parse.calls:
            refused = None if call.error is not None else refused_call(self.specs, call.name, call.arguments)  # type: ignore[arg-type]
            if refused is not None:
                reason, detail = refused
                traj.tool_calls_invalid[reason] = traj.tool_calls_invalid.get(reason, 0) + 1
                call = ParsedCall(call.name, call.arguments, reason, detail)  # type: ignore[arg-type]
            calls.append(call)
        return replace(parse, calls=tuple(calls)) if calls != list(parse.calls) else parse

    def _count(self, parse: TurnParse, traj: Trajectory, finish: str, cap_binding: bool) -> bool:
        """The turn's counts, as the built-in loop keeps them; whether it ran out of budget."""
        acted = parse.answer is not None or any(c.error is None for c in parse.calls)
        traj.num_valid_actions += int(acted)
        traj.num_invalid_actions += int(not acted)
        cut = parse.invalid is not None or any(c.error == "truncated" for c in parse.calls)
        if finish == "length" and cap_binding and cut:
            traj.truncation.turn_budget_hits += 1
        for call in parse.calls:
            if call.error is not None:
                traj.tool_calls_invalid[call.error] = traj.tool_calls_invalid.get(call.error, 0) + 1
        if parse.answer is not None:
            traj.finished = True
            traj.answer = parse.answer
            return False
        if parse.calls:
            return False
        reason = parse.invalid or "no_action"
        traj.tool_calls_invalid[reason] = traj.tool_calls_invalid.get(reason, 0) + 1
        if finish == "length" and not cap_binding:  # the budgets, not the turn's cap, cut it
            limit = self._room(len(traj.prompt_ids), len(traj.response_ids))[1]
            if limit == "context":
                traj.truncation.context = True
            else:
                traj.truncation.response_budget = True
            return True
        return False
