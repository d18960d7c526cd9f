"""The format check in both tool-call formats: the tags grammar, and the rollout's record in hermes."""

from __future__ import annotations

import pytest

from agentrl.rewards import (
    FormatScorer,
    FormatValues,
    MatchScorer,
    RolloutCalls,
    ScoreInput,
    check_format,
    score_batch,
)
from agentrl.tool_identity import HERMES, TAGS, ToolIdentity

GT = {"target": ["Quenby"]}
TOOLS = ToolIdentity.of_tags(("search", "lookup"), HERMES)
TAG_TOOLS = ToolIdentity.of_tags(("search", "lookup"))  # the same tools in the tags format
TABLE = FormatValues(
    wrong_well_formed=0.3, correct_ill_formed=0.7, wrong_ill_formed=0.05, retrieval_bonus=0.11
)
# A hermes response as the project's Hermes-style template renders it (special tokens left out):
# no tag of the Search-R1 grammar, so the text alone says nothing about its calls.
HERMES_TEXT = (
    '<tool_call>\n{"name": "lookup", "arguments": {"key": "Zorvia"}}\n</tool_call>\n'
    "tool\n<tool_response>\nQuenby\n</tool_response>\nassistant\n<answer> Quenby </answer>"
)
CLEAN = RolloutCalls({"lookup": 1}, {}, ("Quenby",))


def hermes_input(answer: str | None, record: RolloutCalls | None = CLEAN) -> ScoreInput:
    return ScoreInput(HERMES_TEXT, GT, "nq", answer=answer, tools=TOOLS, rollout_calls=record)


def test_the_hermes_check_reads_the_rollouts_record_not_the_text():
    check = check_format(HERMES_TEXT, "Quenby", TOOLS, CLEAN)
    assert check.well_formed and check.calls == {"search": 0, "lookup": 1}
    assert check.information == ("Quenby",)
    # the same text under the tag grammar: no tags, so ill-formed with no calls
    tags = check_format(HERMES_TEXT, "Quenby", TAG_TOOLS)
    assert not tags.well_formed and tags.calls == {"search": 0, "lookup": 0}


@pytest.mark.parametrize(
    ("answer", "record", "well_formed"),
    [
        ("Quenby", CLEAN, True),
        ("Quenby", RolloutCalls({"lookup": 1}, {"invalid_json": 1}, ("Quenby",)), False),
        ("Quenby", RolloutCalls({}, {"no_action": 1}), False),
        (None, CLEAN, False),  # no answer accepted: never well formed
        ("Quenby", RolloutCalls({}, {"unknown_tool": 0}), True),  # a zero count is no malformed call
    ],
)
def test_a_hermes_response_is_well_formed_when_it_answered_and_nothing_was_malformed(
    answer, record, well_formed
):
    assert check_format(HERMES_TEXT, answer, TOOLS, record).well_formed is well_formed


def test_the_format_scorer_scores_a_hermes_response_by_its_record():
    scorer = FormatScorer("em", TABLE)
    out = scorer(hermes_input("Quenby"))
    assert out.score == 1.0
    assert out.metrics["well_formed"] == 1.0 and out.metrics["retrieval_hit"] == 1.0
    assert out.metrics["tool_calls/lookup"] == 1.0 and out.metrics["tool_calls/search"] == 0.0
    assert out.metrics["num_searches"] == 0.0
    sloppy = RolloutCalls({"lookup": 1}, {"schema": 2}, ("Quenby",))
    assert scorer(hermes_input("Quenby", sloppy)).score == pytest.approx(TABLE.correct_ill_formed)
    # wrong but well formed with the gold in a tool's output: the retrieval bonus applies
    assert scorer(hermes_input("Blem")).score == pytest.approx(TABLE.wrong_well_formed + 0.11)
    # the answer is the rollout's in both formats, never re-read from the text
    assert scorer(hermes_input(None)).score == TABLE.no_answer


