"""The training time a run has spent against ``trainer.time_budget_minutes``, carried across resumes."""

from __future__ import annotations

import time

__all__ = ["TimeBudget"]


class TimeBudget:
    """Seconds of ``fit()`` spent so far: those of earlier processes (from the checkpoint) plus
    this one's since ``start()``. Over budget once they reach ``minutes`` (None: never)."""

    def __init__(self, minutes: float | None, clock=time.monotonic) -> None:
        if minutes is not None and minutes <= 0:
            raise ValueError(f"time budget must be > 0 minutes or None, got {minutes}")
        self.minutes = minutes
        self.clock = clock
        self.spent_before = 0.0  # a resumed run's earlier processes (trainer_state.pt)
        self._started: float | None = None

    def start(self) -> None:
        self._started = self.clock()

    def spent_s(self) -> float:
        running = 0.0 if self._started is None else self.clock() - self._started
        return self.spent_before + running

    def over(self) -> bool:
        return self.minutes is not None and self.spent_s() >= 60 * self.minutes
