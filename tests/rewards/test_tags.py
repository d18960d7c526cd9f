"""Answer extraction and the well-formedness grammar of a response."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl.rewards import extract_answer, information_texts, parse_response

GOOD = (
    "<think> I need the capital. </think>\n<search> capital of Zorvia </search>\n\n"
    "<information>Doc 1(Title: Quenby) Quenby is the capital of Zorvia.</information>\n\n"
    "<think> It is Quenby. </think>\n<answer> Quenby </answer>"
)

# the Search-R1 instruction shows an example answer; it lives in the prompt, never the response
PROMPT_EXAMPLE = "For example, <answer> Beijing </answer>. Question: what is the capital of Zorvia?\n"


def test_last_answer_wins() -> None:
    assert extract_answer("<answer> a </answer> then <answer>  b c </answer>") == "b c"


def test_no_or_incomplete_answer_is_none() -> None:
    assert extract_answer("<think> no answer yet </think>") is None
    assert extract_answer("<think>x</think><answer> trunc") is None
    assert extract_answer("<answer></answer>") == ""


def test_prompt_example_is_never_scored() -> None:
    response = "<think> not sure </think>"
    assert extract_answer(response) is None
    # the same function on prompt+response would find the example: that is why callers pass
    # the response only
    assert extract_answer(PROMPT_EXAMPLE + response) == "Beijing"


def test_answer_inside_retrieved_text_is_ignored() -> None:
    response = "<think>t</think><search>q</search><information>Doc 1 <answer> Evil </answer></information>"
    assert extract_answer(response) is None
    assert extract_answer(response + "<think>t</think><answer> Good </answer>") == "Good"


def test_nested_answer_opening_takes_innermost() -> None:
    assert extract_answer("<answer> a <answer> b </answer>") == "b"


def test_well_formed_response() -> None:
    s = parse_response(GOOD)
    assert s.well_formed, s.problem
    assert [b.tag for b in s.blocks] == ["think", "search", "information", "think", "answer"]
    assert s.num_searches == 1
    assert parse_response("<think>x</think> <answer>y</answer>\n").well_formed
    assert information_texts(GOOD) == ["Doc 1(Title: Quenby) Quenby is the capital of Zorvia."]


@pytest.mark.parametrize(
    ("response", "problem"),
    [
        ("<answer> x </answer>", "<answer> at the start"),
        ("<think>a</think><answer>x</answer><answer>y</answer>", "after the final <answer>"),
        ("<think>a</think><answer>x</answer><think>b</think>", "after the final <answer>"),
        (
            "<think>a</think><information>d</information><think>b</think><answer>x</answer>",
            "<information> after <think>",
        ),
        ("<think>a</think><search>q</search><think>b</think><answer>x</answer>", "<think> after <search>"),
        (
            "<think>a</think><search>q</search><information>d</information><answer>x</answer>",
            "<answer> after <information>",
        ),
        ("<think>a</think>", "does not end with <answer>"),
        ("<think>a <search> q </search></think><answer>x</answer>", "<search> inside <think>"),
        ("<think>a</think></think><answer>x</answer>", "</think> without a matching <think>"),
        ("<think>a</think><answer>x", "<answer> is never closed"),
        ("<think>a</think>so the answer is<answer>x</answer>", "text outside tags"),
        ("<think>a</think><answer>x</answer><|im_end|>", "text outside tags"),
        ("", "no tags"),
    ],
)
def test_ill_formed_responses(response: str, problem: str) -> None:
    s = parse_response(response)
    assert not s.well_formed
    assert problem in s.problem


def test_tags_inside_information_do_not_break_structure() -> None:
    response = GOOD.replace("Quenby is", "<think> Quenby </answer> is")
    assert parse_response(response).well_formed


_plain = st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=30)


@given(_plain, _plain, _plain)
def test_extract_answer_property(before: str, answer: str, after: str) -> None:
    assert extract_answer(f"{before}<answer>{answer}</answer>{after}") == answer.strip()


@given(st.lists(_plain, min_size=1, max_size=4))
def test_well_formed_grammar_accepts_any_number_of_search_rounds(thoughts: list[str]) -> None:
    rounds = "".join(
        f"<search>{t}</search><information>d</information><think>{t}</think>" for t in thoughts[1:]
    )
    s = parse_response(f"<think>{thoughts[0]}</think>{rounds}<answer>{thoughts[-1]}</answer>")
    assert s.well_formed and s.num_searches == len(thoughts) - 1


def test_the_grammar_accepts_a_call_of_any_tool_tag_it_is_given() -> None:
    response = (
        "<think>a</think><lookup>x</lookup><information>d</information>"
        "<think>b</think><search>y</search><information>e</information><think>c</think><answer>z</answer>"
    )
    s = parse_response(response, ("search", "lookup"))
    assert s.well_formed, s.problem
    assert (s.count("lookup"), s.count("search"), s.num_searches) == (1, 1, 1)
    assert not parse_response(response).well_formed  # <lookup> is no tool of the default run
    nested = "<think>a <lookup> x </lookup></think><answer>z</answer>"
    assert "<lookup> inside <think>" in parse_response(nested, ("lookup",)).problem
    assert parse_response(nested).well_formed  # not a tool here: text inside <think>


def test_a_protocol_tag_cannot_be_a_tool_tag() -> None:
    with pytest.raises(ValueError, match="protocol's own tags"):
        parse_response("<think>a</think>", ("search", "answer"))
