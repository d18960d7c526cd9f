"""One-step-off-policy's rollout in flight: submitted before the step that trains on it."""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.agent.generation import RolloutResult
from agentrl.cluster.group import Pending


@dataclass
class RolloutAhead:
    """A rollout submitted before the step that trains on it, generating during the update of
    the step before (its weights one update stale)."""

    pending: Pending
    loader_state: dict  # the loader before its prompts were drawn: a checkpoint resumes there
    _result: RolloutResult | None = None

    def result(self) -> RolloutResult:
        """The rollout's result, waited for once and then kept."""
        if self._result is None:
            self._result = self.pending.result()
        return self._result
