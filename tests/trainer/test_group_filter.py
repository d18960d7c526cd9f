"""Dynamic sampling without Ray: which groups a step keeps, how many rounds it draws, and the
data loader's position across a resume."""

from __future__ import annotations

import itertools

import pytest
import torch

from agentrl.agent.collate import collate
from agentrl.agent.generation import RolloutResult
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.trainer.dataset import StatefulLoader
from agentrl.trainer.group_filter import Scored, fill_groups, select_groups, signal_metrics, tied_share

N = 2  # samples per prompt


def _collate(trajectories):
    return collate(trajectories, pad_token_id=0)


class Rounds:
    """Draws rounds from a real loader; a prompt p scores [1, 0] (informative) when ``signal(p)``,
    else [0, 0] (tied). Records every prompt it drew."""

    def __init__(self, loader: StatefulLoader, signal=lambda p: p % 3 == 0):
        self.loader, self.signal = loader, signal
        self.drawn: list[int] = []
        self.uids = itertools.count()

    def scored(self, prompts: list[int]) -> Scored:
        self.drawn += prompts
        trajectories, scores = [], []
        for p in prompts:
            group = f"g{p}-{next(self.uids)}"
            for k in range(N):
                trajectories.append(
                    Trajectory(
                        prompt=PromptSpec([p + 1]),
                        group_id=group,
                        uid=f"{group}-{k}",
                        response_ids=[7],
                        segments=[Segment.MODEL],
                        log_probs=[0.0],
                    )
                )
                scores.append(float(self.signal(p) and k == 0))
        batch = _collate(trajectories)
        batch["scores"] = torch.tensor(scores)
        metrics = {"rollout/tool_calls": 1.0, "rollout/tool_busy_s": 2.0, "engine/sync_s": 0.5}
        rollout = RolloutResult(trajectories, metrics, per_rank=("engine/sync_s",))
        return Scored(rollout, batch, {"reward/em": sum(scores)})

    def draw(self, round_index: int) -> Scored:
        return self.scored(self.loader.next_batch())

    def step(self, target: int, max_rounds: int) -> tuple[Scored, dict]:
        return fill_groups(self.scored(self.loader.next_batch()), self.draw, _collate, target, max_rounds)


def _prompts_of(scored: Scored) -> list[int]:
    return [t.prompt.prompt_ids[0] - 1 for t in scored.rollout.trajectories[::N]]


def test_tied_share_counts_groups_whose_scores_are_exactly_equal_as_the_estimators_do():
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5 + 1e-6, 0.25, 0.25])
    # a nearly equal pair (a reward model's) still has a non-zero GRPO advantage: not tied
    assert tied_share(["a", "a", "b", "b", "c", "c", "d", "d"], scores) == pytest.approx(2 / 4)


def test_select_keeps_the_first_informative_groups_in_draw_order_and_drops_the_tied():
    ids = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e"]
    scores = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    picked = select_groups(ids, scores, target=2)
    assert picked.rows == [2, 3, 6, 7] and picked.informative == 2 and picked.padded == 0


def test_select_pads_with_tied_groups_in_draw_order_when_too_few_differ():
    ids = ["a", "a", "b", "b", "c", "c"]
    scores = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    picked = select_groups(ids, scores, target=2)
    assert picked.rows == [0, 1, 4, 5] and picked.informative == 1 and picked.padded == 1
    with pytest.raises(ValueError, match="fewer than the 4"):
        select_groups(ids, scores, target=4)


