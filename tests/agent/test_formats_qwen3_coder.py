"""The ``qwen3_coder`` format on the tiny tokenizer with the project's Qwen3-Coder-style template.

Token-exactness: a trajectory's ids (prompt, sampled turns, observations) decode to what the
template renders for the whole conversation. Parsing: XML calls in order, values converted by
their schema types, malformed calls as the reasons ``hermes`` gives, never an exception; calls
inside ``<think>`` are no calls. Start-up: built from a ``RolloutConfig``, mismatches refused by name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.tool_conversations import SPECS, THREE_TURNS, Turn, assert_plays_as_rendered

from agentrl.agent.formats import (
    HERMES_TEMPLATE,
    MALFORMED_REASONS,
    QWEN3_CODER_TEMPLATE,
    FormatError,
    ParsedCall,
    Qwen3CoderFormat,
    ToolMessage,
    TurnParse,
    build_format,
)
from agentrl.agent.formats import qwen3_coder as module
from agentrl.agent.observations import FINAL_TURN_NOTE
from agentrl.config.schema import RolloutConfig
from agentrl.data.instruction import DEFAULT_TOOLS, instruction_template
from agentrl.models.tiny import DEFAULT_TEXTS, train_tokenizer
from agentrl.tool_identity import FORMAT_TRAITS, HERMES
from agentrl.tools.spec import ToolSpec

# A tool with a parameter of every JSON type the conversion knows, for typed arguments.
LOOKUP = ToolSpec(
    "lookup",
    "Look a record up.",
    {
        "type": "object",
        "properties": {
            "key": {"type": "string", "description": "The record's key."},
            "limit": {"type": "integer"},
            "scale": {"type": "number"},
            "exact": {"type": "boolean"},
            "filters": {"type": "object"},
            "fields": {"type": "array", "items": {"type": "string"}},
            "page": {"type": ["integer", "null"]},
            "label": {"type": ["integer", "string"]},
        },
        "required": ["key"],
    },
)


def xml_call(name: str, arguments: dict[str, Any]) -> str:
    """One call as the template renders it (and a policy writes it): text as is, the rest as JSON."""
    parameters = "".join(
        f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
        "\n</parameter>\n"
        for key, value in arguments.items()
    )
    return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"


class XmlTurn(Turn):
    """A ``Turn`` whose calls the policy writes in the XML form (the support helper writes JSON)."""

    def text(self, eot: str, header_has: str = "") -> str:
        blocks = [xml_call(n, a) for n, a in self.calls]
        body = self.content + ("\n" if self.content and blocks else "") + "\n".join(blocks)
        assert body.startswith(header_has), "the header's text must open the turn"
        return body[len(header_has) :] + eot


XML_THREE_TURNS = [XmlTurn(t.content, t.calls, t.results) for t in THREE_TURNS]


@pytest.fixture(scope="module")
def call_token_tokenizer():
    """The tiny tokenizer with ``<tool_call>`` & co. as single tokens (the opt-in)."""
    return train_tokenizer(DEFAULT_TEXTS, vocab_size=512, tool_call_tokens=True)


@pytest.fixture(params=["default", "tool_call_tokens"])
def any_tokenizer(request, tokenizer, call_token_tokenizer):
    return tokenizer if request.param == "default" else call_token_tokenizer


@pytest.fixture(scope="module")
def qwen(tokenizer) -> Qwen3CoderFormat:
    return Qwen3CoderFormat(tokenizer, [*SPECS, LOOKUP], template=QWEN3_CODER_TEMPLATE)


def test_a_trajectory_decodes_to_the_templates_render_of_the_whole_conversation(any_tokenizer):
    tok = any_tokenizer
    fmt = Qwen3CoderFormat(tok, SPECS, template=QWEN3_CODER_TEMPLATE)
    question = "Where is the Eiffel Tower?"
    observations = assert_plays_as_rendered(
        fmt, tok, question, XML_THREE_TURNS, chat_template=QWEN3_CODER_TEMPLATE
    )
    # each observation is the results in one user turn and the next assistant header, nothing else
    last = tok.decode(observations[-1], skip_special_tokens=False)
    assert last.startswith("\n<|im_start|>user\n<tool_response>\nDoc 1: The Seine")
    assert last.count("<tool_response>") == 3 and last.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert observations[-1][0] != tok.eos_token_id  # the sampled eos is the policy's, not repeated
    for turn in XML_THREE_TURNS[:-1]:  # and each sampled turn parses back to the calls it renders
        parsed = fmt.parse(turn.text(fmt.end_of_turn), "eos", final_turn=False)
        assert parsed.calls == tuple(ParsedCall(n, a) for n, a in turn.calls)


def test_the_prompt_carries_the_tools_schemas_and_ends_at_the_assistant_header(tokenizer, qwen):
    text = tokenizer.decode(
        qwen.prompt_ids([{"role": "user", "content": "Q?"}], [*SPECS, LOOKUP]), skip_special_tokens=False
    )
    assert "<tools>\n<function>\n<name>search</name>\n<description>Search the knowledge base." in text
    assert "<parameter>\n<name>query</name>\n<type>string</type>\n</parameter>" in text
    assert "<name>calculator</name>" in text and '<required>["expression"]</required>' in text
    assert '<name>page</name>\n<type>["integer", "null"]</type>' in text
    assert "<function=FUNCTION_NAME>" in text  # the call syntax is shown, in the XML form
    assert text.endswith("<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n")
    assert qwen.turn_stops(False) == qwen.turn_stops(True) == ()


def test_a_system_message_opens_the_system_turn_before_the_tools(tokenizer, qwen):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q?"}]
    text = tokenizer.decode(qwen.prompt_ids(messages, SPECS), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou can call the functions below")
    assert text.count("<|im_start|>system") == 1


def test_a_turn_cut_before_its_end_starts_the_observation_with_the_end_of_turn_token(tokenizer, qwen):
    closed = qwen.observation(
        [ToolMessage("search", "r")], turn_closed=True, final_turn=False, max_obs_length=200
    )
    cut = qwen.observation(
        [ToolMessage("search", "r")], turn_closed=False, final_turn=False, max_obs_length=200
    )
    assert cut.ids == [tokenizer.eos_token_id, *closed.ids]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_turn_with_several_calls_gives_them_in_order(qwen, n):
    calls = [
        ("search", {"query": f"q{i}"}) if i % 2 == 0 else ("calculator", {"expression": f"{i} + 1"})
        for i in range(n)
    ]
    text = "I will call.\n" + "\n".join(xml_call(name, args) for name, args in calls) + "<|im_end|>"
    parsed = qwen.parse(text, "eos", final_turn=False)
    assert parsed == TurnParse(calls=tuple(ParsedCall(name, args) for name, args in calls))


def _call(parameters: str, name: str = "search") -> str:
    """A call with these parameters' text, laid out as the template lays it out."""
    return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"


