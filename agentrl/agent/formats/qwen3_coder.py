"""The ``qwen3_coder`` format: Qwen3-Coder's XML function calls in ``<tool_call>``, through a chat template.

The policy writes one or more calls per turn, each as

    <tool_call>
    <function=search>
    <parameter=query>
    capital of France
    </parameter>
    </function>
    </tool_call>

and ends the turn with the template's end-of-turn token, as in ``hermes``. Everything but the
call syntax is ``HermesFormat``'s (this class subclasses it): the prompt (the tools' schemas
through the template), the observation (the template's tool messages, results as
``<tool_response>`` in a user turn, and the next assistant header), truncation, the eos, the
answer rule. ``QWEN3_CODER_TEMPLATE`` is our ChatML template for it (``chat_template=qwen3_coder``).

A parameter's value is text. It is converted by the type the tool's JSON Schema gives it:
``string`` (or no type) keeps the text, less one leading and one trailing newline; ``integer``,
``number``, ``boolean``, ``object``, ``array`` and ``null`` parse it as JSON and must get that
kind; a list of types takes the first non-string kind the JSON is, else the text if ``string``
is listed. Parameters the schema does not name are kept as text (the schema check says if
they are allowed).

Malformed calls get the closed list of ``MalformedReason`` that ``hermes`` gives, mapped:

- ``invalid_json``: the body is not XML function syntax: it does not open with
  ``<function=``, the header is never closed with ``>``, ``</function>`` or a
  ``</parameter>`` is missing, or text stands outside the ``<parameter=…>`` blocks (the
  analogue of a body that is not JSON, e.g. a hermes-style JSON call);
- ``not_an_object``: several ``<function=…>`` blocks in one ``<tool_call>`` (one call per
  block, as a JSON list is not one call object);
- ``missing_name``: ``<function>`` or ``<function=>``, no name;
- ``unknown_tool``: a name no tool has (with a did-you-mean, as in ``hermes``);
- ``bad_arguments``: a parameter without a name, one given twice, or a value that fails its
  type's conversion;
- ``truncated`` / ``unclosed``: a ``<tool_call>`` never closed, cut by the budget or not;
- ``empty``: a ``<tool_call>`` with nothing in it; ``no_action``: neither a call nor an answer.

Calls inside ``<think>…</think>`` are not calls: a model reasons about the call it will make,
and vLLM's Qwen3 parsers read calls only outside the reasoning. Text before a first
``</think>`` with no ``<think>`` before it is thinking too (the template's header may open the
block), and so is an unclosed ``<think>`` to the turn's end: the rule of ``hermes``, whose
parser this class keeps (``hermes.without_thinking``).
The answer is read from the whole turn, by the rule the reward and the evaluator share.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from agentrl.agent.formats.base import FormatError, MalformedReason, ParsedCall, ToolMessage, TurnParse
from agentrl.agent.formats.hermes import CALL_OPEN, HermesFormat
from agentrl.agent.formats.templates import (
    PLACEHOLDER,
    PROBE_TOOL,
    PROBE_USER,
    assistant_message,
    probe_spec_json,
)
from agentrl.tool_identity import QWEN3_CODER
from agentrl.tools.spec import ToolSpec

FUNCTION_OPEN, FUNCTION_CLOSE = "<function", "</function>"
PARAMETER_OPEN, PARAMETER_CLOSE = "<parameter=", "</parameter>"
# A name ends at the tag's ">" on its own line: a newline first means the tag was never closed.
_FUNCTION = re.compile(r"<function(?:=([^>\n]*))?>")
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>")

CALL_SHAPE = (
    "<tool_call>\n<function=TOOL_NAME>\n<parameter=ARGUMENT>\nVALUE\n</parameter>\n"
    "...\n</function>\n</tool_call>"
)
INVALID_TURN_HINT = (
    "My previous turn neither called a tool nor answered. To call a tool I must write "
    f"{CALL_SHAPE}; to finish I must put the final answer between <answer> and </answer>."
)

_INSTRUCTIONS = (
    "To call a function, write its name and each parameter inside <tool_call></tool_call>, one call per "
    "block; several blocks may follow one another:\\n<tool_call>\\n<function=FUNCTION_NAME>\\n"
    "<parameter=PARAMETER_NAME>\\nvalue\\n</parameter>\\n<parameter=ANOTHER_PARAMETER>\\na value may span\\n"
    "several lines\\n</parameter>\\n</function>\\n</tool_call>\\nWrite a value as plain text, and a number, "
    "boolean, object or array as JSON. The results come back inside <tool_response></tool_response>."
)
# ChatML, like HERMES_TEMPLATE: the tools' schemas as XML in the system turn, an assistant's calls in
# the XML form after its text (its content verbatim, so a sampled turn renders as it was sampled), and
# consecutive tool messages as <tool_response> blocks in one user turn.
QWEN3_CODER_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- 'You can call the functions below, each described inside <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}"
    "{%- set fn = tool.function if tool.function is defined else tool %}"
    "{{- '\\n<function>\\n<name>' + fn.name + '</name>' }}"
    "{%- if fn.description %}{{- '\\n<description>' + fn.description + '</description>' }}{%- endif %}"
    "{%- set params = fn.parameters if fn.parameters is mapping else {} %}"
    "{{- '\\n<parameters>' }}"
    "{%- for pname, pschema in (params.properties if params.properties is mapping else {}) | items %}"
    "{{- '\\n<parameter>\\n<name>' + pname + '</name>' }}"
    "{%- for key, value in (pschema if pschema is mapping else {}) | items %}"
    "{%- set text = value if value is string else value | tojson %}"
    "{{- '\\n<' + key + '>' + text + '</' + key + '>' }}"
    "{%- endfor %}"
    "{{- '\\n</parameter>' }}"
    "{%- endfor %}"
    "{{- '\\n</parameters>' }}"
    "{%- if params.required %}{{- '\\n<required>' + (params.required | tojson) + '</required>' }}{%- endif %}"
    "{{- '\\n</function>' }}"
    "{%- endfor %}"
    "{{- '\\n</tools>\\n\\n" + _INSTRUCTIONS + "<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- set fn = call.function if call.function is defined else call %}"
    "{%- if fn.arguments is string %}"
    "{{- raise_exception('qwen3_coder renders a call whose arguments are an object, not JSON text') }}"
    "{%- endif %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n<function=' + fn.name + '>\\n' }}"
    "{%- for name, value in (fn.arguments or {}) | items %}"
    "{%- set text = value if value is string else value | tojson %}"
    "{{- '<parameter=' + name + '>\\n' + text + '\\n</parameter>\\n' }}"
    "{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user\\n' }}{%- endif %}"
    "{{- '<tool_response>\\n' + message.content + '\\n</tool_response>\\n' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# HermesFormat's start-up refusals name its own template; here they name this format's.
_RETARGET = (
    ("actor.rollout.chat_template=hermes", "actor.rollout.chat_template=qwen3_coder"),
    ("agentrl/agent/formats/templates.py", "agentrl/agent/formats/qwen3_coder.py"),
    ("Hermes-style template", "Qwen3-Coder-style template"),
    ("the hermes format", "the qwen3_coder format"),
)

_JSON_KINDS: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}
_NOT_JSON = object()


def schema_types(spec: ToolSpec) -> dict[str, tuple[str, ...]]:
    """Each parameter's JSON-Schema type(s), as named in ``spec``; () where the schema gives none."""
    properties = spec.parameters.get("properties")
    types: dict[str, tuple[str, ...]] = {}
    for name, schema in (properties if isinstance(properties, dict) else {}).items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
        types[name] = tuple(k for k in kinds if isinstance(k, str))
    return types


