"""The ``hermes`` format on the tiny tokenizer with the project's Hermes-style template.

Token-exactness: a trajectory's ids (prompt, sampled turns, observations) decode to what the
template renders for the whole conversation. Parsing: calls in order, malformed calls as
reasons, never an exception. Start-up checks: refused by name, never silently replaced.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.tool_conversations import (
    SPECS,
    THREE_TURNS,
    Turn,
    assert_plays_as_rendered,
    call_block,
)

from agentrl.agent.formats import (
    HERMES_TEMPLATE,
    MALFORMED_REASONS,
    FormatError,
    HermesFormat,
    ParsedCall,
    ToolMessage,
    TurnParse,
    build_format,
)
from agentrl.agent.formats.hermes import fair_shares
from agentrl.agent.observations import FINAL_TURN_NOTE
from agentrl.config.schema import RolloutConfig
from agentrl.models.tiny import DEFAULT_TEXTS, TOOL_CALL_TOKENS, train_tokenizer


@pytest.fixture(scope="module")
def call_token_tokenizer():
    """The tiny tokenizer with ``<tool_call>`` & co. as single tokens (the opt-in)."""
    return train_tokenizer(DEFAULT_TEXTS, vocab_size=512, tool_call_tokens=True)


@pytest.fixture(params=["default", "tool_call_tokens"])
def any_tokenizer(request, tokenizer, call_token_tokenizer):
    return tokenizer if request.param == "default" else call_token_tokenizer


@pytest.fixture(scope="module")
def hermes(tokenizer) -> HermesFormat:
    return HermesFormat(tokenizer, SPECS, template=HERMES_TEMPLATE)


def test_a_trajectory_decodes_to_the_templates_render_of_the_whole_conversation(any_tokenizer):
    tok = any_tokenizer
    fmt = HermesFormat(tok, SPECS, template=HERMES_TEMPLATE)
    question = "Where is the Eiffel Tower?"
    observations = assert_plays_as_rendered(fmt, tok, question, THREE_TURNS, chat_template=HERMES_TEMPLATE)
    # each observation is the tool turn and the next assistant header, and nothing else
    last = tok.decode(observations[-1], skip_special_tokens=False)
    assert last.startswith("\n<|im_start|>tool\n<tool_response>\nDoc 1: The Seine")
    assert last.count("<tool_response>") == 3 and last.endswith("<|im_start|>assistant\n")
    assert observations[-1][0] != tok.eos_token_id  # the sampled eos is the policy's, not repeated


def test_the_prompt_carries_the_tools_schemas_and_ends_at_the_assistant_header(tokenizer, hermes):
    text = tokenizer.decode(
        hermes.prompt_ids([{"role": "user", "content": "Q?"}], SPECS), skip_special_tokens=False
    )
    assert '"name": "search"' in text and '"name": "calculator"' in text and "<tools>" in text
    assert text.endswith("<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n")
    assert hermes.turn_stops(False) == hermes.turn_stops(True) == ()


def test_a_turn_cut_before_its_end_starts_the_observation_with_the_end_of_turn_token(tokenizer, hermes):
    closed = hermes.observation(
        [ToolMessage("search", "r")], turn_closed=True, final_turn=False, max_obs_length=200
    )
    cut = hermes.observation(
        [ToolMessage("search", "r")], turn_closed=False, final_turn=False, max_obs_length=200
    )
    assert cut.ids == [tokenizer.eos_token_id, *closed.ids]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_turn_with_several_calls_gives_them_in_order(hermes, n):
    calls = [
        ("search", {"query": f"q{i}"}) if i % 2 == 0 else ("calculator", {"expression": f"{i} + 1"})
        for i in range(n)
    ]
    text = "I will call.\n" + "\n".join(call_block(name, args) for name, args in calls) + "<|im_end|>"
    parsed = hermes.parse(text, "eos", final_turn=False)
    assert parsed == TurnParse(calls=tuple(ParsedCall(name, args) for name, args in calls))


# The malformed-call matrix: each kind of broken turn, the reason it is counted under.
MALFORMED = [
    (
        "invalid JSON",
        '<tool_call>{"name": "search", "arguments": {"query": }</tool_call>',
        "eos",
        "invalid_json",
    ),
    ("a JSON list", '<tool_call>[{"name": "search", "arguments": {}}]</tool_call>', "eos", "not_an_object"),
    ("a JSON string", '<tool_call>"search"</tool_call>', "eos", "not_an_object"),
    ("no name", '<tool_call>{"arguments": {"query": "x"}}</tool_call>', "eos", "missing_name"),
    (
        "a name that is not a string",
        '<tool_call>{"name": 3, "arguments": {}}</tool_call>',
        "eos",
        "missing_name",
    ),
    (
        "an unknown tool",
        '<tool_call>{"name": "serch", "arguments": {"query": "x"}}</tool_call>',
        "eos",
        "unknown_tool",
    ),
    (
        "arguments not an object",
        '<tool_call>{"name": "search", "arguments": "x"}</tool_call>',
        "eos",
        "bad_arguments",
    ),
    ("a call cut by the token budget", '<tool_call>{"name": "search", "argu', "length", "truncated"),
    ("a call the turn never closed", '<tool_call>{"name": "search", "arguments": {}}', "eos", "unclosed"),
    ("an empty call", "<tool_call>  \n </tool_call>", "eos", "empty"),
]
TURN_INVALID = [
    ("neither a call nor an answer", "I think it is Paris.", "eos", "no_action"),
    ("an empty answer", "<answer>  </answer>", "eos", "empty"),
    ("an answer closed but never opened", "Paris </answer>", "eos", "no_action"),
    ("a turn cut with no action", "Let me think about this for a very", "length", "truncated"),
]


@pytest.mark.parametrize(("kind", "text", "finish", "reason"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_call_is_a_reason_not_an_exception(hermes, kind, text, finish, reason):
    parsed = hermes.parse(text + ("<|im_end|>" if finish == "eos" else ""), finish, final_turn=False)
    (call,) = parsed.calls
    assert call.error == reason and call.arguments is None and call.detail
    assert parsed.answer is None and parsed.invalid is None
    message = hermes.call_error_message(call)
    assert message.content.startswith("Error: ") and call.detail in message.content


@pytest.mark.parametrize(("kind", "text", "finish", "reason"), TURN_INVALID, ids=[m[0] for m in TURN_INVALID])
def test_a_turn_that_neither_calls_nor_answers_is_invalid_with_its_reason(hermes, kind, text, finish, reason):
    parsed = hermes.parse(text, finish, final_turn=False)
    assert parsed.invalid == reason and not parsed.calls and parsed.answer is None


def test_the_matrix_covers_every_reason_the_parser_can_give():
    given_reasons = {m[3] for m in MALFORMED + TURN_INVALID}
    assert given_reasons == set(MALFORMED_REASONS) - {"schema"}  # schema: the rollout checks arguments


def test_an_unknown_tool_suggests_the_close_name_and_keeps_good_calls_in_place(hermes):
    text = call_block("search", {"query": "a"}) + '\n<tool_call>{"name": "serch"}</tool_call>'
    good, bad = hermes.parse(text, "eos", final_turn=False).calls
    assert good == ParsedCall("search", {"query": "a"})
    assert bad.error == "unknown_tool" and bad.name == "serch" and "did you mean 'search'" in bad.detail


def test_the_answer_is_read_only_from_a_turn_without_calls_and_always_on_the_final_turn(hermes):
    assert hermes.parse("<think>done</think> <answer> Paris </answer><|im_end|>", "eos", False) == TurnParse(
        answer="Paris"
    )
    both = call_block("search", {"query": "x"}) + "<answer> Paris </answer>"
    assert hermes.parse(both, "eos", final_turn=False).answer is None
    assert hermes.parse(both, "eos", final_turn=True) == TurnParse(answer="Paris")
    assert hermes.parse(call_block("search", {"query": "x"}), "eos", final_turn=True).invalid == "no_action"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "{", "}", '"name"', ":", "[", "x", " "]
        )
        | st.text(max_size=5),
        max_size=20,
    ),
    st.sampled_from(["eos", "stop", "length"]),
    st.booleans(),
)
def test_parsing_never_raises(hermes, pieces, finish, final_turn):
    parsed = hermes.parse("".join(pieces), finish, final_turn)
    assert (parsed.answer is not None) + bool(parsed.calls) + (parsed.invalid is not None) == 1


def test_long_results_are_cut_to_fit_fairly_counted_and_the_final_note_is_kept(tokenizer, hermes):
    long, short = "Doc 1: " + "Paris is the capital of France. " * 30, "660"
    messages = [ToolMessage("search", long), ToolMessage("calculator", short)]
    whole = hermes.observation(messages, turn_closed=True, final_turn=True, max_obs_length=10_000)
    obs = hermes.observation(messages, turn_closed=True, final_turn=True, max_obs_length=len(whole.ids) - 100)
    assert whole.tokens_cut == 0 and len(obs.ids) <= len(whole.ids) - 100 and obs.tokens_cut >= 100
    text = tokenizer.decode(obs.ids, skip_special_tokens=False)
    assert "\n660\n" in text and text.endswith(
        FINAL_TURN_NOTE + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert fair_shares([10, 2, 50], 20) == [9, 2, 9] and fair_shares([3, 4], 100) == [3, 4]


def test_the_tiny_tokenizers_own_template_is_refused_naming_the_option(tokenizer):
    with pytest.raises(FormatError, match="does not render tools=.*actor.rollout.chat_template=hermes"):
        build_format(RolloutConfig(tool_format="hermes"), tokenizer, SPECS)
    fmt = build_format(RolloutConfig(tool_format="hermes", chat_template="hermes"), tokenizer, SPECS)
    assert isinstance(fmt, HermesFormat) and fmt.end_of_turn == "<|im_end|>"


def test_enable_thinking_for_a_template_that_does_not_read_it_and_a_tiny_obs_budget_are_refused(tokenizer):
    cfg = RolloutConfig(tool_format="hermes", chat_template="hermes", enable_thinking=False)
    with pytest.raises(FormatError, match="actor.rollout.enable_thinking=false"):
        build_format(cfg, tokenizer, SPECS)
    cfg = RolloutConfig(tool_format="hermes", chat_template="hermes", max_obs_length=20)
    with pytest.raises(FormatError, match="actor.rollout.max_obs_length"):
        build_format(cfg, tokenizer, SPECS)


def test_an_invalid_turn_is_answered_with_a_hint_in_a_tool_message(tokenizer, hermes):
    message = hermes.invalid_turn_message(TurnParse(invalid="no_action"))
    obs = hermes.observation([message], turn_closed=True, final_turn=False, max_obs_length=400)
    text = tokenizer.decode(obs.ids, skip_special_tokens=False)
    assert "neither called a tool nor answered" in text and "<tool_call>" in text


def test_a_turn_with_text_and_no_calls_still_ends_where_the_template_ends_it(tokenizer, hermes):
    turns = [Turn("<think>no tool needed</think> <answer> 4 </answer>")]
    assert_plays_as_rendered(hermes, tokenizer, "2 + 2?", turns, chat_template=HERMES_TEMPLATE)


def test_the_tiny_tokenizer_has_the_tool_tags_as_single_tokens_only_when_asked(
    tokenizer, call_token_tokenizer
):
    for tag in TOOL_CALL_TOKENS:
        assert len(call_token_tokenizer.encode(tag, add_special_tokens=False)) == 1
        assert len(tokenizer.encode(tag, add_special_tokens=False)) > 1  # the default's ids are unchanged
    assert len(call_token_tokenizer) == len(tokenizer)  # the same vocabulary size, fewer merges


def test_calls_inside_thinking_are_not_calls(hermes):
    call = '<tool_call>\n{"name": "search", "arguments": {"query": "a"}}\n</tool_call>'
    thinking_only = hermes.parse(f"<think>I could write {call} here.</think>No call.", "eos", False)
    assert thinking_only.calls == () and thinking_only.invalid == "no_action"
    after = hermes.parse(f"<think>maybe {call}</think>\n{call}", "eos", False)
    assert [c.name for c in after.calls] == ["search"]
    header_opened = hermes.parse(f"reasoning {call}</think>\n\n<answer> x </answer>", "eos", False)
    assert header_opened.calls == () and header_opened.answer == "x"
    unclosed = hermes.parse(f"<think>still thinking {call}", "length", False)
    assert unclosed.calls == ()


def test_a_sampled_turn_becomes_the_assistant_message_a_client_would_send_back(hermes):
    call = '<tool_call>\n{"name": "search", "arguments": {"query": "a"}}\n</tool_call>'
    eot = hermes.end_of_turn
    thought = f"<think>\nmaybe {call}\n</think>\n\nSearching.\n{call}{eot}"
    message = hermes.assistant_message(thought, hermes.parse(thought, "eos", False))
    assert message["content"] == "<think>\nmaybe " + call + "\n</think>\n\nSearching."
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["search"]
    call_first = f"{call}\n<think>x</think>{eot}"
    message = hermes.assistant_message(call_first, hermes.parse(call_first, "eos", False))
    assert message["content"] == "" and len(message["tool_calls"]) == 1
    broken = "<tool_call>{not json</tool_call>" + eot
    assert hermes.assistant_message(broken, hermes.parse(broken, "eos", False)) == {
        "role": "assistant",
        "content": "<tool_call>{not json</tool_call>",
    }