def test_tied_groups_are_dropped_and_refilled_until_the_batch_holds_the_target():
    rounds = Rounds(StatefulLoader(list(range(30)), batch_size=3, shuffle=False, seed=0))
    kept, metrics = rounds.step(target=3, max_rounds=10)
    # prompts 0..8 drawn in 3 rounds of 3; the informative ones are 0, 3, 6
    assert rounds.drawn == list(range(9))
    assert _prompts_of(kept) == [0, 3, 6]
    assert len(kept.batch) == 3 * N and torch.equal(kept.batch["scores"], torch.tensor([1.0, 0.0] * 3))
    assert [t.group_id for t in kept.rollout.trajectories] == list(kept.batch["group_id"])
    assert metrics["dynamic_sampling/rounds"] == 3 and metrics["dynamic_sampling/prompts_consumed"] == 9
    assert metrics["signal/tied_group_share"] == pytest.approx(6 / 9)
    assert (
        metrics["dynamic_sampling/informative_groups"] == 3 and metrics["dynamic_sampling/padded_groups"] == 0
    )
    assert kept.reward_metrics == {"reward/em": pytest.approx(1.0)}  # each round's mean, weighted by rows
    # rollout metrics recomputed over all 18 trajectories; the rounds' seconds summed
    assert (
        kept.rollout.metrics["rollout/num_turns"] == 0.0 and kept.rollout.metrics["rollout/tool_calls"] == 0.0
    )
    assert kept.rollout.metrics["rollout/tool_busy_s"] == 6.0 and kept.rollout.metrics["engine/sync_s"] == 1.5


def test_a_step_stops_after_max_rounds_and_fills_with_tied_groups_saying_how_many():
    rounds = Rounds(StatefulLoader(list(range(30)), batch_size=3, shuffle=False, seed=0), lambda p: p == 4)
    kept, metrics = rounds.step(target=3, max_rounds=2)
    assert rounds.drawn == list(range(6))
    assert _prompts_of(kept) == [0, 1, 4]  # the informative group, then tied ones in draw order
    assert len(kept.batch) == 3 * N
    assert (
        metrics["dynamic_sampling/padded_groups"] == 2 and metrics["dynamic_sampling/informative_groups"] == 1
    )


def test_a_first_round_with_enough_signal_draws_nothing_more_and_discards_the_excess():
    rounds = Rounds(StatefulLoader(list(range(30)), batch_size=3, shuffle=False, seed=0), lambda p: True)
    kept, metrics = rounds.step(target=3, max_rounds=4)
    assert rounds.drawn == [0, 1, 2] and metrics["dynamic_sampling/rounds"] == 1
    assert kept.rollout.metrics["rollout/tool_calls"] == 1.0  # one round: its own metrics, as they were


def test_a_resumed_run_consumes_the_same_prompts_as_an_uninterrupted_one():
    def loader():
        return StatefulLoader(list(range(40)), batch_size=3, shuffle=True, seed=5)

    whole = Rounds(loader())
    whole_steps = [_prompts_of(whole.step(target=2, max_rounds=3)[0]) for _ in range(5)]

    first = Rounds(loader())
    steps = [_prompts_of(first.step(target=2, max_rounds=3)[0]) for _ in range(2)]
    state = first.loader.state_dict()  # what the checkpoint after step 2 holds
    resumed_loader = loader()
    resumed_loader.load_state_dict(state)
    resumed = Rounds(resumed_loader)
    steps += [_prompts_of(resumed.step(target=2, max_rounds=3)[0]) for _ in range(3)]

    assert steps == whole_steps
    assert first.drawn + resumed.drawn == whole.drawn  # every prompt consumed, in the same order


def test_signal_metrics_are_over_every_sample_and_tie_only_for_group_estimators():
    scores = torch.tensor([0.0, 0.0, 1.0, 0.0])
    assert signal_metrics(["a", "a", "b", "b"], scores, grouped=True) == {
        "signal/score_mean": 0.25,
        "signal/score_spread": 1.0,
        "signal/tied_group_share": 0.5,
    }
    ungrouped = signal_metrics(["a", "b", "c", "d"], scores, grouped=False)
    assert ungrouped == {"signal/score_mean": 0.25, "signal/score_spread": 1.0}


