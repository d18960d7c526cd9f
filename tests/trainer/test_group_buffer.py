"""The group buffer's promises (``trainer/group_buffer.py``), on a clock the test advances.

Each group finishes a set time after it is submitted; a step's update advances the clock by its
own time. The buffer sees only what it would see on Ray: which of its calls are done, and a wait
that returns once one is.
"""

from __future__ import annotations

import random

import pytest

from agentrl.agent.generation import RolloutResult
from agentrl.agent.trajectory import PromptSpec, Trajectory
from agentrl.trainer.dataset import StatefulLoader
from agentrl.trainer.group_buffer import GroupBuffer, Screen

BATCH = 4  # prompts a step
TRAIN_S = 1.0  # an update's time on the clock
FAST_S = 0.1


class Call:
    """One group's call: done once the clock reaches its finish time."""

    def __init__(self, clock: Clock, finish: float, draw: int, index: int, version: int) -> None:
        self.clock, self.finish = clock, finish
        self.draw, self.index, self.version = draw, index, version

    def done(self) -> bool:
        return self.clock.now >= self.finish

    def result(self) -> RolloutResult:
        assert self.done(), "a result is only read once its call is done"
        group = f"d{self.draw}-p{self.index}"
        trajectories = []
        for k in range(2):
            t = Trajectory(prompt=PromptSpec([self.index + 1]), group_id=group, uid=f"{group}-{k}")
            t.turn_versions.append(self.version)
            trajectories.append(t)
        return RolloutResult(trajectories, {})


class Clock:
    """A rollout-worker group whose calls take ``duration(draw, index)`` seconds of the clock."""

    def __init__(self, duration, world_size: int = 2) -> None:
        self.duration, self.world_size = duration, world_size
        self.now = 0.0
        self.waited_s = 0.0
        self.submitted: dict[tuple[int, int], int] = {}  # (draw, index): the prompt
        self.ranks: list[int] = []

    def submit(self, prompt: int, draw: int, index: int, version: int, rank: int) -> Call:
        self.submitted[draw, index] = prompt
        self.ranks.append(rank)
        return Call(self, self.now + self.duration(draw, index), draw, index, version)

    def wait_any(self, pending: list[Call], method: str) -> None:
        assert pending and not any(p.done() for p in pending), "a wait is only for calls not done"
        finish = min(p.finish for p in pending)
        self.waited_s += finish - self.now
        self.now = finish


def buffer_on(clock: Clock, max_staleness: int, stale_group: str = "wait", prompts: int = 64) -> GroupBuffer:
    """A buffer of groups on ``clock``, drawing as ``max_staleness`` allows after each step's take."""
    loader = StatefulLoader(list(range(prompts)), BATCH, shuffle=True, seed=3)
    return GroupBuffer(loader, clock, clock.submit, BATCH, max_staleness, stale_group)


def train(
    buffer: GroupBuffer,
    clock: Clock,
    steps: int,
    ahead: int,
    stop_after: int | None = None,
    screen: Screen | None = None,
) -> list[dict]:
    """The loop of ``PPOTrainer.off_policy_step`` for a run of ``steps``: take (judged by ``screen``),
    draw ``ahead`` steps' worth, update; ``stop_after``: the run killed after that many steps."""
    taken = []
    for step in range(steps if stop_after is None else stop_after):
        took = buffer.take(step, screen)
        rollout = took.rollout
        groups = sorted({t.group_id for t in rollout.trajectories}, key=rollout_order(rollout))
        versions = {t.group_id: t.turn_versions[0] for t in rollout.trajectories}
        left_out = [t.group_id for part in took.left_out for t in part.trajectories[:1]]
        row = {"groups": groups, "staleness": [step - versions[g] for g in groups], "left_out": left_out}
        taken.append(row | took.metrics)
        buffer.fill(step, ahead, lambda j, step=step: step + j < steps, None)
        clock.now += TRAIN_S
    return taken


def rollout_order(rollout: RolloutResult):
    first = {}
    for i, t in enumerate(rollout.trajectories):
        first.setdefault(t.group_id, i)
    return first.__getitem__


def draw_of(group: str) -> tuple[int, int]:
    draw, prompt = group.split("-")
    return int(draw[1:]), int(prompt[1:])


