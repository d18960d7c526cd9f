"""The ``hermes`` format: JSON calls in ``<tool_call>`` tags, results as the chat template's tool messages.

The policy writes ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``, one or more per
turn, and ends the turn with the template's end-of-turn token (the eos, e.g. ``<|im_end|>``,
which the engine stops at and which is a sampled, trained token). The tools' schemas reach
the prompt through the template (``apply_chat_template(..., tools=...)``).

Calls inside ``<think>…</think>`` are not calls: a model reasons about the call it will make,
and vLLM's Qwen3 parsers read calls only outside the reasoning. Text before a first
``</think>`` with no ``<think>`` before it is thinking too (the template's header may open the
block), and so is an unclosed ``<think>`` to the turn's end (``without_thinking``).

The answer rule (shared with ``tags``, the reward and the evaluator): a turn that makes no
tool call answers with the body of its ``<answer>…</answer>`` (``actions.parse_action``:
the first ``</answer>`` and the nearest ``<answer>`` before it, stripped, not empty).

Token-exactness: the observation is exactly the text the template adds after an assistant
turn for the tool messages and the next assistant header. It is found by rendering a
conversation whose assistant turn has placeholder content, with the tool messages and the
generation prompt, and taking what follows the placeholder turn's end-of-turn token; that
text starts at a special token, so tokenizing it alone gives the ids the whole render has.
A turn cut before its end-of-turn token gets that token at the observation's start.

A template that rewrites earlier turns (Qwen3's drops an earlier turn's empty ``<think>``)
sets ``renders_history`` (``history_rewrite`` says how it rewrites): the rollout then renders
the conversation before each turn (``render_conversation``, each sampled turn as an assistant
message by ``assistant_message``) and continues as a new step where the render does not
extend the tokens before it. ``keep_thinking`` keeps such a template append-only instead.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from agentrl.agent.actions import parse_action
from agentrl.agent.formats.base import FormatError, MalformedReason, ParsedCall, ToolMessage, TurnParse
from agentrl.agent.formats.templates import (
    PLACEHOLDER,
    PROBE_RESULT,
    PROBE_TOOL,
    PROBE_USER,
    ChatRenderer,
    assistant_message,
    check_renders_tools,
    earlier_turns_rewritten,
    end_of_turn,
    tool_messages,
)
from agentrl.agent.observations import FINAL_TURN_NOTE, Observation, encode_text
from agentrl.tool_identity import HERMES
from agentrl.tools.spec import ToolSpec

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_THINK = re.compile(re.escape(THINK_OPEN) + ".*?" + re.escape(THINK_CLOSE), re.DOTALL)
_CALL = re.compile(re.escape(CALL_OPEN) + "(.*?)" + re.escape(CALL_CLOSE), re.DOTALL)
CALL_SHAPE = '<tool_call>{"name": <tool name>, "arguments": {<argument>: <value>, ...}}</tool_call>'

INVALID_TURN_HINT = (
    "My previous turn neither called a tool nor answered. To call a tool I must write "
    f"{CALL_SHAPE}; to finish I must put the final answer between <answer> and </answer>."
)


def without_thinking(text: str) -> str:
    """``text`` less its thinking: ``<think>…</think>`` blocks, a leading ``…</think>`` whose
    ``<think>`` the header wrote, and an unclosed ``<think>`` to the end."""
    first_close, first_open = text.find(THINK_CLOSE), text.find(THINK_OPEN)
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        text = text[first_close + len(THINK_CLOSE) :]
    text = _THINK.sub("", text)
    unclosed = text.find(THINK_OPEN)
    return text if unclosed < 0 else text[:unclosed]


def first_call_outside_thinking(text: str) -> int:
    """Where the first ``<tool_call>`` outside the thinking opens (``without_thinking``'s rule), or
    ``len(text)`` when none does."""
    first_close, first_open = text.find(THINK_CLOSE), text.find(THINK_OPEN)
    header_open = first_close >= 0 and (first_open < 0 or first_close < first_open)
    start = first_close + len(THINK_CLOSE) if header_open else 0
    for match in re.finditer(re.escape(CALL_OPEN), text):
        at = match.start()
        if at < start:
            continue
        before = text[start:at]
        if before.count(THINK_OPEN) <= before.count(THINK_CLOSE):
            return at
    return len(text)


def _json_kind(value: Any) -> str:
    kinds = {list: "list", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _malformed(reason: MalformedReason, detail: str, name: str | None = None) -> ParsedCall:
    return ParsedCall(name, None, reason, detail)


class HermesFormat:
    """Hermes-style tool calls through a chat template (see the module docstring)."""

    traits = HERMES  # what the format does, as the code outside formats/ asks it
    name = traits.name

    def __init__(
        self,
        tokenizer: Any,
        specs: list[ToolSpec],
        *,
        template: str | None = None,
        keep_thinking: bool = False,
        enable_thinking: bool | None = None,
        max_obs_length: int | None = None,
    ) -> None:
        """Checks the template once: it renders tools, ends a turn at eos, and whether it keeps
        earlier turns (``renders_history`` when it does not, unless ``keep_thinking``).

        ``template``: a chat template to use instead of the tokenizer's own (``HERMES_TEMPLATE``
        when ``chat_template=hermes``). ``keep_thinking`` plays a template that rewrites earlier
        turns append-only, as sampled. ``max_obs_length``, when given, is checked to leave room
        for content.
        """
        self.tokenizer = tokenizer
        self.specs = tuple(specs)
        self.tool_names = tuple(s.name for s in self.specs)
        self.chat = ChatRenderer(tokenizer, template, enable_thinking)
        check_renders_tools(self.chat)
        self.end_of_turn = end_of_turn(self.chat)
        self.history_rewrite = earlier_turns_rewritten(self.chat, self.end_of_turn)
        self.renders_history = self.history_rewrite is not None and not keep_thinking
        probe = self._delta([PROBE_TOOL], [PROBE_RESULT])
        if PROBE_RESULT not in probe:
            raise FormatError(
                "the chat template does not render tool messages after an assistant turn; "
                "set actor.rollout.chat_template=hermes to use the Hermes-style template"
            )
        if max_obs_length is not None:
            fixed = len(self._ids([""], [""], "\n" + FINAL_TURN_NOTE, turn_closed=False))
            if max_obs_length <= fixed:
                raise FormatError(
                    f"actor.rollout.max_obs_length ({max_obs_length}) must exceed the {fixed} tokens the "
                    "template adds around one tool message (with the final-turn note)"
                )

    # --- the prompt -------------------------------------------------------------------

    def prompt_ids(self, messages: list[dict[str, Any]], specs: list[ToolSpec]) -> list[int]:
        """The template's render with the tools' schemas and the generation prompt, as ids."""
        tools = [s.to_openai() for s in specs]
        text = self.chat.render(list(messages), tools=tools, add_generation_prompt=True)
        return encode_text(self.tokenizer, text)

    def render_conversation(self, messages: list[dict[str, Any]]) -> list[int]:
        """The ids of a whole conversation as the template renders it, up to the next assistant turn."""
        return self.prompt_ids(messages, list(self.specs))

    def assistant_message(self, turn_text: str, parse: TurnParse) -> dict[str, Any]:
        """A sampled turn as the chat message a client would send back: its text before the first
        call, and its well-formed calls as ``tool_calls`` (a turn with a malformed call, or an
        answer, keeps its whole text as content). Thinking stays in the content, where the
        template finds and keeps or drops it."""
        text = turn_text[: -len(self.end_of_turn)] if turn_text.endswith(self.end_of_turn) else turn_text
        good = parse.calls and all(c.error is None for c in parse.calls)
        if not good:
            return {"role": "assistant", "content": text}
        content = text[: first_call_outside_thinking(text)]
        content = content[:-1] if content.endswith("\n") else content  # the template writes this one
        calls = [
            {"id": f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for i, c in enumerate(parse.calls)
        ]
        return {"role": "assistant", "content": content, "tool_calls": calls}

    def turn_stops(self, final_turn: bool) -> tuple[str, ...]:
        return ()  # a turn ends at the end-of-turn token, which the engine stops at as eos

    # --- the parser -------------------------------------------------------------------

    def parse(self, turn_text: str, finish_reason: str, final_turn: bool) -> TurnParse:
        """The turn's calls outside its thinking, in order; with none (or on the final turn), its
        answer or why not."""
        if final_turn:
            return self._answer(turn_text, finish_reason)
        visible = without_thinking(turn_text)
        calls = [self._call(m.group(1)) for m in _CALL.finditer(visible)]
        last_close = visible.rfind(CALL_CLOSE)
        rest = visible[last_close + len(CALL_CLOSE) :] if last_close >= 0 else visible
        if CALL_OPEN in rest:
            if finish_reason == "length":
                calls.append(
                    _malformed("truncated", f"the call was cut by the token budget before {CALL_CLOSE}")
                )
            else:
                calls.append(_malformed("unclosed", f"{CALL_OPEN} was never closed with {CALL_CLOSE}"))
        if calls:
            return TurnParse(calls=tuple(calls))
        return self._answer(turn_text, finish_reason)

    def _answer(self, text: str, finish_reason: str) -> TurnParse:
        action = parse_action(text, ())
        if action.kind == "answer":
            return TurnParse(answer=action.content)
        if action.tag is not None:  # answer tags that hold no answer: empty, or a close without an open
            empty = (action.reason or "").startswith("empty")
            return TurnParse(invalid="empty" if empty else "no_action", detail=action.reason or "")
        if finish_reason == "length":
            return TurnParse(invalid="truncated", detail="the turn was cut by the token budget")
        return TurnParse(invalid="no_action", detail="the turn neither calls a tool nor answers")

    def _call(self, body: str) -> ParsedCall:
        body = body.strip()
        if not body:
            return _malformed("empty", f"empty {CALL_OPEN}: write {CALL_SHAPE}")
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            return _malformed(
                "invalid_json", f"the call is not valid JSON ({exc.msg} at character {exc.pos})"
            )
        except RecursionError:  # json's decoder gives up on deep nesting with this, not a JSONDecodeError
            return _malformed("invalid_json", "the call is not valid JSON (it nests too deeply)")
        if not isinstance(obj, dict):
            return _malformed("not_an_object", f"the call must be one JSON object, got a {_json_kind(obj)}")
        name = obj.get("name")
        if name is None:
            return _malformed("missing_name", 'the call has no "name"')
        if not isinstance(name, str):
            return _malformed(
                "missing_name", f'the call\'s "name" must be a string, got a {_json_kind(name)}'
            )
        if name not in self.tool_names:
            close = difflib.get_close_matches(name, self.tool_names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return _malformed(
                "unknown_tool",
                f"unknown tool {name!r}{hint}; the tools are {', '.join(self.tool_names)}",
                name,
            )
        arguments = obj.get("arguments", {})  # absent: none given (the schema says if some are required)
        if not isinstance(arguments, dict):
            return _malformed(
                "bad_arguments",
                f'"arguments" of {name!r} must be a JSON object, got a {_json_kind(arguments)}',
                name,
            )
        return ParsedCall(name, arguments)

    def invalid_turn_message(self, parse: TurnParse) -> ToolMessage:
        return ToolMessage("", INVALID_TURN_HINT)

    def call_error_message(self, call: ParsedCall) -> ToolMessage:
        return ToolMessage(call.name or "", f"Error: {call.detail or call.error}")

    # --- the renderer -----------------------------------------------------------------

    def _delta(self, names: list[str], contents: list[str]) -> str:
        """The text the template adds after an assistant turn's end for these tool messages."""
        head = [{"role": "user", "content": PROBE_USER}, assistant_message(PLACEHOLDER, names)]
        tools = [s.to_openai() for s in self.specs]
        text = self.chat.try_render(
            [*head, *tool_messages(names, contents)], "tool messages", tools=tools, add_generation_prompt=True
        )
        start = text.index(PLACEHOLDER)
        return text[text.index(self.end_of_turn, start) + len(self.end_of_turn) :]

    def _ids(self, names: list[str], contents: list[str], note: str, turn_closed: bool) -> list[int]:
        contents = [*contents[:-1], contents[-1] + note] if contents else contents
        text = self._delta(names, contents)
        return encode_text(self.tokenizer, text if turn_closed else self.end_of_turn + text)

    def observation(
        self, results: list[ToolMessage], *, turn_closed: bool, final_turn: bool, max_obs_length: int
    ) -> Observation:
        """The tool messages and the next assistant header as the template renders them.

        Over ``max_obs_length`` tokens, each message's content is cut (fair shares of the
        room the template's own tokens leave, the final-turn note kept whole) and the
        messages are rendered again; ``tokens_cut`` counts the content tokens dropped.
        """
        if not results:
            raise ValueError("an observation needs at least one tool message")
        names = [m.name for m in results]
        contents = [m.content for m in results]
        note = "\n" + FINAL_TURN_NOTE if final_turn else ""
        ids = self._ids(names, contents, note, turn_closed)
        if len(ids) <= max_obs_length:
            return Observation(ids, 0, _read(contents, note))
        tokens = [encode_text(self.tokenizer, c) for c in contents]
        fixed = len(self._ids(names, [""] * len(contents), note, turn_closed))
        keep = fair_shares([len(t) for t in tokens], max(0, max_obs_length - fixed))
        for _ in range(16):  # re-tokenizing a cut text can merge differently; shrink until it fits
            cut = [
                self.tokenizer.decode(t[:k], skip_special_tokens=False)
                for t, k in zip(tokens, keep, strict=True)
            ]
            ids = self._ids(names, cut, note, turn_closed)
            over = len(ids) - max_obs_length
            if over <= 0 or sum(keep) == 0:
                break
            keep = fair_shares(keep, max(0, sum(keep) - over))
        return Observation(ids, sum(len(t) - k for t, k in zip(tokens, keep, strict=True)), _read(cut, note))


def _read(contents: list[str], note: str) -> tuple[str, ...]:
    """The contents as rendered: the final-turn note on the last one (as ``_ids`` puts it)."""
    return (*contents[:-1], contents[-1] + note) if contents else ()


def fair_shares(lengths: list[int], budget: int) -> list[int]:
    """How many tokens each message keeps: an equal share of ``budget``, unused shares passed on."""
    keep = [0] * len(lengths)
    remaining = budget
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for position, i in enumerate(order):
        keep[i] = min(lengths[i], remaining // (len(lengths) - position))
        remaining -= keep[i]
    return keep
