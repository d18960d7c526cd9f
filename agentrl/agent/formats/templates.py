"""Chat templates for tool calls: the Hermes-style template written here, and the start-up checks.

``HERMES_TEMPLATE`` is a ChatML template (``<|im_start|>``/``<|im_end|>``) that renders the
tools' schemas as JSON inside ``<tools>…</tools>`` in the system turn, an assistant's calls as
``<tool_call>{"name": …, "arguments": …}</tool_call>`` after its text, and tool messages as
``<tool_response>…</tool_response>`` in one ``tool`` turn. It is for tokenizers whose own
template cannot render tools (SmolLM2's, the tiny models'), and is used only when chosen
(``actor.rollout.chat_template=hermes``), never as a silent fallback.

``ChatRenderer`` renders conversations with one template and its keyword arguments
(``enable_thinking`` passes through to a template that reads it). The checks run once per
tokenizer when a format is built: the template renders ``tools=``
(``check_renders_tools``), an assistant turn ends with the eos token (``end_of_turn``), and
rendering a longer conversation does not rewrite the turns before it
(``earlier_turns_rewritten``), which Qwen3-style templates do to earlier ``<think>`` blocks:
such a template makes the rollout re-render the conversation before each turn (a new step
when the render does not extend the tokens before it), unless ``keep_thinking``.
"""

from __future__ import annotations

from typing import Any, get_args

from agentrl.agent.formats.base import FormatError
from agentrl.config.schema import ChatTemplate

CHAT_TEMPLATES: tuple[str, ...] = get_args(ChatTemplate)

HERMES_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- 'You can call the functions below. Each is described by a JSON object inside <tools></tools>:"
    "\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a function, write one JSON object with its name and arguments inside "
    "<tool_call></tool_call>; several calls may follow one another:\\n<tool_call>\\n"
    '{"name": <function-name>, "arguments": <arguments-object>}\\n</tool_call>\\n'
    "Their results come back inside <tool_response></tool_response>.<|im_end|>\\n' }}"
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
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + fn.name + \'", "arguments": \' }}'
    "{%- if fn.arguments is string %}{{- fn.arguments }}{%- else %}{{- fn.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>tool' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Probe texts: unlikely in any template, so finding them in a render locates a message.
PROBE_USER = "agentrl-probe-question"
PROBE_TOOL = "agentrl_probe_tool"
PROBE_RESULT = "agentrl-probe-result"
PLACEHOLDER = "agentrl-probe-turn"


def probe_spec_json() -> dict[str, Any]:
    """An OpenAI-format tool schema whose name a template that renders tools must show."""
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    return {
        "type": "function",
        "function": {"name": PROBE_TOOL, "description": "A probe.", "parameters": parameters},
    }


def assistant_message(content: str, call_names: list[str]) -> dict[str, Any]:
    """An assistant message with one (empty-argument) call per name, as templates read them."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if call_names:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": {}}}
            for i, name in enumerate(call_names)
        ]
    return message


def tool_messages(names: list[str], contents: list[str]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "name": name, "tool_call_id": f"call_{i}", "content": content}
        for i, (name, content) in enumerate(zip(names, contents, strict=True))
    ]


class ChatRenderer:
    """Renders conversations with one chat template (the tokenizer's own, or one given)."""

    def __init__(self, tokenizer: Any, template: str | None = None, enable_thinking: bool | None = None):
        self.tokenizer = tokenizer
        self.template = template
        source = template if template is not None else getattr(tokenizer, "chat_template", None)
        if not source:
            raise FormatError(
                "the tokenizer has no chat template, so tools cannot reach the prompt; set "
                "actor.rollout.chat_template=hermes to use the Hermes-style template"
            )
        if not isinstance(source, str):  # a dict of named templates: the default one renders
            source = source.get("default") or next(iter(source.values()))
        self.source: str = source
        self.kwargs: dict[str, Any] = {}
        if enable_thinking is not None:
            if "enable_thinking" not in source:
                raise FormatError(
                    f"actor.rollout.enable_thinking={str(enable_thinking).lower()} is set but the chat "
                    "template does not read enable_thinking; leave it unset (null) for this template"
                )
            self.kwargs["enable_thinking"] = enable_thinking

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            chat_template=self.template,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **self.kwargs,
        )

    def try_render(self, messages: list[dict[str, Any]], what: str, **kwargs: Any) -> str:
        """``render``, with a template's own failure reported as a ``FormatError`` naming ``what``."""
        try:
            return self.render(messages, **kwargs)
        except Exception as exc:  # a template's raise_exception() or a Jinja error
            raise FormatError(
                f"the chat template failed to render {what}: {type(exc).__name__}: {exc}; "
                "set actor.rollout.chat_template=hermes to use the Hermes-style template"
            ) from exc