TYPED = {
    "key": "line one\n  line two",
    "limit": 3,
    "scale": 0.5,
    "exact": False,
    "filters": {"year": 1889, "tags": ["iron"]},
    "fields": ["height", "name"],
    "page": None,
    "label": 7,
}


def test_values_are_converted_by_their_schema_types_and_read_back_what_the_template_renders(tokenizer, qwen):
    parsed = qwen.parse(xml_call("lookup", TYPED) + "<|im_end|>", "eos", final_turn=False)
    assert parsed.calls == (ParsedCall("lookup", TYPED),)
    assert type(parsed.calls[0].arguments["scale"]) is float and parsed.calls[0].arguments["exact"] is False
    # the template writes a call's arguments exactly as the policy does
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "lookup", "arguments": TYPED}}],
    }
    text = tokenizer.apply_chat_template([message], chat_template=QWEN3_CODER_TEMPLATE, tokenize=False)
    assert text == "<|im_start|>assistant\n" + xml_call("lookup", TYPED) + "<|im_end|>\n"


@pytest.mark.parametrize(
    ("parameter", "written", "value"),
    [
        ("key", "\n  indented\n", "\n  indented\n"),  # only the layout's one newline either side goes
        ("key", "42", "42"),  # a string stays text, even when it reads as JSON
        ("key", "null", "null"),
        ("limit", " 12 ", 12),
        ("scale", "2", 2),
        ("page", "4", 4),
        ("label", "seven", "seven"),  # a list with "string": the text when no other kind fits
        ("undeclared", "[1, 2]", "[1, 2]"),  # a parameter the schema does not name stays text
    ],
)
def test_a_value_is_text_unless_its_type_reads_it_as_json(qwen, parameter, written, value):
    text = _call(f"<parameter={parameter}>\n{written}\n</parameter>\n", name="lookup")
    (call,) = qwen.parse(text, "eos", final_turn=False).calls
    assert call == ParsedCall("lookup", {parameter: value})


