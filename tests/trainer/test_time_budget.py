"""The wall-time budget: spent seconds add up across a resume, and the trainer's run ends on it."""

from __future__ import annotations

import pytest
from test_old_log_prob_source import grpo_trainer

from agentrl.trainer.time_budget import TimeBudget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_counts_this_process_from_start_plus_what_earlier_ones_spent():
    clock = Clock()
    budget = TimeBudget(2.0, clock=clock)
    assert budget.spent_s() == 0 and not budget.over()
    budget.spent_before = 90.0  # a checkpoint's train_seconds
    budget.start()
    clock.now += 29.0
    assert budget.spent_s() == pytest.approx(119.0) and not budget.over()
    clock.now += 1.0
    assert budget.over(), "120 s of a 2-minute budget"


def test_no_budget_is_never_over_and_a_bad_one_is_refused():
    budget = TimeBudget(None)
    budget.spent_before = 1e9
    assert not budget.over()
    with pytest.raises(ValueError, match="> 0 minutes"):
        TimeBudget(0.0)


def test_the_trainer_finishes_once_its_budget_is_spent(tiny_model_dir, tmp_path):
    trainer = grpo_trainer(tiny_model_dir, tmp_path, skip_old_log_prob=True)
    trainer.budget = TimeBudget(1.0)
    assert not trainer.finished()
    trainer.budget.spent_before = 60.0
    assert trainer.finished(), "past its budget the run is over, whatever total_steps says"