def check_renders_tools(chat: ChatRenderer) -> None:
    """Refuse a template that ignores ``tools=``: the schemas would never reach the prompt."""
    user = [{"role": "user", "content": PROBE_USER}]
    text = chat.try_render(user, "a prompt with tools", tools=[probe_spec_json()], add_generation_prompt=True)
    if PROBE_TOOL not in text:
        raise FormatError(
            "the tokenizer's chat template does not render tools= (the tools' schemas would never reach "
            "the prompt); set actor.rollout.chat_template=hermes to use the Hermes-style template "
            "written in agentrl/agent/formats/templates.py"
        )


def end_of_turn(chat: ChatRenderer) -> str:
    """The text that ends an assistant turn: the eos token, checked to follow the turn's content."""
    tokenizer = chat.tokenizer
    eos = getattr(tokenizer, "eos_token", None)
    if not eos or tokenizer.eos_token_id is None:
        raise FormatError("the hermes format needs a tokenizer with an eos token (it ends each turn)")
    messages = [{"role": "user", "content": PROBE_USER}, assistant_message(PLACEHOLDER, [PROBE_TOOL])]
    text = chat.try_render(messages, "an assistant turn with a tool call", tools=[probe_spec_json()])
    start = text.find(PLACEHOLDER)
    if start < 0 or eos not in text[start:]:
        raise FormatError(
            f"the chat template does not end an assistant turn with the eos token {eos!r}, where the "
            "engine stops a turn; set actor.rollout.chat_template=hermes or use a tokenizer whose eos ends "
            "the assistant turn"
        )
    if list(tokenizer.encode(eos, add_special_tokens=False)) != [tokenizer.eos_token_id]:
        raise FormatError(f"the eos token {eos!r} does not encode to the one eos id")
    return eos


def _first_difference(a: str, b: str) -> str:
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"at character {i}: {a[max(0, i - 20) : i + 30]!r} becomes {b[max(0, i - 20) : i + 30]!r}"


def earlier_turns_rewritten(chat: ChatRenderer, eot: str) -> str | None:
    """How the template rewrites the turns before the last one, or None when it keeps them.

    A trajectory's tokens are the generation prompt, the sampled turn, the observation, the
    next sampled turn, …; they match the template's render of the whole conversation only if
    each turn, once rendered, stays as it was (the 1-turn render is a prefix of the 2-turn
    one). Probed with a plain turn and with one that thinks (``<think>…</think>``).
    """
    user = [{"role": "user", "content": PROBE_USER}]
    tools = [probe_spec_json()]
    prompt = chat.try_render(user, "the generation prompt", tools=tools, add_generation_prompt=True)
    for label, content in (
        ("a plain turn", PLACEHOLDER),
        ("a turn with <think>", f"<think>\nagentrl-probe-reasoning\n</think>\n\n{PLACEHOLDER}"),
    ):
        first = [*user, assistant_message(content, [PROBE_TOOL])]
        whole = [*first, *tool_messages([PROBE_TOOL], [PROBE_RESULT]), assistant_message(PLACEHOLDER, [])]
        one = chat.try_render(first, "a one-turn conversation", tools=tools)
        two = chat.try_render(whole, "a two-turn conversation", tools=tools)
        at = one.find(PLACEHOLDER)
        turn_end = one.find(eot, at) + len(eot) if at >= 0 and eot in one[at:] else len(one)
        one_turn = one[:turn_end]
        if not one.startswith(prompt):
            return f"the generation prompt is not how it renders {label} ({_first_difference(prompt, one)})"
        if not two.startswith(one_turn):
            return f"{label} renders differently once a turn follows it ({_first_difference(one_turn, two)})"
    return None
