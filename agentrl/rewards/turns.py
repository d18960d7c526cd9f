"""Rule rewards for single turns: a search or a calculation that yields a gold answer, a malformed call.

``reward.turn`` (``TurnRewardConfig``) sets them; each turn's reward sits on that turn's last
sampled token, beside the outcome on the trajectory's last (``workers/reward.py`` places them).

* ``search_hit``: earned by each turn whose call to a search tool (``search_tools``, by name)
  came back with a gold answer in its text, on token boundaries after normalisation
  (``gold_in_documents``, the retriever's recall rule), once a turn. It reads the tool's text
  before the observation's cut to ``max_obs_length``, so a gold answer past the cut still
  counts. More searches can earn more; ``max_turns`` bounds them, and the group estimators
  compare each turn with the same turn of the group's other samples, so a search pays only
  where others at that turn did worse.
* ``calculation_hit``: earned by each turn whose call to a calculating tool
  (``calculation_tools``, by name) came back ``ok`` with a result that is a gold answer by exact
  match after normalisation (``exact_match``, the outcome's rule), once a turn: the turn that
  did the arithmetic is credited for it, not only the answer that copies its result.
* ``malformed_call``: added once per call of the turn that was malformed (status
  ``invalid/<reason>``); a negative value penalises it.

The tools' own rewards (``ToolResult.reward``, the rollout's ``turn_rewards``) are added to
these as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentrl.rewards.match import exact_match, gold_in_documents
from agentrl.rewards.scorers import golds_from_ground_truth

CallRow = tuple[int, Any, str, str]  # (turn, tool name, status, message): the batch's ``calls``


def rule_turn_rewards(
    calls: Sequence[CallRow],
    num_turns: int,
    ground_truth: Any,
    *,
    search_hit: float,
    search_tools: Sequence[str],
    malformed_call: float,
    calculation_hit: float = 0.0,
    calculation_tools: Sequence[str] = ("calculate",),
) -> list[float]:
    """The rule reward of each of ``num_turns`` turns (module docstring)."""
    rewards = [0.0] * num_turns
    golds = golds_from_ground_truth(ground_truth) if search_hit or calculation_hit else []
    if malformed_call:
        for turn, _, status, _ in calls:
            if status.startswith("invalid/") and turn < num_turns:
                rewards[turn] += malformed_call
    if search_hit:
        found = _turns_whose_call(calls, num_turns, search_tools, lambda m: gold_in_documents([m], golds))
        for turn in found:
            rewards[turn] += search_hit
    if calculation_hit:
        right = _turns_whose_call(calls, num_turns, calculation_tools, lambda m: exact_match(m, golds))
        for turn in right:
            rewards[turn] += calculation_hit
    return rewards


def _turns_whose_call(
    calls: Sequence[CallRow], num_turns: int, tools: Sequence[str], earns: Callable[[str], Any]
) -> set[int]:
    """The turns (below ``num_turns``) with an ``ok`` call to one of ``tools`` whose text ``earns``."""
    return {
        turn
        for turn, name, status, message in calls
        if status == "ok" and name in tools and turn < num_turns and earns(message)
    }