def test_the_searches_of_a_hermes_response_are_the_search_tools_calls():
    out = MatchScorer("em")(hermes_input("Quenby", RolloutCalls({"search": 2, "lookup": 1}, {}, ())))
    assert out.metrics["num_searches"] == 2.0 and out.metrics["tool_calls/search"] == 2.0
    assert out.metrics["retrieval_hit"] == 0.0


def test_a_hermes_check_without_the_rollouts_record_is_refused_by_name():
    with pytest.raises(ValueError, match="the hermes format check reads the rollout's record"):
        MatchScorer("em")(hermes_input("Quenby", None))


def test_score_batch_gives_each_response_its_own_record_in_hermes():
    records = [CLEAN, RolloutCalls({"search": 1}, {"truncated": 1}, ("nothing",))]
    scores, metrics = score_batch(
        [HERMES_TEXT, HERMES_TEXT],
        [GT, GT],
        ["nq", "nq"],
        None,
        {"format_score": True},
        answers=["Quenby", "Quenby"],
        tools=TOOLS,
        rollout_calls=records,
    )
    assert scores == [1.0, pytest.approx(0.8)]
    assert metrics["well_formed"] == [1.0, 0.0]
    assert metrics["tool_calls/lookup"] == [1.0, 0.0] and metrics["tool_calls/search"] == [0.0, 1.0]
    with pytest.raises(ValueError, match="rollout_calls has 1 items"):
        score_batch([HERMES_TEXT] * 2, [GT] * 2, ["nq"] * 2, answers=["a", "b"], rollout_calls=records[:1])


def test_the_tags_check_is_the_grammars_whatever_record_comes_with_it():
    call = "<search>q</search><information>Quenby</information>"
    response = f"<think>t</think>{call}<think>t</think><answer>Quenby</answer>"
    plain = MatchScorer("em")(ScoreInput.from_text(response, GT))
    with_record = MatchScorer("em")(
        ScoreInput(response, GT, answer="Quenby", rollout_calls=RolloutCalls({"search": 5}, {"empty": 1}))
    )
    assert plain.metrics == with_record.metrics
    assert plain.metrics["well_formed"] == 1.0 and plain.metrics["tool_calls/search"] == 1.0


def test_calls_are_counted_under_the_tools_names_in_both_formats_whatever_their_tags():
    call = "<lk>Zorvia</lk><information>Quenby</information>"
    response = f"<think>t</think>{call}<think>t</think><answer>Quenby</answer>"
    in_tags = ToolIdentity(("search", "lk"), ("search", "lookup"), TAGS)
    tags = check_format(response, "Quenby", in_tags)
    assert tags.well_formed and tags.calls == {"search": 0, "lookup": 1}
    hermes = check_format(
        HERMES_TEXT, "Quenby", ToolIdentity(("search", "lk"), ("search", "lookup"), HERMES), CLEAN
    )
    assert hermes.calls == {"search": 0, "lookup": 1}
    out = MatchScorer("em")(ScoreInput.from_text(response, GT, tools=in_tags))
    assert out.metrics["tool_calls/lookup"] == 1.0 and "tool_calls/lk" not in out.metrics
    with pytest.raises(ValueError, match="one name per tag"):
        ToolIdentity(("search", "lk"), ("lookup",))


def test_tags_alone_are_read_as_tag_tools_in_the_tags_format_as_before_the_identity_existed():
    call = "<lookup>Zorvia</lookup><information>Quenby</information>"
    response = f"<think>t</think>{call}<think>t</think><answer>Quenby</answer>"
    assert check_format(response, "Quenby", ("search", "lookup")) == check_format(
        response, "Quenby", TAG_TOOLS
    )
    assert ScoreInput.from_text(response, GT, tools=["search", "lookup"]).tools == TAG_TOOLS
    with pytest.raises(TypeError, match="a ToolIdentity or a sequence of tags"):
        check_format(response, "Quenby", "search")
