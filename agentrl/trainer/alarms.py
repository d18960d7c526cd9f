"""Dead-signal alarms: the console says so when training has stopped receiving a learning signal.

A run can go on for hours with nothing to learn from and every loss finite: the policy never
calls a tool, every sample scores the same, or every group of a group estimator ties (advantage
0 everywhere). ``DeadSignalAlarms`` reads each step's metrics, counts how many steps in a row
each condition has held, returns the counts as ``alarms/*`` metrics, and warns once per streak:

======================================  =====================================================
``alarms/no_tool_call_steps``           steps in a row whose rollouts made no tool call
                                        (``rollout/tool_calls`` = 0; runs with tools only)
``alarms/constant_reward_steps``        steps in a row in which every sample scored the same
                                        value as every sample of the step before
                                        (``signal/score_spread`` = 0, ``reward/score/mean``
                                        unchanged)
``alarms/all_groups_tied_steps``        steps in a row whose groups all tied
                                        (``signal/tied_group_share`` = 1; group estimators)
======================================  =====================================================

The first two warn when their streak reaches ``after_steps``; a step whose groups all tie
warns at once (that step's update had nothing to learn from).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tqdm import tqdm

__all__ = ["DeadSignalAlarms"]

_SAME = 1e-9


class DeadSignalAlarms:
    """Streaks of steps without a learning signal, as metrics and console warnings."""

    def __init__(
        self,
        after_steps: int,
        watch_tools: bool,
        watch_groups: bool,
        warn: Callable[[str], None] = tqdm.write,
        dynamic_sampling: bool = False,
    ) -> None:
        if after_steps < 0:
            raise ValueError(f"after_steps must be >= 0 (0: off), got {after_steps}")
        self.after_steps = after_steps
        self.watch_tools = watch_tools
        self.watch_groups = watch_groups
        self.warn = warn
        self.remedy = (
            "raise algorithm.dynamic_sampling.max_rounds, or train on easier questions"
            if dynamic_sampling
            else "algorithm.dynamic_sampling.enable=true draws more prompts instead"
        )
        self.no_tool_call_steps = 0
        self.constant_reward_steps = 0
        self.all_groups_tied_steps = 0
        self._last_score: float | None = None

    @property
    def enabled(self) -> bool:
        return self.after_steps > 0

    def observe(self, step: int, metrics: Mapping[str, float]) -> dict[str, float]:
        """Update the streaks with step ``step``'s metrics; the ``alarms/*`` metrics (empty when off)."""
        if not self.enabled:
            return {}
        out: dict[str, float] = {}
        if self.watch_tools and "rollout/tool_calls" in metrics:
            self.no_tool_call_steps = self.no_tool_call_steps + 1 if metrics["rollout/tool_calls"] == 0 else 0
            out["alarms/no_tool_call_steps"] = float(self.no_tool_call_steps)
            if self.no_tool_call_steps == self.after_steps:
                self.warn(
                    f"warning: step {step}: no tool was called in the last {self.after_steps} steps "
                    "(rollout/tool_calls = 0): the policy is answering without its tools; check the "
                    "instruction, the tool format and the warm start"
                )
        if "signal/score_spread" in metrics and "reward/score/mean" in metrics:
            out["alarms/constant_reward_steps"] = float(self._constant_reward(step, metrics))
        if self.watch_groups and "signal/tied_group_share" in metrics:
            all_tied = metrics["signal/tied_group_share"] >= 1.0
            self.all_groups_tied_steps = self.all_groups_tied_steps + 1 if all_tied else 0
            out["alarms/all_groups_tied_steps"] = float(self.all_groups_tied_steps)
            if all_tied:
                self.warn(
                    f"warning: step {step}: every group's samples scored alike (signal/tied_group_share"
                    f" = 1, {self.all_groups_tied_steps} step(s) in a row): advantage 0, this update "
                    f"learned nothing; {self.remedy}"
                )
        return out

    def _constant_reward(self, step: int, metrics: Mapping[str, float]) -> int:
        score = metrics["reward/score/mean"]
        uniform = metrics["signal/score_spread"] <= _SAME
        same_as_before = self._last_score is not None and abs(score - self._last_score) <= _SAME
        if not uniform:
            self.constant_reward_steps = 0
        elif same_as_before:
            self.constant_reward_steps += 1
        else:
            self.constant_reward_steps = 1  # a uniform step starts a streak
        self._last_score = score
        if self.constant_reward_steps == self.after_steps:
            self.warn(
                f"warning: step {step}: every sample of the last {self.after_steps} steps scored "
                f"{score:g} (signal/score_spread = 0): no advantage, no learning; check the reward "
                "(data_source, answer format) against a few dumped trajectories "
                "(trainer.dump_trajectories=true)"
            )
        return self.constant_reward_steps