def test_a_value_written_without_the_layouts_newlines_is_read_as_written(qwen):
    parameters = "<parameter=key>tight</parameter><parameter=limit>2</parameter>"
    text = f"<tool_call><function=lookup>{parameters}</function></tool_call>"
    assert qwen.parse(text, "eos", False).calls == (ParsedCall("lookup", {"key": "tight", "limit": 2}),)


@pytest.mark.parametrize(
    ("parameter", "written"),
    [
        ("limit", "three"),
        ("limit", "2.5"),
        ("limit", "true"),  # a boolean is no integer, though Python's bool is an int
        ("scale", "1,5"),
        ("exact", "True"),  # JSON's boolean only
        ("filters", "[1]"),
        ("fields", '{"a": 1}'),
        ("page", "next"),
        ("filters", "[" * 10_000),  # nesting too deep for the JSON decoder
    ],
)
def test_a_value_that_fails_its_type_is_a_bad_argument_naming_the_parameter(qwen, parameter, written):
    text = _call(f"<parameter={parameter}>\n{written}\n</parameter>\n", name="lookup")
    (call,) = qwen.parse(text, "eos", final_turn=False).calls
    assert call.error == "bad_arguments" and call.name == "lookup" and repr(parameter) in call.detail


QUERY = "<parameter=query>\nx\n</parameter>\n"
# The malformed-call matrix: each kind of broken turn, the reason it is counted under.
MALFORMED = [
    (
        "a JSON call (hermes's)",
        '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>',
        "eos",
        "invalid_json",
    ),
    (
        "text before the function",
        "<tool_call>\nSearching:\n<function=search>\n</function>\n</tool_call>",
        "eos",
        "invalid_json",
    ),
    ("text between the parameters", _call("now\n" + QUERY), "eos", "invalid_json"),
    ("a parameter never closed", _call("<parameter=query>\nx\n"), "eos", "invalid_json"),
    ("a parameter tag never closed", _call("<parameter=query\nx\n</parameter>\n"), "eos", "invalid_json"),
    (
        "a function never closed",
        f"<tool_call>\n<function=search>\n{QUERY}</tool_call>",
        "eos",
        "invalid_json",
    ),
    (
        "a function tag never closed",
        "<tool_call>\n<function=search\n</function>\n</tool_call>",
        "eos",
        "invalid_json",
    ),
    (
        "text after the function",
        _call(QUERY).replace("</function>", "</function>\nthanks"),
        "eos",
        "invalid_json",
    ),
    (
        "two functions in one call",
        _call(QUERY).replace("</function>", "</function>\n<function=search>\n</function>"),
        "eos",
        "not_an_object",
    ),
    ("no name", f"<tool_call>\n<function>\n{QUERY}</function>\n</tool_call>", "eos", "missing_name"),
    ("an empty name", _call(QUERY, name=" "), "eos", "missing_name"),
    ("an unknown tool", _call(QUERY, name="serch"), "eos", "unknown_tool"),
    ("a parameter without a name", _call("<parameter=>\nx\n</parameter>\n"), "eos", "bad_arguments"),
    ("a parameter given twice", _call(QUERY + QUERY), "eos", "bad_arguments"),
    (
        "a value that fails its type",
        _call("<parameter=limit>\nten\n</parameter>\n", name="lookup"),
        "eos",
        "bad_arguments",
    ),
    (
        "a call cut by the token budget",
        "<tool_call>\n<function=search>\n<parameter=qu",
        "length",
        "truncated",
    ),
    ("a call the turn never closed", "<tool_call>\n<function=search>\n</function>", "eos", "unclosed"),
    ("an empty call", "<tool_call>  \n </tool_call>", "eos", "empty"),
]
TURN_INVALID = [
    ("neither a call nor an answer", "I think it is Paris.", "eos", "no_action"),
    ("a bare function outside any tool_call", "<function=search>\n</function>", "eos", "no_action"),
    ("an empty answer", "<answer>  </answer>", "eos", "empty"),
    ("an answer closed but never opened", "Paris </answer>", "eos", "no_action"),
    ("a turn cut with no action", "Let me think about this for a very", "length", "truncated"),
    (
        "a turn cut while thinking of a call",
        "<think>I will write <tool_call>\n<function=se",
        "length",
        "truncated",
    ),
]


