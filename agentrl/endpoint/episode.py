"""One agent episode's chat requests, recorded as a token-exact trajectory.

An agent written against a chat API sends the whole conversation with every request; the
trainer needs the ids the engine sampled, never the returned text encoded again. ``Episode``
keeps, beside the trajectory, the conversation as the rollout itself would hold it (each
sampled turn as ``format.assistant_message`` makes it, each tool message as the policy read
it) and the messages the agent was last seen to hold (its request, then the reply it got).

For each request (``prompt_for``):

* the first gives the prompt: the template's render of its messages with the tools;
* a request that extends what the agent last held (the same messages, the reply as it was
  returned, then only tool messages) continues the trajectory: the tool messages become
  the format's observation ids (``format.observation``, as the built-in loop writes them),
  appended as observation tokens, and the next turn is sampled from the tokens held;
* on a template that rewrites earlier turns (``format.renders_history``) the stream held is
  then compared with the render of the conversation, and a new step begins from the render
  where they differ, as the built-in loop does;
* any other request (an agent that dropped, edited or summarised its history, or added a
  user message) begins a new step whose prompt is the render of the messages it sent.

So an agent that makes the calls the built-in loop makes yields its trajectory id for id,
and every sampled token is in exactly one step. A tool message names its call by
``tool_call_id`` (one the endpoint returned); one that names none takes its ``name`` field,
else the empty name (the built-in loop's name for a call that named no tool).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentrl.agent.formats.base import ToolMessage, TurnParse
from agentrl.agent.trajectory import CallRecord, PromptSpec, Segment, Trajectory
from agentrl.engines.base import GenerationResult

ROLES = ("system", "user", "assistant", "tool")


class EpisodeError(ValueError):
    """A request this episode cannot take; the message names the field and what was expected.
    ``status``: the HTTP status the endpoint answers with."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class Budget:
    """The rollout's token budgets, as the built-in loop's ``TurnRules`` hold them."""

    max_prompt_length: int
    max_response_length: int
    max_obs_length: int


@dataclass
class _Sent:
    """What the agent holds after a reply: its request's messages and the reply, normalised."""

    messages: list[dict[str, Any]]
    call_names: dict[str, str | None] = field(default_factory=dict)  # tool_call id → the name it gave
    call_arguments: dict[str, Any] = field(default_factory=dict)  # tool_call id → arguments
    call_status: dict[str, str] = field(default_factory=dict)  # tool_call id → ok | invalid/<reason>
    turn: int = 0
    turn_closed: bool = True


def normalise(messages: Any) -> list[dict[str, Any]]:
    """Chat messages as plain dicts the template reads: content a string, a call's arguments a
    dict. Raises ``EpisodeError`` naming ``messages[i]...`` for what cannot be read."""
    if not isinstance(messages, list) or not messages:
        raise EpisodeError("'messages' must be a non-empty list of chat messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise EpisodeError(f"messages[{i}] must be an object, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise EpisodeError(f"messages[{i}].role must be one of {list(ROLES)}, got {role!r}")
        message: dict[str, Any] = {"role": role, "content": _text(m.get("content"), f"messages[{i}].content")}
        if role == "assistant" and m.get("tool_calls"):
            message["tool_calls"] = [
                _call(c, f"messages[{i}].tool_calls[{k}]") for k, c in enumerate(m["tool_calls"])
            ]
        if role == "tool":
            message["tool_call_id"] = str(m.get("tool_call_id") or "")
            message["name"] = str(m.get("name") or "")
        out.append(message)
    return out


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # the content-parts form: text parts only
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise EpisodeError(f"{where}[{k}] must be a text part ({{'type': 'text', 'text': ...}})")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise EpisodeError(f"{where} must be a string or a list of text parts, got {type(content).__name__}")


def _call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise EpisodeError(f"{where}.function.name must be a string")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise EpisodeError(f"{where}.function.arguments is not valid JSON ({exc.msg})") from None
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }


