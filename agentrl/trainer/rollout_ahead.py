"""Rollouts drawn ahead a step at a time: each submitted before the step that trains on it.

With ``trainer.max_staleness`` k and ``trainer.take_groups=by_step`` the next steps' rollouts are
held here in flight, oldest first: each submitted before an earlier step's update (``fill``) and
trained on by its own step (``take``), up to k at once, generating on the rollout workers (or, for
k = 1, on the actor's engine) while the actor trains. A checkpoint resumes before the prompts of the
oldest in flight (``loader_state``): those in flight are dropped, and redrawn. ``group_buffer.py``
holds the other choice, groups taken as they finish.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.agent.generation import RolloutResult
from agentrl.cluster.group import Pending
from agentrl.trainer.group_filter import Scored


@dataclass
class Taken:
    """What a step takes of the rollouts drawn ahead: the rollout it trains on and the figures of
    what held it; where a screen judged the groups (dynamic sampling by groups), each taken group's
    scores, in the rollout's order, and those of the groups it left out of the run."""

    rollout: RolloutResult
    metrics: dict[str, float] = field(default_factory=dict)
    scored: list[Scored] | None = None  # None: no screen judged them, the step scores the rollout
    left_out: list[Scored] = field(default_factory=list)


@dataclass
class RolloutAhead:
    """A rollout submitted before the step that trains on it, generating during the updates of
    the steps before (its weights up to k updates stale)."""

    pending: Pending
    loader_state: dict  # the loader before its prompts were drawn: a checkpoint resumes there
    _result: RolloutResult | None = None

    def result(self) -> RolloutResult:
        """The rollout's result, waited for once and then kept."""
        if self._result is None:
            self._result = self.pending.result()
        return self._result


# submit(step, weights_version): step ``step``'s prompts drawn and their rollout started
SubmitStep = Callable[[int, int], RolloutAhead]


class StepsAhead:
    """The next steps' rollouts in flight, oldest first (module docstring)."""

    def __init__(self, submit: SubmitStep, loader: Any, waits_before_serving: bool) -> None:
        """``waits_before_serving``: the generator is the actor, whose engine serves one rollout at
        a time (``drain`` waits for those in flight)."""
        self.submit, self.loader, self.waits_before_serving = submit, loader, waits_before_serving
        self.ahead: deque[RolloutAhead] = deque()

    @property
    def in_flight(self) -> int:
        """How many rollouts drawn ahead are in flight (their prompts drawn: steps still to train)."""
        return len(self.ahead)

    def drain(self) -> None:
        """Before the generator serves something else (a validation): wait for the rollouts in flight
        where it is the actor; rollout workers serve it beside them."""
        if self.waits_before_serving:
            for ahead in self.ahead:
                ahead.result()

    def loader_state(self) -> dict:
        """Before the prompts of the oldest rollout in flight, else where the loader stands."""
        return self.ahead[0].loader_state if self.ahead else self.loader.state_dict()

    def record(self) -> dict:
        """Nothing beyond ``loader_state``: the rollouts in flight are redrawn whole."""
        return {}

    def restore(self, record: dict) -> None:
        """Nothing to restore (``record``)."""

    def take(self, step: int, screen: None = None) -> Taken:
        """The rollout (0-based) step ``step`` trains on, waited for: the oldest in flight, or one
        submitted now (a run's first step, or the first after a resume); no figures of its own. A
        step's rollout is taken whole: no screen (the config refuses dynamic sampling by step)."""
        if screen is not None:
            raise ValueError("a rollout drawn ahead by step is taken whole: no screen")
        ahead = self.ahead.popleft() if self.ahead else self.submit(step, step)
        return Taken(ahead.result())

    def draw(self, step: int, weights_version: int) -> None:
        """Submit (0-based) step ``step``'s rollout now, on the generator's weights of
        ``weights_version`` updates; it generates during the updates of the steps before it."""
        self.ahead.append(self.submit(step, weights_version))

    def fill(
        self, step: int, bound: int, will_run: Callable[[int], bool], before_draw: Callable[[], Any] | None
    ) -> None:
        """Keep ``bound`` rollouts in flight during (0-based) step ``step``, fewer where the steps
        they are for will not run (``will_run(j)``: whether step ``step + j`` does), each drawn on
        the weights of now: the one for step ``step + j`` trains j updates later, so none is staler
        than ``bound``. ``before_draw``, when given, runs before each draw (a weight sync)."""
        while self.in_flight < bound and will_run(self.in_flight + 1):
            if before_draw is not None:
                before_draw()
            self.draw(step + self.in_flight + 1, step)
