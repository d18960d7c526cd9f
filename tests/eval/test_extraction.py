"""The answer-extraction rules (``tag`` and the fair baseline ``tag-or-first-line``), on the
strings small models really write, and the records they produce from real trajectories."""

from __future__ import annotations

import pytest

from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.eval.extraction import ANSWER_RULES, check_answer_rule, first_line_answer, predict
from agentrl.eval.records import last_turn_text, trajectory_record

FALLBACK = "tag-or-first-line"


def test_a_prose_answer_is_cut_at_its_first_sentence_end():
    text = "The movie was filmed in Los Angeles. It premiered in 1999 to mixed reviews."
    assert first_line_answer(text) == "The movie was filmed in Los Angeles."
    assert first_line_answer("Who knows? Maybe Paris.") == "Who knows?"
    assert first_line_answer("Wow! It is Jupiter.") == "Wow!"


def test_a_period_inside_a_number_or_at_the_end_of_the_line_is_not_a_cut():
    assert first_line_answer("About 3.5 million people live there") == "About 3.5 million people live there"
    assert first_line_answer("Paris.\nIt lies on the Seine.") == "Paris."


def test_an_answer_tag_cut_by_the_token_budget_yields_the_text_after_it():
    text = "<think> The film was made by Spielberg. </think>\n<answer> Steven Spielberg, who directed"
    assert first_line_answer(text) == "Steven Spielberg, who directed"
    # the last unclosed <answer> wins over an earlier complete one
    assert first_line_answer("<answer> Berlin </answer> no wait <answer> Paris") == "Paris"


def test_thinking_is_dropped_before_the_first_prose_line_is_taken():
    text = "<think>\nThe question asks about France. Its capital is well known.\n</think>\n\nParis is it."
    assert first_line_answer(text) == "Paris is it."
    assert first_line_answer("<search> capital of France </search> Paris") == "Paris"


def test_a_turn_that_only_thinks_or_is_empty_gives_no_prediction():
    assert first_line_answer("") is None
    assert first_line_answer("  \n\n ") is None
    assert first_line_answer("<think> I should search for the director of the film but") is None
    assert first_line_answer("<think> hmm </think> <search> director of Jaws </search>") is None
    assert predict(None, "", FALLBACK) == (None, False)


def test_the_first_non_empty_line_is_capped_at_twenty_words():
    words = [f"w{i}" for i in range(30)]
    assert first_line_answer("\n\n  " + " ".join(words) + "\nJane Austen") == " ".join(words[:20])
    assert first_line_answer("\n  Jane   Austen \nShe wrote it.") == "Jane Austen"


def test_remaining_tags_are_removed_but_their_text_is_kept():
    assert first_line_answer("<answer>Paris</answer>") == "Paris"
    assert first_line_answer("</think> Berlin") == "Berlin"


def test_an_accepted_tag_wins_under_both_rules_and_tag_ignores_prose():
    assert predict("Paris", "Berlin is the capital.", FALLBACK) == ("Paris", False)
    assert predict("", "Berlin is the capital.", FALLBACK) == ("", False)  # an empty tag is still a tag
    assert predict("Paris", "Berlin.", "tag") == ("Paris", False)
    assert predict(None, "Berlin is the capital.", "tag") == (None, False)
    assert predict(None, "Berlin is the capital. Sure.", FALLBACK) == ("Berlin is the capital.", True)


def test_an_unknown_rule_is_refused_naming_the_setting_and_the_choices():
    assert ANSWER_RULES[0] == "tag"
    with pytest.raises(ValueError, match=r"answer_rule must be one of \('tag', 'tag-or-first-line'\)"):
        check_answer_rule("lenient")
    with pytest.raises(ValueError, match="answer_rule"):
        predict("Paris", "", "first-line")


def trajectory(tokenizer, *parts: tuple[Segment, str], answer: str | None = None) -> Trajectory:
    traj = Trajectory(PromptSpec([1, 2, 3], data_source="toy"), group_id="g", uid="u", answer=answer)
    for segment, text in parts:
        traj.append(tokenizer.encode(text, add_special_tokens=False), segment)
        traj.num_turns += segment == Segment.MODEL
    return traj


def test_the_last_turn_is_the_model_text_after_the_last_observation(tokenizer):
    traj = trajectory(
        tokenizer,
        (Segment.MODEL, "<think> I need the capital. </think> <search> capital of Germany </search>"),
        (Segment.OBSERVATION, "<information> Doc 1 Berlin is the capital of Germany. </information>"),
        (Segment.MODEL, "Berlin is the capital. It has many museums."),
    )
    assert last_turn_text(tokenizer, traj).strip() == "Berlin is the capital. It has many museums."
    ended_on_observation = trajectory(
        tokenizer,
        (Segment.MODEL, "Berlin is the capital."),
        (Segment.OBSERVATION, "My previous action is invalid."),
    )
    assert last_turn_text(tokenizer, ended_on_observation) == ""


def test_records_score_the_prediction_of_their_rule_and_keep_answered_strict(tokenizer):
    traj = trajectory(
        tokenizer,
        (Segment.MODEL, "<search> capital of Germany </search>"),
        (Segment.OBSERVATION, "<information> Doc 1 Berlin is the capital. </information>"),
        (Segment.MODEL, "<think> The document says it. </think> Berlin. It has many museums."),
    )
    kw = {"dataset": "toy", "question_id": "q5"}
    strict = trajectory_record(traj, tokenizer, ["Berlin"], **kw)
    fair = trajectory_record(traj, tokenizer, ["Berlin"], answer_rule=FALLBACK, **kw)
    assert strict["prediction"] is None and strict["em"] == 0.0 and not strict["extracted"]
    assert fair["prediction"] == "Berlin." and fair["extracted"] is True
    assert fair["em"] == fair["f1"] == fair["cover_em"] == 1.0
    assert strict["answered"] is False and fair["answered"] is False
    # the rest of the record does not depend on the rule
    rest = {k for k in strict if k not in ("prediction", "em", "f1", "cover_em", "extracted")}
    assert {k: strict[k] for k in rest} == {k: fair[k] for k in rest}

    # documents are never read as the model's answer: the fallback sees the model's last turn only
    only_searched = trajectory(
        tokenizer,
        (Segment.MODEL, "<search> capital of Germany </search>"),
        (Segment.OBSERVATION, "<information> Doc 1 Berlin is the capital. </information>"),
    )
    record = trajectory_record(only_searched, tokenizer, ["Berlin"], answer_rule=FALLBACK, **kw)
    assert record["prediction"] is None and record["em"] == 0.0 and record["extracted"] is False

    tagged = trajectory(tokenizer, (Segment.MODEL, "Maybe Berlin. <answer> Paris </answer>"), answer="Paris")
    record = trajectory_record(tagged, tokenizer, ["Paris"], answer_rule=FALLBACK, **kw)
    assert record["prediction"] == "Paris" and record["answered"] and not record["extracted"]
    assert record["em"] == 1.0


def test_a_stock_lead_in_and_quotes_are_not_part_of_the_answer():
    assert first_line_answer('The answer to this question is: "Benga"') == "Benga"
    assert first_line_answer("The answer is Paris. It is in France.") == "Paris."
    assert first_line_answer("Final answer: 42") == "42"
    assert first_line_answer("answers vary by region") == "answers vary by region"  # no lead-in