def test_a_group_whose_outcomes_tie_but_turn_rewards_differ_is_informative_and_one_whose_both_tie_is_not():
    groups = ["a", "a", "b", "b", "c", "c"]
    outcomes = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    # a: one sample's search hit pays, the other's does not; b: both earn 0.2, at different turns
    # (the pooled turn rewards differ, so the turn scheme credits them: informative); c: all tie
    turns = [[0.2, 0.0], [0.0, 0.0], [0.2, 0.0], [0.0, 0.2], [0.0], [0.0, 0.0]]
    selection = select_groups(groups, outcomes, target=1, turn_values=turns)
    assert selection.rows == [0, 1] and selection.informative == 1
    assert tied_share(groups, outcomes, turns) == pytest.approx(1 / 3)  # c alone
    assert tied_share(groups, outcomes) == 1.0  # by outcomes alone every group ties


def test_dynamic_sampling_keeps_a_stepped_trajectorys_rows_with_its_outcome_on_each():
    def stepped(group: str, k: int, steps: int) -> Trajectory:
        t = Trajectory(prompt=PromptSpec([1]), group_id=group, uid=f"{group}-{k}")
        for step in range(steps):
            if step:
                t.begin_step([1, 2, 3], "context_compacted")
            t.append([7, 8], Segment.MODEL, [0.0, 0.0])
            t.step_turns.append(step)
            t.step_turn_ends.append(1)
        return t

    trajectories = [stepped("g0", 0, 3), stepped("g0", 1, 1), stepped("g1", 0, 2), stepped("g1", 1, 1)]
    batch = _collate(trajectories)
    assert len(batch) == 7
    batch["scores"] = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])  # g0: 1 vs 0; g1: tied
    first = Scored(RolloutResult(trajectories, {}), batch)
    assert first.outcomes.tolist() == [1.0, 0.0, 0.0, 0.0]
    kept, metrics = fill_groups(first, lambda _: first, _collate, target=1, max_rounds=1)
    assert [t.uid for t in kept.rollout.trajectories] == ["g0-0", "g0-1"]
    assert len(kept.batch) == 4 and kept.batch["scores"].tolist() == [1.0, 1.0, 1.0, 0.0]
    assert metrics["dynamic_sampling/informative_groups"] == 1.0


def test_with_signal_outcome_a_group_whose_turn_rewards_alone_differ_does_not_fill_the_step():
    def round_of(group: str, outcomes: list[float], hits: list[float]) -> Scored:
        trajectories = []
        for k in range(2):
            t = Trajectory(prompt=PromptSpec([1]), group_id=group, uid=f"{group}-{k}")
            t.append([7, 8], Segment.MODEL, [0.0, 0.0])  # one turn: a search
            t.step_turns.append(0)
            t.step_turn_ends.append(1)
            trajectories.append(t)
        batch = _collate(trajectories)
        batch["scores"] = torch.tensor(outcomes)
        batch["turn_scores"] = torch.zeros(batch["response_turn_ends"].shape)
        batch["turn_scores"][batch["response_turn_ends"].bool()] = torch.tensor(hits)
        return Scored(RolloutResult(trajectories, {}), batch)

    searches_differ = round_of("g0", [0.0, 0.0], [0.2, 0.0])
    outcomes_differ = round_of("g1", [1.0, 0.0], [0.0, 0.0])
    assert searches_differ.turn_values == [[pytest.approx(0.2)], [0.0]]

    def run(by_turns: bool) -> tuple[Scored, dict]:
        return fill_groups(searches_differ, lambda _: outcomes_differ, _collate, 1, 2, by_turns)

    kept, metrics = run(by_turns=True)
    assert [t.group_id for t in kept.rollout.trajectories] == ["g0", "g0"]
    assert metrics["dynamic_sampling/rounds"] == 1.0
    kept, metrics = run(by_turns=False)
    assert [t.group_id for t in kept.rollout.trajectories] == ["g1", "g1"]
    assert metrics["dynamic_sampling/rounds"] == 2.0 and metrics["dynamic_sampling/informative_groups"] == 1.0