def _is_kind(value: Any, kind: str) -> bool:
    if isinstance(value, bool):  # JSON's true and false are no numbers, though Python's bool is an int
        return kind == "boolean"
    return isinstance(value, _JSON_KINDS[kind])


def convert_value(text: str, types: tuple[str, ...]) -> Any:
    """``text`` as its type(s) give it (see the module docstring); raises ``ValueError`` if it fails."""
    others = [t for t in types if t != "string" and t in _JSON_KINDS]
    if not others:
        return text  # a string, or a type this format cannot convert to: the schema check judges it
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # deep nesting gives up with a RecursionError
        value = _NOT_JSON
    for kind in others:
        if _is_kind(value, kind):
            return value
    if "string" in types:
        return text
    shown = text if len(text) <= 40 else text[:37] + "..."
    raise ValueError(f"must be {' or '.join(others)} written as JSON, got {shown!r}")


def _malformed(reason: MalformedReason, detail: str, name: str | None = None) -> ParsedCall:
    return ParsedCall(name, None, reason, detail)


def _syntax(detail: str) -> ParsedCall:
    return _malformed("invalid_json", f"the call is not well-formed XML function syntax: {detail}")


class Qwen3CoderFormat(HermesFormat):
    """Qwen3-Coder's XML tool calls through a chat template (see the module docstring)."""

    traits = QWEN3_CODER  # what the format does, as the code outside formats/ asks it
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
        """HermesFormat's checks, and that the template writes an assistant's calls as ``<function=…>``.

        ``template``: a chat template to use instead of the tokenizer's own
        (``QWEN3_CODER_TEMPLATE`` when ``chat_template=qwen3_coder``).
        """
        try:
            super().__init__(
                tokenizer,
                specs,
                template=template,
                keep_thinking=keep_thinking,
                enable_thinking=enable_thinking,
                max_obs_length=max_obs_length,
            )
        except FormatError as exc:
            message = str(exc)
            for hermes_text, own_text in _RETARGET:
                message = message.replace(hermes_text, own_text)
            raise FormatError(message) from exc
        turn = [{"role": "user", "content": PROBE_USER}, assistant_message(PLACEHOLDER, [PROBE_TOOL])]
        text = self.chat.try_render(turn, "an assistant turn with a tool call", tools=[probe_spec_json()])
        if f"<function={PROBE_TOOL}>" not in text:
            # a template for another dialect would show the policy calls this parser never reads
            raise FormatError(
                "the chat template does not render an assistant's tool calls as <function=NAME> blocks; "
                "set actor.rollout.chat_template=qwen3_coder to use the Qwen3-Coder-style template"
            )
        self.types = {spec.name: schema_types(spec) for spec in self.specs}

    # --- the parser -------------------------------------------------------------------

    def _call(self, body: str) -> ParsedCall:
        """One ``<tool_call>`` body: syntax first, then the name, then the arguments (as ``hermes``)."""
        body = body.strip()
        if not body:
            return _malformed("empty", f"empty {CALL_OPEN}: write {CALL_SHAPE}")
        if not body.startswith(FUNCTION_OPEN):
            return _syntax(f"it must open with <function=TOOL_NAME>, got {body[:30]!r}; write {CALL_SHAPE}")
        header = _FUNCTION.match(body)
        if header is None:
            return _syntax(f"{body[:30]!r} is not a <function=TOOL_NAME> tag closed with >")
        parameters, pos = [], header.end()
        while True:
            pos = len(body) - len(body[pos:].lstrip())
            if body.startswith(FUNCTION_CLOSE, pos):
                pos += len(FUNCTION_CLOSE)
                break
            if pos >= len(body):
                return _syntax(f"<function=…> is never closed with {FUNCTION_CLOSE}")
            if not body.startswith(PARAMETER_OPEN, pos):
                return _syntax(f"text outside a <parameter=…> block: {body[pos : pos + 30]!r}")
            tag = _PARAMETER.match(body, pos)
            if tag is None:
                return _syntax(f"{body[pos : pos + 30]!r} is not a <parameter=NAME> tag closed with >")
            value_end = body.find(PARAMETER_CLOSE, tag.end())
            if value_end < 0:
                return _syntax(f"{tag.group(0)!r} is never closed with {PARAMETER_CLOSE}")
            value = body[tag.end() : value_end]
            value = value[1:] if value.startswith("\n") else value  # the one newline the layout adds
            value = value[:-1] if value.endswith("\n") else value
            parameters.append((tag.group(1).strip(), value))
            pos = value_end + len(PARAMETER_CLOSE)
        if body[pos:].strip():
            if body[pos:].lstrip().startswith(FUNCTION_OPEN):
                return _malformed(
                    "not_an_object", f"one {CALL_OPEN} holds one <function=…> block; write one call per block"
                )
            return _syntax(f"text after {FUNCTION_CLOSE}: {body[pos:].strip()[:30]!r}")
        name = (header.group(1) or "").strip()
        if not name:
            return _malformed("missing_name", "the call has no tool name: write <function=TOOL_NAME>")
        if name not in self.tool_names:
            close = difflib.get_close_matches(name, self.tool_names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return _malformed(
                "unknown_tool",
                f"unknown tool {name!r}{hint}; the tools are {', '.join(self.tool_names)}",
                name,
            )
        return self._arguments(name, parameters)

    def _arguments(self, name: str, parameters: list[tuple[str, str]]) -> ParsedCall:
        arguments: dict[str, Any] = {}
        types = self.types[name]
        for key, text in parameters:
            if not key:
                return _malformed("bad_arguments", f"a parameter of {name!r} has no name", name)
            if key in arguments:
                return _malformed("bad_arguments", f"parameter {key!r} of {name!r} is given twice", name)
            try:
                arguments[key] = convert_value(text, types.get(key, ()))
            except ValueError as exc:
                return _malformed("bad_arguments", f"parameter {key!r} of {name!r} {exc}", name)
        return ParsedCall(name, arguments)

    def invalid_turn_message(self, parse: TurnParse) -> ToolMessage:
        return ToolMessage("", INVALID_TURN_HINT)