def test_one_step_of_staleness_leaves_no_choice_so_each_step_trains_the_groups_drawn_for_it():
    rng = random.Random(0)
    durations = {}
    clock = Clock(lambda d, i: durations.setdefault((d, i), rng.lognormvariate(-1.0, 1.0)))
    taken = train(buffer_on(clock, 1), clock, 6, 1)
    for step, batch in enumerate(taken):
        assert [draw_of(g) for g in batch["groups"]] == [(step, i) for i in range(BATCH)]
        assert batch["staleness"] == [min(step, 1)] * BATCH


def test_a_slow_group_does_not_hold_its_step_up_and_is_trained_by_a_later_step_within_the_bound():
    slow = (1, 0)  # draw 1's first prompt: submitted on weights 0, so trained by step 2 at the latest
    clock = Clock(lambda d, i: 1.6 if (d, i) == slow else FAST_S)
    taken = train(buffer_on(clock, 2), clock, 5, 2)
    assert "d1-p0" not in taken[1]["groups"] and "d1-p0" in taken[2]["groups"]
    assert taken[1]["rollout_buffer/bound_waits"] == 0 and taken[1]["rollout_buffer/draws_in_batch"] == 2
    assert all(len(b["groups"]) == BATCH and max(b["staleness"]) <= 2 for b in taken)
    # drawn by step, the step it was drawn for waits for it
    stepwise = Clock(lambda d, i: 1.6 if (d, i) == slow else FAST_S)
    train(buffer_on(stepwise, 1), stepwise, 5, 1)
    assert clock.waited_s < stepwise.waited_s - 0.5


def test_drawing_fewer_steps_ahead_than_the_bound_leaves_a_slow_group_time_at_the_same_staleness():
    slow = (4, 1)  # drawn after step 2's take (weights 2), done 3 s later, past step 4's start
    durations = lambda d, i: 3.0 if (d, i) == slow else FAST_S  # noqa: E731
    tight, loose = Clock(durations), Clock(durations)
    by_draw = train(buffer_on(tight, 2), tight, 8, ahead=2)  # each draw at its bound when taken
    left = train(buffer_on(loose, 4), loose, 8, ahead=2)  # two steps ahead too, bound 4
    assert all(b["rollout_buffer/draws_in_batch"] == 1 for b in by_draw)
    assert [b["rollout_buffer/bound_waits"] for b in by_draw][4] == 1 and "d4-p1" in by_draw[4]["groups"]
    assert "d4-p1" in left[5]["groups"] and all(g.startswith("d4-") for g in left[4]["groups"][:3])
    assert all(b["rollout_buffer/bound_waits"] == 0 for b in left) and loose.waited_s < tight.waited_s - 0.5
    assert max(s for b in left for s in b["staleness"]) == 3  # the slow group's; the rest at most 2


def test_a_group_at_the_bound_is_waited_for_and_counted():
    slow = (1, 0)  # done at 2.6 on the clock; step 2 starts at 2.2 and must train it
    clock = Clock(lambda d, i: 2.5 if (d, i) == slow else FAST_S)
    taken = train(buffer_on(clock, 2), clock, 4, 2)
    assert "d1-p0" in taken[2]["groups"] and taken[2]["staleness"][taken[2]["groups"].index("d1-p0")] == 2
    assert [b["rollout_buffer/bound_waits"] for b in taken] == [0, 0, 1, 0]
    assert all(b["rollout_buffer/dropped_groups"] == 0 for b in taken)


def test_with_drop_a_group_past_the_bound_leaves_the_run_counted_and_the_batch_is_still_full():
    slow = (1, 0)
    clock = Clock(lambda d, i: 2.5 if (d, i) == slow else FAST_S)
    taken = train(buffer_on(clock, 2, "drop"), clock, 5, 2)
    assert all("d1-p0" not in b["groups"] for b in taken)
    assert [b["rollout_buffer/dropped_groups"] for b in taken] == [0, 0, 0, 1, 0]
    assert all(len(b["groups"]) == BATCH and max(b["staleness"]) <= 2 for b in taken)
    assert all(b["rollout_buffer/bound_waits"] == 0 for b in taken)


