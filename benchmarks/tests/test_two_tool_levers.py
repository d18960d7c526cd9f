"""benchmarks/two_tool_levers.py: which ages a calculate call read, and a lever's profile."""

from __future__ import annotations

import json

import pytest

from benchmarks.two_tool_levers import LEVERS, lever_profile, read_ages


def _call(expression: str) -> str:
    call = json.dumps({"name": "calculate", "arguments": {"expression": expression}})
    return f"<tool_call>\n{call}\n</tool_call>"


def test_read_ages_counts_each_number_of_the_call_against_the_question_s_calculation() -> None:
    records = [
        {"id": "a", "response": _call("46 - 45")},  # both right
        {"id": "b", "response": _call("56 - 12")},  # the first right
        {"id": "c", "response": _call("11 - 21")},  # the second right
        {"id": "d", "response": "<answer> 3 </answer>"},  # no call
        {"id": "hop", "response": _call("1 - 1")},  # not an arithmetic question: not counted
    ]
    calculation = {"a": "46 - 45", "b": "56 - 21", "c": "56 - 21", "d": "30 - 27"}
    assert read_ages(records, calculation) == {
        "questions": 4,
        "calls": 3,
        "first_right": 2,
        "second_right": 2,
        "both_right": 1,
    }


def test_a_lever_merges_its_world_and_ppo_keys_into_the_profile_s() -> None:
    from agentrl.quickstart.profiles import TWO_TOOL

    practice = lever_profile(TWO_TOOL, LEVERS["practice3"][1])
    assert practice.world == TWO_TOOL.world | {"arithmetic_practice": 3}
    turns = lever_profile(TWO_TOOL, LEVERS["sequential_turns3"][1])
    assert turns.ppo == TWO_TOOL.ppo | {"actor.rollout.max_turns": 3}
    assert not turns.sft_parallel_searches and TWO_TOOL.sft_parallel_searches
    with pytest.raises(TypeError):
        lever_profile(TWO_TOOL, {"no_such_field": 1})