@pytest.mark.parametrize(("kind", "text", "finish", "reason"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_call_is_a_reason_not_an_exception(qwen, kind, text, finish, reason):
    parsed = qwen.parse(text + ("<|im_end|>" if finish == "eos" else ""), finish, final_turn=False)
    (call,) = parsed.calls
    assert call.error == reason and call.arguments is None and call.detail
    assert parsed.answer is None and parsed.invalid is None
    message = qwen.call_error_message(call)
    assert message.content.startswith("Error: ") and call.detail in message.content


@pytest.mark.parametrize(("kind", "text", "finish", "reason"), TURN_INVALID, ids=[m[0] for m in TURN_INVALID])
def test_a_turn_that_neither_calls_nor_answers_is_invalid_with_its_reason(qwen, kind, text, finish, reason):
    parsed = qwen.parse(text, finish, final_turn=False)
    assert parsed.invalid == reason and not parsed.calls and parsed.answer is None


def test_the_matrix_covers_every_reason_the_parser_can_give():
    given_reasons = {m[3] for m in MALFORMED + TURN_INVALID}
    assert given_reasons == set(MALFORMED_REASONS) - {"schema"}  # schema: the rollout checks arguments
    # and the parser names no reason outside the closed list (_syntax's is invalid_json)
    source = Path(module.__file__).read_text(encoding="utf-8")
    named = set(re.findall(r'_malformed\(\s*"(\w+)"', source))
    assert named and named <= set(MALFORMED_REASONS)


def test_a_syntax_error_says_what_the_call_should_look_like(qwen):
    (call,) = qwen.parse(MALFORMED[0][1], "eos", final_turn=False).calls
    assert "not well-formed XML function syntax" in call.detail and "<function=TOOL_NAME>" in call.detail


def test_an_unknown_tool_suggests_the_close_name_and_keeps_good_calls_in_place(qwen):
    text = xml_call("search", {"query": "a"}) + "\n" + _call(QUERY, name="serch")
    good, bad = qwen.parse(text, "eos", final_turn=False).calls
    assert good == ParsedCall("search", {"query": "a"})
    assert bad.error == "unknown_tool" and bad.name == "serch" and "did you mean 'search'" in bad.detail


def test_calls_inside_thinking_are_not_calls(qwen):
    thought = "<think>Maybe " + xml_call("search", {"query": "draft"}) + "?</think>\n"
    real = xml_call("search", {"query": "final"})
    assert qwen.parse(thought + real, "eos", False).calls == (ParsedCall("search", {"query": "final"}),)
    assert qwen.parse(thought + "<answer> Paris </answer>", "eos", False) == TurnParse(answer="Paris")
    # the header may open the block: text up to a first </think> with no <think> before it
    opened = "I could " + xml_call("search", {"query": "draft"}) + "\n</think>\n\n"
    assert qwen.parse(opened + real, "eos", False).calls == (ParsedCall("search", {"query": "final"}),)
    assert qwen.parse(opened + "No call.", "eos", False).invalid == "no_action"
    # an unclosed block runs to the turn's end, an unclosed call in it included
    assert qwen.parse(real + "\n<think>then <tool_call>", "eos", False).calls == (
        ParsedCall("search", {"query": "final"}),
    )


def test_the_answer_is_read_only_from_a_turn_without_calls_and_always_on_the_final_turn(qwen):
    assert qwen.parse("<think>done</think> <answer> Paris </answer><|im_end|>", "eos", False) == TurnParse(
        answer="Paris"
    )
    both = xml_call("search", {"query": "x"}) + "<answer> Paris </answer>"
    assert qwen.parse(both, "eos", final_turn=False).answer is None
    assert qwen.parse(both, "eos", final_turn=True) == TurnParse(answer="Paris")
    assert qwen.parse(xml_call("search", {"query": "x"}), "eos", final_turn=True).invalid == "no_action"


PIECES = [
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "<function>",
    "</function>",
    "<parameter=",
    "</parameter>",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "search",
    "lookup",
    "limit",
    "query",
    ">",
    "\n",
    "{",
    "[",
    "1",
    " ",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES) | st.text(max_size=5), max_size=30),
    st.sampled_from(["eos", "stop", "length"]),
    st.booleans(),
)
def test_parsing_never_raises(qwen, pieces, finish, final_turn):
    parsed = qwen.parse("".join(pieces), finish, final_turn)
    assert (parsed.answer is not None) + bool(parsed.calls) + (parsed.invalid is not None) == 1
    assert all((c.error is None) == (c.arguments is not None) for c in parsed.calls)