@pytest.mark.parametrize("stale_group", ["wait", "drop"])
@pytest.mark.parametrize("max_staleness", [2, 4])
def test_under_any_finishing_order_no_trained_group_is_past_the_bound_nor_trained_twice(
    max_staleness, stale_group
):
    rng = random.Random(max_staleness)
    durations = {}
    clock = Clock(lambda d, i: durations.setdefault((d, i), rng.lognormvariate(0.0, 1.2)))
    taken = train(buffer_on(clock, max_staleness, stale_group), clock, 20, max_staleness)
    trained = [g for b in taken for g in b["groups"]]
    assert len(trained) == len(set(trained)) == 20 * BATCH
    assert all(0 <= s <= max_staleness for b in taken for s in b["staleness"])
    dropped = sum(b["rollout_buffer/dropped_groups"] for b in taken)
    waits = sum(b["rollout_buffer/bound_waits"] for b in taken)
    if stale_group == "wait":  # nothing leaves the run: the draws are trained in full, in order
        assert dropped == 0
        drawn = {draw_of(g)[0] for g in trained}
        assert {(d, i) for d in drawn for i in range(BATCH)} - {draw_of(g) for g in trained} <= {
            (d, i) for d in range(max(drawn) - max_staleness, max(drawn) + 1) for i in range(BATCH)
        }
    else:
        assert waits == 0
    # groups of one draw are taken in a batch of several draws whenever a slow one is left behind
    assert max(b["rollout_buffer/draws_in_batch"] for b in taken) > 1


def test_a_resumed_buffer_generates_again_exactly_the_groups_neither_trained_nor_dropped():
    slow = {(1, 0), (2, 3)}
    clock = Clock(lambda d, i: 2.5 if (d, i) in slow else FAST_S)
    buffer = buffer_on(clock, 2)
    train(buffer, clock, 10, 2, stop_after=2)
    outstanding = sorted((u.draw, u.index) for u in buffer.units)
    record, loader_state = buffer.record(), buffer.loader_state()
    assert outstanding and record["first_draw"] == 1

    again = Clock(lambda d, i: FAST_S)
    resumed = buffer_on(again, 2)
    resumed.loader.load_state_dict(loader_state)
    resumed.restore(record)
    resumed.take(2)
    resumed.fill(2, 2, lambda j: True, None)
    redrawn = sorted(key for key in again.submitted if key[0] <= max(d for d, _ in outstanding))
    assert redrawn == outstanding
    # the same prompts as the first run's, and later draws numbered on from the first run's
    assert all(clock.submitted[key] == again.submitted[key] for key in redrawn)
    later = sorted({d for d, _ in again.submitted} - {d for d, _ in redrawn})
    assert later == list(
        range(max(d for d, _ in clock.submitted) + 1, max(d for d, _ in again.submitted) + 1)
    )


def test_each_group_goes_to_the_least_busy_rollout_worker():
    clock = Clock(lambda d, i: FAST_S, world_size=2)
    train(buffer_on(clock, 2), clock, 3, 2)
    assert clock.ranks[:BATCH] == [0, 1, 0, 1]


def tied_screen(tied: set[tuple[int, int]], extra_draws: int = 3) -> tuple[Screen, list[str]]:
    """A screen on which the groups of ``tied`` (draw, prompt) carry no signal; the groups it scored,
    in order (the score is the rollout itself: the buffer only passes it on)."""
    judged: list[str] = []

    def score(rollout: RolloutResult) -> RolloutResult:
        judged.append(rollout.trajectories[0].group_id)
        return rollout

    def informative(rollout: RolloutResult) -> bool:
        return draw_of(rollout.trajectories[0].group_id) not in tied

    return Screen(score, informative, extra_draws), judged


def test_a_group_without_a_signal_leaves_the_run_at_once_counted_and_a_further_draw_takes_its_place():
    tied = {(0, 1), (1, 2), (1, 3)}
    clock = Clock(lambda d, i: FAST_S)
    screen, judged = tied_screen(tied)
    taken = train(buffer_on(clock, 2), clock, 5, 2, screen=screen)
    trained = [draw_of(g) for b in taken for g in b["groups"]]
    assert not set(trained) & tied and len(trained) == len(set(trained)) == 5 * BATCH
    assert sorted(draw_of(g) for b in taken for g in b["left_out"]) == sorted(tied)
    assert sum(b["dynamic_sampling/left_out_groups"] for b in taken) == len(tied)
    assert all(b["dynamic_sampling/padded_groups"] == 0 for b in taken)
    assert all(b["dynamic_sampling/informative_groups"] == BATCH for b in taken)
    assert all(max(b["staleness"]) <= 2 for b in taken)
    assert len(judged) == len(set(judged)), "each group is scored once"
    assert sum(b["dynamic_sampling/extra_draws"] for b in taken) >= 1  # draw 0 alone could not fill step 0


