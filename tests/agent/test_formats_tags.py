"""The ``tags`` format is today's tag dialect behind the format protocol, to the token."""

from __future__ import annotations

import pytest

from agentrl.agent.actions import ANSWER_TAG, stop_strings
from agentrl.agent.formats import FormatError, ParsedCall, TagsFormat, ToolMessage, TurnParse, build_format
from agentrl.agent.observations import INVALID_ACTION_HINT, ObservationEncoder
from agentrl.agent.prompts import encode_messages
from agentrl.config.schema import RolloutConfig
from agentrl.data.qa import make_prompt
from agentrl.tools.spec import ToolSpec

SEARCH = ToolSpec("search", "Search.", {"type": "object", "properties": {"query": {"type": "string"}}})
CALCULATOR = ToolSpec(
    "calculator", "Arithmetic.", {"type": "object", "properties": {"expression": {"type": "string"}}}
)
LOOKUP = ToolSpec(
    "lookup",
    "Two parameters.",
    {"type": "object", "properties": {"table": {"type": "string"}, "row": {"type": "integer"}}},
)


@pytest.fixture
def tags(tokenizer) -> TagsFormat:
    return TagsFormat(tokenizer, [SEARCH, CALCULATOR], tags={"calculator": "calculate"})


def test_the_prompt_ids_are_exactly_todays_encode_messages(tokenizer, tags):
    for question in ("What is the capital of France?", "Who wrote Pride and Prejudice?"):
        messages = [{"role": "user", "content": make_prompt(question)}]
        assert tags.prompt_ids(messages, [SEARCH, CALCULATOR]) == encode_messages(tokenizer, messages)
    two = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q?"}]
    assert tags.prompt_ids(two, []) == encode_messages(tokenizer, two)


@pytest.mark.parametrize("final_turn", [False, True])
@pytest.mark.parametrize(
    "text", ["Doc 1: Paris is the capital of France.", "Doc 1: " + "Berlin has parks. " * 40]
)
def test_the_observation_ids_are_exactly_todays_observation_encoder(tokenizer, tags, text, final_turn):
    encoder = ObservationEncoder(tokenizer, max_obs_length=60)
    expected = encoder.encode(text, final_turn=final_turn)
    got = tags.observation(
        [ToolMessage("search", text)], turn_closed=True, final_turn=final_turn, max_obs_length=60
    )
    assert got == expected
    invalid = tags.observation(
        [tags.invalid_turn_message(TurnParse(invalid="no_action"))],
        turn_closed=True,
        final_turn=final_turn,
        max_obs_length=60,
    )
    assert invalid == encoder.encode(INVALID_ACTION_HINT, final_turn=final_turn)


def test_the_turn_stops_are_the_tools_closing_tags_then_answer_and_only_answer_on_the_final_turn(tags):
    assert tags.turn_stops(final_turn=False) == stop_strings(["search", "calculate", ANSWER_TAG])
    assert tags.turn_stops(final_turn=False) == ("</search>", "</calculate>", "</answer>")
    assert tags.turn_stops(final_turn=True) == ("</answer>",)


def test_a_tag_call_becomes_the_tools_one_string_argument_under_its_name(tags):
    parsed = tags.parse("<think> hm </think> <search> capital of France </search>", "stop", False)
    assert parsed == TurnParse(calls=(ParsedCall("search", {"query": "capital of France"}),))
    parsed = tags.parse("<calculate> 3 * 4 </calculate>", "stop", False)
    assert parsed.calls == (ParsedCall("calculator", {"expression": "3 * 4"}),)


def test_an_answer_is_read_and_tools_are_not_callable_on_the_final_turn(tags):
    assert tags.parse("<answer> Paris </answer>", "stop", False) == TurnParse(answer="Paris")
    final = tags.parse("<search> more </search>", "stop", True)
    assert final.invalid == "no_action" and not final.calls
    assert tags.parse("<search> more </search> <answer> Rome </answer>", "stop", True).answer == "Rome"


@pytest.mark.parametrize(
    ("text", "finish", "reason"),
    [
        ("I do not know.", "eos", "no_action"),
        ("<search> cut by the bud", "length", "truncated"),
        ("<search>   </search>", "stop", "empty"),
        ("<answer></answer>", "stop", "empty"),
        ("capital </search>", "stop", "no_action"),
    ],
)
def test_an_invalid_tag_turn_says_why(tags, text, finish, reason):
    parsed = tags.parse(text, finish, False)
    assert parsed.invalid == reason and not parsed.calls and parsed.answer is None
    assert parsed.detail  # today's parse_action reason, kept for dumps


def test_a_tool_with_several_parameters_takes_a_json_object_between_its_tags(tokenizer):
    fmt = TagsFormat(tokenizer, [SEARCH, LOOKUP])
    assert fmt.parse('<lookup> {"table": "cities", "row": 3} </lookup>', "stop", False).calls == (
        ParsedCall("lookup", {"table": "cities", "row": 3}),
    )
    (bad,) = fmt.parse("<lookup> cities 3 </lookup>", "stop", False).calls
    assert bad.error == "invalid_json" and bad.name == "lookup"
    (listed,) = fmt.parse("<lookup> [1, 2] </lookup>", "stop", False).calls
    assert listed.error == "bad_arguments"
    assert fmt.call_error_message(bad) == ToolMessage("lookup", f"Error: {bad.detail}")


def test_build_format_gives_tags_by_default_and_refuses_the_hermes_template_with_tags(tokenizer):
    cfg = RolloutConfig()
    fmt = build_format(cfg, tokenizer, [SEARCH])
    assert isinstance(fmt, TagsFormat) and fmt.name == "tags"
    cfg.chat_template = "hermes"
    with pytest.raises(FormatError, match="actor.rollout.chat_template=hermes"):
        build_format(cfg, tokenizer, [SEARCH])
    with pytest.raises(ValueError, match="max_obs_length"):
        build_format(RolloutConfig(max_obs_length=5), tokenizer, [SEARCH])
    with pytest.raises(FormatError, match="enable_thinking"):  # the tiny template does not read it
        build_format(RolloutConfig(enable_thinking=True), tokenizer, [SEARCH])


def test_each_format_declares_the_traits_its_name_has_in_the_tool_identity():
    from agentrl.agent.formats import HermesFormat, TagsFormat
    from agentrl.tool_identity import FORMAT_TRAITS

    assert TagsFormat.traits is FORMAT_TRAITS[TagsFormat.name] and TagsFormat.traits.calls_in_text
    assert HermesFormat.traits is FORMAT_TRAITS[HermesFormat.name]
    assert HermesFormat.traits.prompt_from_messages and not HermesFormat.traits.instruction_lists_tools
