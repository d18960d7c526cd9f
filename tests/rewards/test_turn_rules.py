"""The rule rewards of single turns (``rewards/turns.py``), read straight off a batch's call rows."""

from __future__ import annotations

import pytest

from agentrl.rewards.turns import rule_turn_rewards

GOLD = {"target": ["4"]}
RULES = {"search_hit": 0.0, "search_tools": ["search"], "malformed_call": 0.0}


def test_a_calculation_that_gives_the_gold_answer_earns_its_turn_once():
    calls = [
        (0, "search", "ok", "Theflon is 84 years old."),
        (0, "search", "ok", "Quonbal is 80 years old."),
        (1, "calculate", "ok", "4"),
        (1, "calculate", "ok", "4"),  # a second right call in the same turn earns nothing more
        (2, "calculate", "ok", "5"),  # a wrong result
        (3, "calculate", "invalid/arguments", "4"),  # a malformed call's text is not a result
        (4, "search", "ok", "4"),  # not a calculating tool
        (9, "calculate", "ok", "4"),  # past the trajectory's turns
    ]
    rewards = rule_turn_rewards(calls, 5, GOLD, **RULES, calculation_hit=0.5)
    assert rewards == [0.0, 0.5, 0.0, 0.0, 0.0]
    assert rule_turn_rewards(calls, 5, GOLD, **RULES) == [0.0] * 5  # off by default
    renamed = rule_turn_rewards(calls, 5, GOLD, **RULES, calculation_hit=0.5, calculation_tools=["search"])
    assert renamed == [0.0, 0.0, 0.0, 0.0, 0.5]  # the tools that count are named by the config


def test_the_calculation_rule_adds_to_the_search_rule_on_the_same_turn():
    calls = [(0, "search", "ok", "the answer is 4"), (0, "calculate", "ok", "4")]
    both = rule_turn_rewards(calls, 1, GOLD, **(RULES | {"search_hit": 0.2}), calculation_hit=0.5)
    assert both == [pytest.approx(0.7)]
    with pytest.raises(ValueError, match="no 'target' key"):
        rule_turn_rewards(calls, 1, {"answers": ["4"]}, **RULES, calculation_hit=0.5)