def test_when_the_extra_draws_run_out_the_groups_left_out_fill_the_batch_oldest_first():
    tied = {(d, i) for d in range(40) for i in range(BATCH)} - {(0, 0)}  # one group with a signal
    clock = Clock(lambda d, i: FAST_S)
    screen, _ = tied_screen(tied, extra_draws=1)
    (first,) = train(buffer_on(clock, 2), clock, 1, 2, screen=screen)
    assert first["dynamic_sampling/informative_groups"] == 1 and first["dynamic_sampling/extra_draws"] == 1
    assert first["dynamic_sampling/padded_groups"] == BATCH - 1
    assert [draw_of(g) for g in first["groups"]] == [(0, 0), (0, 1), (0, 2), (0, 3)], "the oldest pad"
    assert first["dynamic_sampling/left_out_groups"] == BATCH, "the extra draw's groups leave the run"


@pytest.mark.parametrize("stale_group", ["wait", "drop"])
@pytest.mark.parametrize("max_staleness", [2, 4])
def test_under_any_finishing_order_and_ties_a_screened_run_trains_full_batches_within_the_bound(
    max_staleness, stale_group
):
    rng = random.Random(10 + max_staleness)
    durations, ties = {}, {}
    clock = Clock(lambda d, i: durations.setdefault((d, i), rng.lognormvariate(0.0, 1.2)))
    tied = {(d, i) for d in range(200) for i in range(BATCH) if ties.setdefault((d, i), rng.random() < 0.3)}
    screen, judged = tied_screen(tied, extra_draws=2)
    taken = train(
        buffer_on(clock, max_staleness, stale_group, prompts=800), clock, 20, max_staleness, screen=screen
    )
    trained = [g for b in taken for g in b["groups"]]
    assert len(trained) == len(set(trained)) == 20 * BATCH
    assert all(0 <= s <= max_staleness for b in taken for s in b["staleness"])
    padded = sum(b["dynamic_sampling/padded_groups"] for b in taken)
    assert sum(draw_of(g) in tied for g in trained) == padded, "a tied group is trained only as padding"
    left = [g for b in taken for g in b["left_out"]]
    assert not set(left) & set(trained) and all(draw_of(g) in tied for g in left)
    assert len(judged) == len(set(judged))


def test_a_resumed_screened_buffer_does_not_generate_again_the_groups_it_left_out():
    tied = {(0, 2), (1, 0)}
    clock = Clock(lambda d, i: 2.5 if (d, i) == (1, 3) else FAST_S)
    buffer = buffer_on(clock, 2)
    screen, _ = tied_screen(tied)
    train(buffer, clock, 10, 2, stop_after=2, screen=screen)
    record, loader_state = buffer.record(), buffer.loader_state()
    again = Clock(lambda d, i: FAST_S)
    resumed = buffer_on(again, 2)
    resumed.loader.load_state_dict(loader_state)
    resumed.restore(record)
    resumed.take(2, screen)
    assert not tied & set(again.submitted), "left out before the checkpoint: not generated again"
    assert (1, 3) in again.submitted


class SecondLook(Call):
    """A call that finishes between two looks: done from the second time it is asked."""

    def __init__(self, clock: Clock, finish: float, draw: int, index: int, version: int) -> None:
        super().__init__(clock, finish, draw, index, version)
        self.looks = 0

    def done(self) -> bool:
        self.looks += 1
        return self.looks >= 2


def test_a_group_that_finishes_between_the_judging_and_the_take_is_judged_before_it_is_trained():
    clock = Clock(lambda d, i: FAST_S)
    loader = StatefulLoader(list(range(64)), BATCH, shuffle=True, seed=3)

    def submit(prompt: int, draw: int, index: int, version: int, rank: int) -> Call:
        clock.submit(prompt, draw, index, version, rank)
        return SecondLook(clock, 0.0, draw, index, version)

    buffer = GroupBuffer(loader, clock, submit, BATCH, 2, "wait")
    screen, judged = tied_screen({(0, 1)})
    took = buffer.take(0, screen)
    trained = [t.group_id for t in took.rollout.trajectories[::2]]
    assert "d0-p1" not in trained and len(trained) == BATCH
    assert set(trained) <= set(judged) and all(part is not None for part in took.scored)