def test_long_results_are_cut_to_fit_and_the_final_note_is_kept(tokenizer, qwen):
    long, short = "Doc 1: " + "Paris is the capital of France. " * 30, "660"
    messages = [ToolMessage("search", long), ToolMessage("calculator", short)]
    whole = qwen.observation(messages, turn_closed=True, final_turn=True, max_obs_length=10_000)
    obs = qwen.observation(messages, turn_closed=True, final_turn=True, max_obs_length=len(whole.ids) - 100)
    assert whole.tokens_cut == 0 and len(obs.ids) <= len(whole.ids) - 100 and obs.tokens_cut >= 100
    text = tokenizer.decode(obs.ids, skip_special_tokens=False)
    assert "\n660\n" in text and text.endswith(
        FINAL_TURN_NOTE + "\n</tool_response>\n<|im_end|>\n<|im_start|>assistant\n"
    )


def test_an_invalid_turn_is_answered_with_a_hint_showing_the_xml_call(tokenizer, qwen):
    message = qwen.invalid_turn_message(TurnParse(invalid="no_action"))
    obs = qwen.observation([message], turn_closed=True, final_turn=False, max_obs_length=400)
    text = tokenizer.decode(obs.ids, skip_special_tokens=False)
    assert "neither called a tool nor answered" in text and "<function=TOOL_NAME>" in text


def test_build_format_builds_it_from_a_rollout_config(tokenizer):
    cfg = RolloutConfig(tool_format="qwen3_coder", chat_template="qwen3_coder", max_obs_length=256)
    fmt = build_format(cfg, tokenizer, SPECS)
    assert isinstance(fmt, Qwen3CoderFormat) and fmt.end_of_turn == "<|im_end|>"
    assert fmt.name == "qwen3_coder" and fmt.traits is FORMAT_TRAITS["qwen3_coder"]
    assert fmt.chat.template == QWEN3_CODER_TEMPLATE


def test_the_tiny_tokenizers_own_template_is_refused_naming_this_formats_template(tokenizer):
    with pytest.raises(FormatError, match="does not render tools=.*actor.rollout.chat_template=qwen3_coder"):
        build_format(RolloutConfig(tool_format="qwen3_coder"), tokenizer, SPECS)
    cfg = RolloutConfig(tool_format="qwen3_coder", chat_template="qwen3_coder", max_obs_length=20)
    with pytest.raises(FormatError, match="actor.rollout.max_obs_length"):
        build_format(cfg, tokenizer, SPECS)


def test_a_template_for_another_dialect_is_refused_by_name(tokenizer):
    with pytest.raises(FormatError, match="chat_template=hermes renders tool calls for .*tool_format=hermes"):
        build_format(RolloutConfig(tool_format="qwen3_coder", chat_template="hermes"), tokenizer, SPECS)
    with pytest.raises(FormatError, match="chat_template=qwen3_coder renders tool calls for"):
        build_format(RolloutConfig(tool_format="hermes", chat_template="qwen3_coder"), tokenizer, SPECS)
    with pytest.raises(FormatError, match="with tool_format=tags leave it 'model'"):
        build_format(RolloutConfig(tool_format="tags", chat_template="qwen3_coder"), tokenizer, SPECS)
    # a JSON-call template given directly is caught by what it renders
    with pytest.raises(FormatError, match="<function=NAME> blocks.*chat_template=qwen3_coder"):
        Qwen3CoderFormat(tokenizer, SPECS, template=HERMES_TEMPLATE)


def test_its_traits_are_hermess_so_the_code_outside_formats_treats_them_alike():
    traits = FORMAT_TRAITS["qwen3_coder"]
    assert (traits.calls_in_text, traits.prompt_from_messages, traits.instruction_lists_tools) == (
        HERMES.calls_in_text,
        HERMES.prompt_from_messages,
        HERMES.instruction_lists_tools,
    )
    assert instruction_template(DEFAULT_TOOLS, "qwen3_coder") == instruction_template(DEFAULT_TOOLS, "hermes")