def _name_of(sent: _Sent, message: dict[str, Any]) -> str:
    """The tool name a tool message is read under: its call's (the empty name for a call that
    named none, as the built-in loop has it), else the message's own ``name``."""
    call_id = message["tool_call_id"]
    return (sent.call_names[call_id] or "") if call_id in sent.call_names else message["name"]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two normalised messages say the same (a call's id and the message's extra keys aside)."""

    def key(m: dict[str, Any]) -> tuple:
        calls = tuple(
            (c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
            for c in m.get("tool_calls", ())
        )
        return m["role"], m["content"], calls

    return key(a) == key(b)


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
        self.format = fmt
        self.tokenizer = tokenizer
        self.budget = budget
        self.uid, self.group_id = uid, group_id
        self.task = dict(task or {})
        self.trajectory: Trajectory | None = None
        self.conversation: list[dict[str, Any]] = []  # as the rollout holds it (module docstring)
        self.sent: _Sent | None = None
        self.last_parse: TurnParse | None = None

    # --- the request ----------------------------------------------------------------

    def prompt_for(self, messages: Any) -> list[int]:
        """The ids the next turn is sampled from (module docstring); raises ``EpisodeError``
        (nothing recorded) when the request cannot be taken or leaves no room to sample."""
        messages = normalise(messages)
        if self.trajectory is None:
            return self._start(messages)
        traj = self.trajectory
        extension = self._extension(messages)
        if extension is None:
            render = self.format.render_conversation(messages)
            self._check_window(render)
            self.conversation = messages
            traj.begin_step(render, "history_rewritten")
            return render
        self._observe(extension)
        stream = traj.prompt_ids + traj.response_ids
        if getattr(self.format, "renders_history", False):
            render = self.format.render_conversation(self.conversation)
            if render != stream:
                self._check_window(render)
                traj.begin_step(render, "history_rewritten")
                return render
        self._check_room()
        return stream

    def _start(self, messages: list[dict[str, Any]]) -> list[int]:
        ids = self.format.render_conversation(messages)
        prompt = PromptSpec(
            ids,
            data_source=str(self.task.get("data_source", "unknown")),
            ground_truth=self.task.get("ground_truth"),
            index=self.task.get("index"),
            extra_info=dict(self.task.get("extra_info") or {}),
            messages=messages,
        )
        self.trajectory = Trajectory(prompt=prompt, group_id=self.group_id, uid=self.uid)
        self.conversation = list(messages)
        self._check_room()
        return ids

    def _extension(self, messages: list[dict[str, Any]]) -> list[tuple[str, ToolMessage]] | None:
        """The tool messages (with the call ids they answer) that extend what the agent held, or
        None when the request does not extend it by tool messages alone."""
        sent = self.sent
        if sent is None or len(messages) <= len(sent.messages):
            return None
        if not all(_same(a, b) for a, b in zip(messages, sent.messages, strict=False)):
            return None
        new = messages[len(sent.messages) :]
        if any(m["role"] != "tool" for m in new):
            return None
        return [(m["tool_call_id"], ToolMessage(_name_of(sent, m), m["content"])) for m in new]

    def _observe(self, results: list[tuple[str, ToolMessage]]) -> None:
        """Append the tool messages as the format's observation (what the built-in loop writes);
        one that leaves the next turn no room ends the episode (``EpisodeError``) unappended."""
        traj, sent = self.trajectory, self.sent
        assert traj is not None and sent is not None
        messages = [m for _, m in results]
        obs = self.format.observation(
            messages,
            turn_closed=sent.turn_closed,
            final_turn=False,
            max_obs_length=self.budget.max_obs_length,
        )
        if obs.tokens_cut:
            traj.truncation.observations_cut += 1
            traj.truncation.observation_tokens_cut += obs.tokens_cut
        if len(obs.ids) >= self.room():
            self._refuse(f"the tool messages' {len(obs.ids)} tokens leave the next turn no room")
        traj.append(obs.ids, Segment.OBSERVATION)
        contents = obs.contents or tuple(m.content for m in messages)
        for (call_id, m), content in zip(results, contents, strict=True):
            status = sent.call_status.get(call_id)
            if status == "ok":
                traj.tool_calls[m.name] = traj.tool_calls.get(m.name, 0) + 1
                traj.tool_outputs.append((m.name, m.content))
            if status is not None:  # a message answering no call of the turn (a hint) logs no call
                name, arguments = sent.call_names[call_id], sent.call_arguments.get(call_id)
                traj.calls.append(CallRecord(sent.turn, name, arguments, status, content))
            self.conversation.append({"role": "tool", "name": m.name, "content": content})

    def room(self) -> int:
        """Tokens the next turn may sample: what the context window and the response budget leave."""
        traj, budget = self.trajectory, self.budget
        assert traj is not None
        response = len(traj.response_ids)
        context = budget.max_prompt_length + budget.max_response_length - len(traj.prompt_ids) - response
        return min(context, budget.max_response_length - response)

    def _check_room(self) -> None:
        if self.room() <= 0:
            self._refuse("no room is left to sample a turn")

    def _check_window(self, render: list[int]) -> None:
        if len(render) >= self.budget.max_prompt_length + self.budget.max_response_length:
            self._refuse(f"the conversation's render holds {len(render)} tokens")

    def _refuse(self, why: str) -> None:
        """Mark which budget ended the trajectory (as the built-in loop does) and refuse."""
        traj, budget = self.trajectory, self.budget
        assert traj is not None
        response = len(traj.response_ids)
        context = budget.max_prompt_length + budget.max_response_length - len(traj.prompt_ids) - response
        if context < budget.max_response_length - response:
            traj.truncation.context = True
        else:
            traj.truncation.response_budget = True
        window = budget.max_prompt_length + budget.max_response_length
        raise EpisodeError(
            f"{why} (context window {window} tokens = max_prompt_length + max_response_length; "
            f"response budget {budget.max_response_length})",
            code="context_length_exceeded",
        )

    # --- the reply ------------------------------------------------------------------

    def record(
        self, messages: list[dict[str, Any]], result: GenerationResult
    ) -> tuple[dict[str, Any], TurnParse]:
        """Record the sampled turn; returns the assistant message the agent is to read (``reply``)
        and what the format read in the turn."""
        traj = self.trajectory
        assert traj is not None
        ids = list(result.token_ids)
        traj.append(ids, Segment.MODEL, list(result.log_probs))
        turn = traj.num_turns
        traj.num_turns += 1
        traj.turn_rewards.append(0.0)
        if ids:
            traj.step_turns.append(turn)
            traj.step_turn_ends.append(len(traj.response_ids) - 1)
        traj.finish_reasons.append(result.finish_reason)
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        parse = self.format.parse(text, result.finish_reason, False)
        self.last_parse = parse
        canonical = self.format.assistant_message(text, parse)
        self.conversation.append(canonical)
        self._count(parse, traj)
        message = self.reply(turn, canonical, parse)
        names = {c["id"]: c["function"]["name"] for c in message.get("tool_calls", ())}
        names |= {c["id"]: c["name"] for c in message.get("invalid_calls", ())}
        arguments = {c["id"]: c["function"]["arguments"] for c in message.get("tool_calls", ())}
        status = {c["id"]: "ok" for c in message.get("tool_calls", ())}
        status |= {c["id"]: f"invalid/{c['reason']}" for c in message.get("invalid_calls", ())}
        closed = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        held = [*normalise(messages), normalise([message])[0]]
        self.sent = _Sent(held, names, arguments, status, turn, closed)
        return message, parse

    def reply(self, turn: int, canonical: dict[str, Any], parse: TurnParse) -> dict[str, Any]:
        """The assistant message for the agent: the turn's content as the rollout holds it, its
        well-formed calls as ``tool_calls`` (ids ``call_<turn>_<k>``, k the call's place in the
        turn), and two fields the API does not have, for an agent that answers as the built-in
        loop does: ``invalid_calls`` (each malformed call's id, name, reason and the error
        message the built-in loop sends) and ``invalid_turn`` (a turn that neither called nor
        answered: the built-in loop's hint). Tool messages answer both by id, in call order."""
        message: dict[str, Any] = {"role": "assistant", "content": canonical["content"]}
        if not parse.calls:
            if parse.answer is None and parse.invalid is not None:
                hint = self.format.invalid_turn_message(parse)
                message["invalid_turn"] = {"reason": parse.invalid, "message": hint.content}
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

    @staticmethod
    def _count(parse: TurnParse, traj: Trajectory) -> None:
        acted = parse.answer is not None or any(c.error is None for c in parse.calls)
        if acted:
            traj.num_valid_actions += 1
        else:
            traj.num_invalid_actions += 1
        for call in parse.calls:
            if call.error is not None:
                traj.tool_calls_invalid[call.error] = traj.tool_calls_invalid.get(call.error, 0) + 1
        if parse.invalid is not None and not parse.calls:
            traj.tool_calls_invalid[parse.invalid] = traj.tool_calls_invalid.get(parse.invalid, 0) + 1
        if parse.answer is not None:
            traj.finished = True
            traj.answer = parse.answer
